// The compute kernels' interface: compiled once per instruction set (kernels/isa/<isa>.cc, each including
// table_impl.h) and picked at load time by the CPU dispatcher (dispatch.cc). Each entry works on a range of
// independent units (channels or planes) so the op layer can spread units over ORT's intra-op thread pool.
#pragma once
#include <cstdint>

#include "kernels/common/element_types.h"
#include "kernels/common/lp_norm.h"
#include "kernels/common/window_geometry.h"

namespace onnx_pools {

// The tables below are indexed by FloatType / QuantType (element_types.h) and Reduction.
enum class Reduction { Average, Max, Lp, Count };

// Global pool over `channels` contiguous channels of `size` elements each.
using GlobalPoolFn = void (*)(const void* x, void* y, int64_t channels, int64_t size, const LpNorm& lp);

// LpPool over `planes` contiguous NC planes.
using LpPoolFn = void (*)(const void* x, void* y, int64_t planes, const PoolGeometry& g, const LpNorm& lp);

struct QLinearParams {
  float x_scale, y_scale;
  int32_t x_zero_point, y_zero_point;
  bool count_include_pad;
};

// QLinearAveragePool over `units` contiguous units: NC planes (NCHW) or whole images with `channels`
// interleaved channels (NHWC, channels > 0).
using QLinearPoolFn = void (*)(const void* x, void* y, int64_t units, int64_t channels, const PoolGeometry& g,
                               const QLinearParams& q);

struct KernelTable {
  const char* isa;
  GlobalPoolFn global_pool[static_cast<int>(Reduction::Count)][static_cast<int>(FloatType::Count)];
  LpPoolFn lp_pool[static_cast<int>(FloatType::Count)];
  QLinearPoolFn qlinear_nchw[static_cast<int>(QuantType::Count)];
  QLinearPoolFn qlinear_nhwc[static_cast<int>(QuantType::Count)];
};

// The table for the best instruction set this CPU runs (or the one ONNX_POOLS_ISA names).
const KernelTable& kernels();

namespace portable {
const KernelTable& table();
}
namespace avx2 {
const KernelTable& table();
}
namespace avx512 {
const KernelTable& table();
}
namespace neon {  // aarch64 only (kernels/isa/neon.cc)
const KernelTable& table();
}

}  // namespace onnx_pools
