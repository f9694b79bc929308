// The windows of a pool as the kernels take them: per spatial axis the input and output sizes, kernel, stride,
// dilation and padding, already checked and normalised (geometry/pool_geometry.h computes them from the attributes).
#pragma once
#include <cstdint>
#include <vector>

namespace onnx_pools {

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

}  // namespace onnx_pools
