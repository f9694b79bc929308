#include "geometry/pool_geometry.h"

#include <algorithm>
#include <limits>

#include "geometry/error.h"

namespace onnx_pools {
namespace {

int64_t checked_add(int64_t a, int64_t b, const char* op, const char* attribute) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail(op, ": attribute '", attribute, "' is too large: sizes overflow 64 bits");
  return r;
}

int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* attribute) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail(op, ": attribute '", attribute, "' is too large: sizes overflow 64 bits");
  return r;
}

// An attribute with values_per_axis values for each of the rank spatial axes, each >= minimum; empty when absent.
std::vector<int64_t> checked_per_axis(const std::optional<std::vector<int64_t>>& values, const char* name, size_t rank,
                                      size_t values_per_axis, int64_t minimum, const char* op) {
  const size_t expected = rank * values_per_axis;
  if (!values) return {};
  if (values->size() != expected) {
    fail(op, ": attribute '", name, "' has ", values->size(), " values, expected ", expected, " (kernel_shape has ",
         rank, " spatial axes)");
  }
  for (size_t i = 0; i < values->size(); ++i) {
    if ((*values)[i] < minimum)
      fail(op, ": attribute '", name, "' must be >= ", minimum, ", got ", (*values)[i], " at index ", i);
  }
  return *values;
}

// Sizes along one axis (input + pads, the kernel's extent) are kept below 2^60, so every position and offset the
// kernels form from them (sums of a few such sizes) fits int64 without checks.
constexpr int64_t kMaxAxisSize = int64_t{1} << 60;

int64_t bounded(int64_t value, const char* op, const char* attribute) {
  if (value > kMaxAxisSize)
    fail(op, ": attribute '", attribute, "' is too large: an axis would span more than 2^60 positions");
  return value;
}

// Output size and padding of one axis, then normalised: a stride that never applies (one window) becomes 1, and a
// dilation that never applies (kernel 1) becomes 1, so values up to 2^63 cannot overflow the kernels' arithmetic.
AxisGeometry compute_axis_raw(const PoolAttributes& a, size_t axis, int64_t in, const char* op);

AxisGeometry compute_axis(const PoolAttributes& a, size_t axis, int64_t in, const char* op) {
  AxisGeometry g = compute_axis_raw(a, axis, in, op);
  if (g.out <= 1) g.stride = 1;
  if (g.kernel == 1) g.dilation = 1;
  return g;
}

// Output size and padding of one axis; the geometry rules all live here.
AxisGeometry compute_axis_raw(const PoolAttributes& a, size_t axis, int64_t in, const char* op) {
  AxisGeometry g;
  g.in = in;
  g.kernel = a.kernel_shape[axis];
  g.stride = a.strides.empty() ? 1 : a.strides[axis];
  g.dilation = a.dilations.empty() ? 1 : a.dilations[axis];
  const int64_t extent =
      bounded(checked_add(checked_mul(g.kernel - 1, g.dilation, op, "kernel_shape"), 1, op, "dilations"), op,
              g.kernel > 1 && g.dilation > 1 ? "dilations" : "kernel_shape");

  if (a.auto_pad == AutoPad::SameUpper || a.auto_pad == AutoPad::SameLower) {
    // out = ceil(in / stride); the padding that takes is never negative (TensorFlow's SAME, as the spec says).
    g.out = in / g.stride + (in % g.stride != 0 ? 1 : 0);
    const int64_t needed = checked_add(std::max<int64_t>(g.out - 1, 0) * g.stride, extent, op, "kernel_shape") - in;
    const int64_t total = std::max<int64_t>(0, needed);
    g.pad_begin = a.auto_pad == AutoPad::SameUpper ? total / 2 : total - total / 2;
    g.pad_end = total - g.pad_begin;
    return g;
  }
  if (a.auto_pad == AutoPad::NotSet && !a.pads.empty()) {
    g.pad_begin = a.pads[axis];
    g.pad_end = a.pads[axis + a.spatial_rank()];
  }
  const int64_t padded =
      bounded(checked_add(checked_add(in, g.pad_begin, op, "pads"), g.pad_end, op, "pads"), op, "pads");
  if (extent > padded) {
    fail(op, ": attribute 'kernel_shape' (", g.kernel, " with dilation ", g.dilation, ", extent ", extent,
         ") is larger than the padded input (", padded, ") along spatial axis ", axis);
  }
  const int64_t span = padded - extent;
  g.out = span / g.stride + 1;
  if (a.ceil_mode) {
    if (span % g.stride != 0) g.out += 1;
    // The last window must start inside the input or the left padding, never in the right padding.
    int64_t last_start;
    if (__builtin_mul_overflow(g.out - 1, g.stride, &last_start) || last_start >= in + g.pad_begin) g.out -= 1;
  }
  return g;
}

}  // namespace

PoolAttributes checked_pool_attributes(const PoolAttributeValues& values, const char* op) {
  PoolAttributes a;
  const auto& kernel = values.kernel_shape;
  if (!kernel) fail(op, ": attribute 'kernel_shape' is required");
  if (kernel->empty()) fail(op, ": attribute 'kernel_shape' is empty; it needs one value per spatial axis");
  for (size_t i = 0; i < kernel->size(); ++i) {
    if ((*kernel)[i] < 1) fail(op, ": attribute 'kernel_shape' must be >= 1, got ", (*kernel)[i], " at index ", i);
  }
  a.kernel_shape = *kernel;
  const size_t rank = a.kernel_shape.size();
  a.strides = checked_per_axis(values.strides, "strides", rank, 1, 1, op);
  a.dilations = checked_per_axis(values.dilations, "dilations", rank, 1, 1, op);
  a.pads = checked_per_axis(values.pads, "pads", rank, 2, 0, op);

  const std::string auto_pad = values.auto_pad.value_or("NOTSET");
  if (auto_pad == "NOTSET" || auto_pad.empty()) {
    a.auto_pad = AutoPad::NotSet;
  } else if (auto_pad == "SAME_UPPER") {
    a.auto_pad = AutoPad::SameUpper;
  } else if (auto_pad == "SAME_LOWER") {
    a.auto_pad = AutoPad::SameLower;
  } else if (auto_pad == "VALID") {
    a.auto_pad = AutoPad::Valid;
  } else {
    fail(op, ": attribute 'auto_pad' must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '", auto_pad, "'");
  }
  const int64_t ceil_mode = values.ceil_mode.value_or(0);
  if (ceil_mode != 0 && ceil_mode != 1) fail(op, ": attribute 'ceil_mode' must be 0 or 1, got ", ceil_mode);
  a.ceil_mode = ceil_mode == 1;
  return a;
}

int64_t checked_product(const int64_t* first, const int64_t* last, const char* op, const char* what) {
  int64_t product = 1;
  for (const int64_t* d = first; d != last; ++d) {
    if (__builtin_mul_overflow(product, *d, &product))
      fail(op, ": ", what, " has more elements than 64 bits can count");
  }
  return product;
}

PoolGeometry windowed_geometry(const PoolAttributes& attrs, const std::vector<int64_t>& in_spatial, const char* op) {
  if (in_spatial.size() != attrs.spatial_rank()) {
    fail(op, ": attribute 'kernel_shape' has ", attrs.spatial_rank(), " values but input X has ", in_spatial.size(),
         " spatial dimensions (rank ", in_spatial.size() + 2, ")");
  }
  PoolGeometry g;
  std::vector<int64_t> out_dims;
  g.axes.reserve(in_spatial.size());  // one allocation each: tiny pools run in microseconds
  out_dims.reserve(in_spatial.size());
  for (size_t axis = 0; axis < in_spatial.size(); ++axis) {
    g.axes.push_back(compute_axis(attrs, axis, in_spatial[axis], op));
    out_dims.push_back(g.axes.back().out);
  }
  g.in_size = checked_product(in_spatial, op, "input X");
  g.out_size = checked_product(out_dims, op, "output Y");
  g.kernel_size = checked_product(attrs.kernel_shape, op, "attribute 'kernel_shape'");
  for (size_t a = 0; a < in_spatial.size(); ++a) {
    std::vector<int64_t> dims(in_spatial.begin(), in_spatial.begin() + a);
    dims.insert(dims.end(), out_dims.begin() + a, out_dims.end());
    g.largest_intermediate = std::max(g.largest_intermediate, checked_product(dims, op, "an intermediate of the pool"));
  }
  return g;
}

int64_t infer_output_dim(const PoolAttributes& attrs, size_t axis, int64_t in, const char* op) {
  if (in < 0 || axis >= attrs.spatial_rank()) return -1;
  try {
    return compute_axis(attrs, axis, in, op).out;
  } catch (const Error&) {
    return -1;  // the kernel reports the problem when it runs
  }
}

}  // namespace onnx_pools
