// The one place that owns pooling geometry: the attributes' values -> checked kernel / stride / pad / dilation ->
// the windows the kernels take (kernels/common/window_geometry.h) and the output shape. The op kernels and shape
// inference both use it; the ort layer reads the values from the node (ort/attributes.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/window_geometry.h"

namespace onnx_pools {

enum class AutoPad { NotSet, SameUpper, SameLower, Valid };

// A windowed pool's attributes as written on the node, each nullopt when absent.
struct PoolAttributeValues {
  std::optional<std::vector<int64_t>> kernel_shape, strides, pads, dilations;
  std::optional<std::string> auto_pad;
  std::optional<int64_t> ceil_mode;
};

// The attributes value-checked (positive kernel/strides/dilations, non-negative pads, lengths consistent with
// kernel_shape). Empty strides/pads/dilations mean the defaults.
struct PoolAttributes {
  std::vector<int64_t> kernel_shape, strides, pads, dilations;
  AutoPad auto_pad = AutoPad::NotSet;
  bool ceil_mode = false;

  size_t spatial_rank() const { return kernel_shape.size(); }
};

// Checks kernel_shape (required), strides, dilations, pads, auto_pad and ceil_mode, in that order; throws Error naming
// the op and the first attribute at fault.
PoolAttributes checked_pool_attributes(const PoolAttributeValues& values, const char* op);

// Geometry of a windowed pool for the given input spatial dims; throws Error naming the op and the attribute.
PoolGeometry windowed_geometry(const PoolAttributes& attrs, const std::vector<int64_t>& in_spatial, const char* op);

// Output size of one axis, or -1 when the input size is unknown (< 0) or the attributes do not fit it.
int64_t infer_output_dim(const PoolAttributes& attrs, size_t axis, int64_t in, const char* op);

// Product of dims with overflow checking; `what` names the quantity in the error.
int64_t checked_product(const int64_t* first, const int64_t* last, const char* op, const char* what);
inline int64_t checked_product(const std::vector<int64_t>& dims, const char* op, const char* what) {
  return checked_product(dims.data(), dims.data() + dims.size(), op, what);
}
inline int64_t checked_product(std::initializer_list<int64_t> dims, const char* op, const char* what) {
  return checked_product(dims.begin(), dims.end(), op, what);
}

}  // namespace onnx_pools
