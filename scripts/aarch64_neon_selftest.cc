// Bit-for-bit check of csrc/kernels/common/simd_neon.h's intrinsics against the generic code they replace in the neon kernel set:
// every float16 -> float, ~154M float -> float16 (every exponent and top mantissa, the rounding bits at their
// boundaries, a stride over all floats, the half-subnormal range densely). Built statically for aarch64 and run under qemu by
// scripts/aarch64_check.sh (--full); exit status 0 when every value matches.
#include <cstdio>
#include <random>
#include <vector>

// as kernels/isa/neon.cc defines them for the kernel headers (kernels/common/per_isa.h)
#define ONNX_POOLS_NEON_INTRINSICS 1
#define ONNX_POOLS_ISA neon
#include "kernels/common/simd.h"
using namespace onnx_pools;
using namespace onnx_pools::neon;
static long fails = 0;
static void h2f_all() {
  std::vector<uint16_t> h(65536);
  std::vector<float> f(65536);
  for (int i = 0; i < 65536; ++i) h[i] = i;
  if (neon_halves_to_floats(h.data(), f.data(), 65536) != 65536) ++fails;
  long nan = 0;
  for (int i = 0; i < 65536; ++i) {
    const float r = to_float(Float16{h[i]});
    uint32_t a = float_to_bits(f[i]), b = float_to_bits(r);
    if (r != r) {
      ++nan;
      if (f[i] == f[i] || to_float16(f[i]).bits != to_float16(r).bits) {
        if (fails++ < 5) printf("h2f nan %04x\n", i);
      }
      continue;
    }
    if (a != b) {
      if (fails++ < 5) printf("h2f %04x: %08x vs %08x\n", i, a, b);
    }
  }
  printf("h2f: 65536 halves checked (%ld NaN: NaN both, same half back)\n", nan);
}
static void f2h_check(const std::vector<uint32_t>& bits) {
  const size_t n = bits.size() / 8 * 8;
  std::vector<float> f(n);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) f[i] = bits_to_float(bits[i]);
  neon_floats_to_halves(f.data(), h.data(), n);
  std::vector<uint16_t> g(n);
  floats_to_halves(reinterpret_cast<const aliased_u32*>(f.data()), g.data(), n);  // the generic loop
  for (size_t i = 0; i < n; ++i) {
    const uint16_t r = to_float16(f[i]).bits;
    if (h[i] != r || g[i] != r) {
      if (fails++ < 10) printf("f2h %08x: neon %04x generic %04x scalar %04x\n", bits[i], h[i], g[i], r);
    }
  }
}
static void f2h_all() {
  std::vector<uint32_t> b;
  // every sign, exponent and top 10 mantissa bits, with the 13 rounding bits at their boundary patterns
  const uint32_t lows[] = {0, 1, 0x7ff, 0xfff, 0x1000, 0x1001, 0x17ff, 0x1fff, 0x0800, 0x0801};
  for (uint32_t top = 0; top < (1u << 19); ++top)
    for (uint32_t lo : lows) b.push_back((top << 13) | lo);
  f2h_check(b);
  size_t total = b.size();
  b.clear();
  // every float with a stride (all exponents, mantissas spread)
  for (uint64_t u = 0; u < (1ull << 32); u += 61) {
    b.push_back(static_cast<uint32_t>(u));
    if (b.size() == (1u << 22)) {
      f2h_check(b);
      total += b.size();
      b.clear();
    }
  }
  f2h_check(b);
  total += b.size();
  b.clear();
  // the half-subnormal / small-normal range densely (float exponents 101..114)
  for (uint32_t u = 101u << 23; u < 115u << 23; u += 3) {
    b.push_back(u);
    b.push_back(u | 0x80000000u);
    if (b.size() >= (1u << 22)) {
      f2h_check(b);
      total += b.size();
      b.clear();
    }
  }
  f2h_check(b);
  total += b.size();
  printf("f2h: %zu floats checked\n", total);
}
int main() {
  h2f_all();
  f2h_all();
  printf("%s: %ld failures\n", fails ? "FAILED" : "OK", fails);
  return fails != 0;
}
