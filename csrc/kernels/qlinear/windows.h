// Byte-specific window sums of QLinearAveragePool: NCHW planes summed as flat arrays.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once

#include <cstdint>

#include "kernels/common/per_isa.h"
#include "kernels/common/simd.h"
#include "kernels/common/window_geometry.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// Whether a plane's window sums can be taken as flat passes (flat_plane_sums): 2-D, stride 1 and no dilation on
// both axes, kernels within the plane and outputs as large as the input (pads adding up to kernel - 1, as
// 3x3 pad 1 has), so output row r and column j line up with input row r and column j.
inline bool flat_plane_sums_apply(const PoolGeometry& g) {
  if (g.axes.size() != 2) return false;
  for (const AxisGeometry& a : g.axes) {
    if (a.stride != 1 || a.dilation != 1 || a.kernel > a.in || a.out != a.in || a.pad_begin < 0 ||
        a.pad_begin > a.kernel - 1)
      return false;
  }
  return true;
}

// Window sums of one plane (flat_plane_sums_apply), widened from the bytes on the way: along the rows, the plane
// taken as one long row (a loop over the whole plane rather than one per row: rows of 56 are shorter than the
// vectorised loop wants), then the columns that took elements of the neighbouring rows redone; down the columns,
// the rows whose windows lie inside the plane as one loop, the edge rows from the rows they have. Sums are exact
// integers, so the order of terms does not matter. rows_sum: scratch of one plane; dst: the plane's sums.
template <class Q, class I>
void flat_plane_sums(const Q* x, I* rows_sum, I* dst, const PoolGeometry& g) {
  const AxisGeometry& ah = g.axes[0];
  const AxisGeometry& aw = g.axes[1];
  const int64_t h = ah.in, w = aw.in, size = h * w;
  const int64_t kw = aw.kernel, pw = aw.pad_begin, kh = ah.kernel, ph = ah.pad_begin;
  // along the rows: rows_sum[i] = sum over k of x[i + k - pw], for the i whose terms all lie in the plane
  const int64_t lo = pw, hi = size - (kw - 1 - pw);
  const Q* xs = x - pw;
  if (kw == 3) {
    for (int64_t i = lo; i < hi; ++i) rows_sum[i] = static_cast<I>((I(xs[i]) + I(xs[i + 1])) + I(xs[i + 2]));
  } else {
    for (int64_t i = lo; i < hi; ++i) rows_sum[i] = I(xs[i]);
    for (int64_t k = 1; k < kw; ++k) {
      for (int64_t i = lo; i < hi; ++i) rows_sum[i] = static_cast<I>(rows_sum[i] + I(xs[i + k]));
    }
  }
  // the columns whose windows reach past the row's ends: only their own row's elements
  const int64_t right = w - (kw - 1 - pw);  // columns from here on reach past the right end
  for (int64_t r = 0; r < h; ++r) {
    const Q* xr = x + r * w;
    I* sr = rows_sum + r * w;
    auto redo = [&](int64_t j) {
      int64_t k_lo, k_hi;
      aw.valid_range(j, k_lo, k_hi);
      I s = 0;
      for (int64_t k = k_lo; k < k_hi; ++k) s = static_cast<I>(s + I(xr[j - pw + k]));
      sr[j] = s;
    };
    for (int64_t j = 0; j < min_of(pw, w); ++j) redo(j);
    for (int64_t j = max_of(right, pw); j < w; ++j) redo(j);
  }
  // down the columns: rows [ph, h - (kh - 1 - ph)) have every window row in the plane
  const int64_t top = ph, bottom = h - (kh - 1 - ph);
  const I* above = rows_sum - ph * w;
  if (top < bottom) {
    const int64_t first = top * w, last = bottom * w;
    if (kh == 3) {
      for (int64_t i = first; i < last; ++i) dst[i] = static_cast<I>((above[i] + above[i + w]) + above[i + 2 * w]);
    } else {
      for (int64_t i = first; i < last; ++i) dst[i] = above[i];
      for (int64_t k = 1; k < kh; ++k) {
        const I* ak = above + k * w;
        for (int64_t i = first; i < last; ++i) dst[i] = static_cast<I>(dst[i] + ak[i]);
      }
    }
  }
  auto edge_row = [&](int64_t r) {
    int64_t k_lo, k_hi;
    ah.valid_range(r, k_lo, k_hi);
    I* d = dst + r * w;
    fill(d, w, I(0));
    for (int64_t k = k_lo; k < k_hi; ++k) {
      const I* s = rows_sum + (r - ph + k) * w;
      for (int64_t j = 0; j < w; ++j) d[j] = static_cast<I>(d[j] + s[j]);
    }
  };
  for (int64_t r = 0; r < min_of(top, h); ++r) edge_row(r);
  for (int64_t r = max_of(bottom, top); r < h; ++r) edge_row(r);
}

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
