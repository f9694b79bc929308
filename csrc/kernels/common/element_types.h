// The element types: one row each. Everything else that lists types (ElementTraits, the FloatType/QuantType
// enums and the kernel tables, the ops' type switches, registration, the names in the `onnx_pools.types` config
// and Python's onnx_pools.TYPES) is generated from these rows. Adding a type = a row here + its conversions in
// dtypes.h (to_acc / from_acc, and load_block / store_block in simd.h where a vector form pays).
#pragma once
#include <onnxruntime_c_api.h>

#include <cstddef>
#include <cstdint>

namespace onnx_pools {

// 16-bit float storage (the arithmetic is in their accumulator type, dtypes.h).
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// Float types, served by the global pools and LpPool: X(enumerator, C++ type, accumulator, ONNX type, name).
#define ONNX_POOLS_FLOAT_TYPES(X)                                              \
  X(Float, float, float, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, "float")         \
  X(Double, double, double, ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE, "double")    \
  X(Float16, Float16, float, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, "float16") \
  X(BFloat16, BFloat16, float, ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, "bfloat16")

// Quantised types, served by QLinearAveragePool: X(enumerator, C++ type, ONNX type, name). No accumulator column:
// window sums are exact integers, int32 or int64 by window size (qlinear_pool.h).
#define ONNX_POOLS_QUANT_TYPES(X)                                 \
  X(UInt8, uint8_t, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, "uint8") \
  X(Int8, int8_t, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, "int8")

#define ONNX_POOLS_ENUMERATOR_4(e, T, onnx, name) e,
#define ONNX_POOLS_ENUMERATOR_5(e, T, A, onnx, name) e,
enum class FloatType { ONNX_POOLS_FLOAT_TYPES(ONNX_POOLS_ENUMERATOR_5) Count };
enum class QuantType { ONNX_POOLS_QUANT_TYPES(ONNX_POOLS_ENUMERATOR_4) Count };
#undef ONNX_POOLS_ENUMERATOR_4
#undef ONNX_POOLS_ENUMERATOR_5

// Which list of types an op takes (a column of the op table, ops.cc).
enum class TypeFamily { Float, Quant };

// A row as data, for the code that works on ONNX type values and names at run time.
struct ElementType {
  ONNXTensorElementDataType onnx;
  const char* name;
  size_t bytes;
  TypeFamily family;
  int index;  // the FloatType or QuantType enumerator
};

#define ONNX_POOLS_FLOAT_ROW(e, T, A, onnx, name) {onnx, name, sizeof(T), TypeFamily::Float, int(FloatType::e)},
#define ONNX_POOLS_QUANT_ROW(e, T, onnx, name) {onnx, name, sizeof(T), TypeFamily::Quant, int(QuantType::e)},
inline constexpr ElementType kElementTypes[] = {ONNX_POOLS_FLOAT_TYPES(ONNX_POOLS_FLOAT_ROW)
                                                    ONNX_POOLS_QUANT_TYPES(ONNX_POOLS_QUANT_ROW)};
#undef ONNX_POOLS_FLOAT_ROW
#undef ONNX_POOLS_QUANT_ROW

// The row of an ONNX type, or nullptr when the library has no kernel for it.
inline const ElementType* find_element_type(ONNXTensorElementDataType onnx) {
  for (const ElementType& t : kElementTypes)
    if (t.onnx == onnx) return &t;
  return nullptr;
}

}  // namespace onnx_pools
