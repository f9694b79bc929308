// Exhaustive check of the float cube roots in csrc/kernels/common/lp_math.h, over every float in the range the kernels trust
// ([2^-80, FLT_MAX]; sums outside it are recomputed in double):
//   - cube_root is correctly rounded but for the 70 inputs lp_math.h lists;
//   - fused_cube_root, wherever it does not set unsure, returns cube_root's value bit for bit.
// Exits non-zero if either fails. Build and run (about 20 s on 2 cores):
//   g++ -O2 -std=c++17 -mavx2 -mfma -mf16c -ffp-contract=off -fopenmp -Icsrc \
//       scripts/check_cube_root.cc -o /tmp/check_cube_root && /tmp/check_cube_root
// These are the avx2 build's flags (the headers are its kernels' layers): std::fma is one instruction and nothing
// else is fused, as in every vector lane of the kernels (aarch64's fmla rounds the same).
#include <cmath>
#include <cstdio>
#include <limits>

#define ONNX_POOLS_ISA root_check  // the per-ISA namespace of the kernel headers (kernels/common/per_isa.h)
#include "kernels/common/lp_math.h"

using onnx_pools::root_check::cube_root;
using onnx_pools::root_check::fused_cube_root;

// m^3 > v exactly, for m with at most 26 significant bits (a float or a midpoint of two): m^2 is exact in double and
// the fma's one rounding keeps the sign of m^2 m - v.
static bool cube_above(double m, float v) { return std::fma(m * m, m, -static_cast<double>(v)) > 0; }

static bool correctly_rounded(float v, float y) {
  const double up = std::nextafter(y, std::numeric_limits<float>::infinity());
  const double down = std::nextafter(y, 0.0f);
  return cube_above((y + up) / 2, v) && !cube_above((y + down) / 2, v);
}

int main() {
  const uint32_t first = onnx_pools::float_to_bits(0x1p-80f), last = onnx_pools::float_to_bits(3.4028234663852886e38f);
  unsigned long long total = 0, unsure = 0, differ = 0, not_rounded = 0;
#pragma omp parallel for reduction(+ : total, unsure, differ, not_rounded) schedule(static, 1 << 20)
  for (long long b = first; b <= static_cast<long long>(last); ++b) {
    const float v = onnx_pools::bits_to_float(static_cast<uint32_t>(b));
    const float exact = cube_root(v);
    ++total;
    not_rounded += !correctly_rounded(v, exact);
    int32_t flag = 0;
    const float fused = fused_cube_root(v, flag);
    unsure += flag != 0;
    differ += flag == 0 && fused != exact;
  }
  std::printf(
      "%llu floats: cube_root not correctly rounded for %llu (expected 70); fused_cube_root unsure of %llu "
      "(%.1e), differing from cube_root elsewhere for %llu (expected 0)\n",
      total, not_rounded, unsure, static_cast<double>(unsure) / static_cast<double>(total), differ);
  return not_rounded == 70 && differ == 0 ? 0 : 1;
}
