// Picks the kernel table for this CPU once, at the first kernels() call (the first kernel run or the first
// onnx_pools_isa query), reading ONNX_POOLS_ISA then. It forces a path: on x86-64
// portable|avx2|avx512 (never one the CPU lacks), on aarch64 portable|neon. The kernel sets built are chosen
// by CMakeLists.txt with the same compiler macros used here (__x86_64__, __aarch64__).
#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"

namespace onnx_pools {
namespace {

bool forced(const char* isa) {
  const char* want = std::getenv("ONNX_POOLS_ISA");
  return want && std::strcmp(want, isa) == 0;
}

#if defined(__x86_64__)
#if !defined(ONNX_POOLS_WITHOUT_AVX512)  // see CMakeLists.txt
bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
}
#endif
bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

const KernelTable& choose() {
  __builtin_cpu_init();
  const bool want_portable = forced("portable");
#if !defined(ONNX_POOLS_WITHOUT_AVX512)
  if (!want_portable && !forced("avx2") && cpu_has_avx512()) return avx512::table();
#endif
  if (!want_portable && cpu_has_avx2()) return avx2::table();
  return portable::table();
}
#elif defined(__aarch64__)
// Advanced SIMD (NEON) is part of every armv8-a CPU: no runtime check.
const KernelTable& choose() { return forced("portable") ? portable::table() : neon::table(); }
#else
const KernelTable& choose() { return portable::table(); }
#endif

}  // namespace

const KernelTable& kernels() {
  static const KernelTable& chosen = choose();
  return chosen;
}

}  // namespace onnx_pools
