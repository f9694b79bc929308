// One instruction set's kernel table: the kernels, written once as templates over element type and reduction,
// instantiated into table(). Included only by kernels/isa/<isa>.cc, which defines ONNX_POOLS_ISA (the namespace of
// that set, kernels/common/per_isa.h) and is compiled with that set's flags.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/common/dtypes.h"
#include "kernels/common/element_types.h"
#include "kernels/common/per_isa.h"
#include "kernels/common/scratch.h"
#include "kernels/common/simd.h"
#include "kernels/common/windows.h"
#include "kernels/global/global_pools.h"
#include "kernels/kernels.h"
#include "kernels/lp/lp_pool.h"
#include "kernels/qlinear/qlinear_pool.h"

#define ONNX_POOLS_STR2(x) #x
#define ONNX_POOLS_STR(x) ONNX_POOLS_STR2(x)

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

template <class T>
void fill_float_type(KernelTable& k, FloatType type) {
  const int t = static_cast<int>(type);
  k.global_pool[static_cast<int>(Reduction::Average)][t] = &global_pool<T, Reduction::Average>;
  k.global_pool[static_cast<int>(Reduction::Max)][t] = &global_pool<T, Reduction::Max>;
  k.global_pool[static_cast<int>(Reduction::Lp)][t] = &global_pool<T, Reduction::Lp>;
  k.lp_pool[t] = &lp_pool<T>;
}

}  // namespace

const KernelTable& table() {
  static const KernelTable instance = [] {
    KernelTable k{};
    k.isa = ONNX_POOLS_STR(ONNX_POOLS_ISA);
    // one line per row of element_types.h
#define ONNX_POOLS_FILL_FLOAT(e, T, A, onnx, name) fill_float_type<T>(k, FloatType::e);
#define ONNX_POOLS_FILL_QUANT(e, T, onnx, name)                      \
  k.qlinear_nchw[static_cast<int>(QuantType::e)] = &qlinear_nchw<T>; \
  k.qlinear_nhwc[static_cast<int>(QuantType::e)] = &qlinear_pool<T>;
    ONNX_POOLS_FLOAT_TYPES(ONNX_POOLS_FILL_FLOAT)
    ONNX_POOLS_QUANT_TYPES(ONNX_POOLS_FILL_QUANT)
#undef ONNX_POOLS_FILL_FLOAT
#undef ONNX_POOLS_FILL_QUANT
    return k;
  }();
  return instance;
}

}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
