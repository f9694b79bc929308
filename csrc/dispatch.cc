// Picks the kernel table for this CPU once, when the library loads. ONNX_POOLS_ISA=portable|avx2|avx512
// forces a path (never one the CPU lacks), so tests can cover every path the dispatcher can take.
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels.h"

namespace onnx_pools {
namespace {

bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
}
bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

const KernelTable& choose() {
  __builtin_cpu_init();
  const char* forced = std::getenv("ONNX_POOLS_ISA");
  const bool want_portable = forced && std::strcmp(forced, "portable") == 0;
  const bool want_avx2 = forced && std::strcmp(forced, "avx2") == 0;
  if (!want_portable && !want_avx2 && cpu_has_avx512()) return avx512::table();
  if (!want_portable && cpu_has_avx2()) return avx2::table();
  return portable::table();
}

}  // namespace

const KernelTable& kernels() {
  static const KernelTable& chosen = choose();
  return chosen;
}

ScratchBuffer::ScratchBuffer(size_t bytes) : data_(std::malloc(bytes > 0 ? bytes : 1)) {
  if (data_ == nullptr) throw std::bad_alloc();
}
ScratchBuffer::~ScratchBuffer() { std::free(data_); }

}  // namespace onnx_pools
