// The one place that owns pooling geometry: attributes -> validated kernel / stride / pad / dilation -> output
// shape. Kernels and shape inference both use it.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "ort/attributes.h"

namespace onnx_pools {

enum class AutoPad { NotSet, SameUpper, SameLower, Valid };

// Attributes as written on the node, value-checked (positive kernel/strides/dilations, non-negative pads,
// lengths consistent with kernel_shape). Empty strides/pads/dilations mean the defaults.
struct PoolAttributes {
  std::vector<int64_t> kernel_shape, strides, pads, dilations;
  AutoPad auto_pad = AutoPad::NotSet;
  bool ceil_mode = false;

  size_t spatial_rank() const { return kernel_shape.size(); }
};

// Reads and checks kernel_shape (required), strides, pads, dilations, auto_pad and ceil_mode.
PoolAttributes read_pool_attributes(const AttributeReader& attrs, const char* op);

// One spatial axis: window j covers input positions j*stride - pad_begin + k*dilation, k in [0, kernel).
// Positions outside [0, in) are padding (or past the padded input) and hold no element.
struct AxisGeometry {
  int64_t in = 0, out = 0, kernel = 1, stride = 1, dilation = 1, pad_begin = 0, pad_end = 0;

  // The k of window j whose position j*stride - pad_begin + k*dilation falls inside [0, in): [k_lo, k_hi), maybe
  // empty. Loops over these, not over the whole kernel, stay bounded by the input however large the kernel.
  // (Always inlined, as valid_count: an out-of-line copy emitted by a per-ISA kernel file would be one weak symbol
  // the linker could also hand to portable code, with that file's instructions in it.)
  [[gnu::always_inline]] void valid_range(int64_t j, int64_t& k_lo, int64_t& k_hi) const {
    const int64_t start = j * stride - pad_begin;
    if (dilation == 1) {  // the usual case, without divisions
      k_lo = start >= 0 ? 0 : -start;
      k_hi = in - start;
    } else {
      k_lo = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
      k_hi = start >= in ? 0 : (in - 1 - start) / dilation + 1;
    }
    if (k_hi > kernel) k_hi = kernel;
    if (k_hi < k_lo) k_hi = k_lo;
  }
  // Number of window positions j*stride - pad_begin + k*dilation that fall inside [0, in).
  [[gnu::always_inline]] int64_t valid_count(int64_t j) const {
    int64_t k_lo, k_hi;
    valid_range(j, k_lo, k_hi);
    return k_hi - k_lo;
  }
};

struct PoolGeometry {
  std::vector<AxisGeometry> axes;
  int64_t in_size = 1;      // elements of one input spatial plane
  int64_t out_size = 1;     // elements of one output spatial plane
  int64_t kernel_size = 1;  // product of kernel_shape
  // Elements of the largest intermediate of the separable window passes (axes reduced last to first):
  // in[0..a) x out[a..) for some axis a.
  int64_t largest_intermediate = 1;
};

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
