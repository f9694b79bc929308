// The library's element types as ONNX tensor element types: the rows of kernels/common/element_types.h as data, for
// the code that works on ONNX type values and names at run time (the op table, registration, the ops' type checks).
#pragma once
#include <onnxruntime_c_api.h>

#include <cstddef>

#include "kernels/common/element_types.h"

namespace onnx_pools {

// Which list of types an op takes (a column of the op table, ops.cc).
enum class TypeFamily { Float, Quant };

struct ElementType {
  ONNXTensorElementDataType onnx;
  const char* name;
  size_t bytes;
  TypeFamily family;
  int index;  // the FloatType or QuantType enumerator
};

#define ONNX_POOLS_FLOAT_ROW(e, T, A, onnx, name) \
  {ONNX_TENSOR_ELEMENT_DATA_TYPE_##onnx, name, sizeof(T), TypeFamily::Float, int(FloatType::e)},
#define ONNX_POOLS_QUANT_ROW(e, T, onnx, name) \
  {ONNX_TENSOR_ELEMENT_DATA_TYPE_##onnx, name, sizeof(T), TypeFamily::Quant, int(QuantType::e)},
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
