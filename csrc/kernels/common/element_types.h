// The element types: one row each. Everything else that lists types (ElementTraits, the FloatType/QuantType
// enums and the kernel tables, the ops' type switches, the ONNX type table of the ort layer (ort/onnx_types.h),
// registration, the names in the `onnx_pools.types` config and Python's onnx_pools.TYPES) is generated from these
// rows. Adding a type = a row here + its conversions in dtypes.h (to_acc / from_acc, and load_block / store_block in
// simd.h where a vector form pays).
#pragma once
#include <cstdint>

namespace onnx_pools {

// 16-bit float storage (the arithmetic is in their accumulator type, dtypes.h).
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// Float types, served by the global pools and LpPool: X(enumerator, C++ type, accumulator, ONNX type, name), the
// ONNX type being the name of ONNX_TENSOR_ELEMENT_DATA_TYPE_<ONNX type> in ORT's C API.
#define ONNX_POOLS_FLOAT_TYPES(X)                \
  X(Float, float, float, FLOAT, "float")         \
  X(Double, double, double, DOUBLE, "double")    \
  X(Float16, Float16, float, FLOAT16, "float16") \
  X(BFloat16, BFloat16, float, BFLOAT16, "bfloat16")

// Quantised types, served by QLinearAveragePool: X(enumerator, C++ type, ONNX type, name). No accumulator column:
// window sums are exact integers, of an integer type wide enough for the window size (kernels/qlinear/).
#define ONNX_POOLS_QUANT_TYPES(X)   \
  X(UInt8, uint8_t, UINT8, "uint8") \
  X(Int8, int8_t, INT8, "int8")

#define ONNX_POOLS_ENUMERATOR_4(e, T, onnx, name) e,
#define ONNX_POOLS_ENUMERATOR_5(e, T, A, onnx, name) e,
enum class FloatType { ONNX_POOLS_FLOAT_TYPES(ONNX_POOLS_ENUMERATOR_5) Count };
enum class QuantType { ONNX_POOLS_QUANT_TYPES(ONNX_POOLS_ENUMERATOR_4) Count };
#undef ONNX_POOLS_ENUMERATOR_4
#undef ONNX_POOLS_ENUMERATOR_5

}  // namespace onnx_pools
