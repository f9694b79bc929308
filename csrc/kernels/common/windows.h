// Window iteration: separable window sums over a plane, summed-area sums for small planes, visiting one window.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/per_isa.h"
#include "kernels/common/simd.h"
#include "kernels/common/window_geometry.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// ---- separable window sums (LpPool and QLinearAveragePool) -----------------------------------------------

// Whether a pass per kernel offset over a row's windows would step a cache line or more from one window to the next
// (e.g. kernel 1024 at stride 1024: every pass touching a line per window, the strip's K passes its whole span K
// times): then the window sums are taken a window at a time instead, each over its contiguous terms.
// step: values from one window's first term to the next window's.
template <class S>
bool wide_steps(int64_t step, int64_t kernel) {
  return step * static_cast<int64_t>(sizeof(S)) >= 64 && kernel > 3;
}

// dst[o][j][i] = sum over k of src[o][j*stride - pad_begin + k*dilation][i], positions outside [0, in) skipped.
// Sums over a box are separable, so an N-D window is N of these passes, one per axis.
template <class S, class A>
void window_sum_axis(const S* src, A* dst, int64_t outer, int64_t inner, const AxisGeometry& g) {
  const int64_t length = g.in, out = g.out, stride = g.stride;
  if (inner == 1 && outer > 1 && g.pad_begin == 0 && length == out * stride &&
      (out - 1) * stride + (g.kernel - 1) * g.dilation < length) {
    // Rows that chain (each row's windows inside it, the next row's first window a stride after its last): the
    // rows as one long row, the same windows and terms in the same order (rows of 28 windows, as 2x2 stride 2
    // takes over 56 columns, are shorter than the vectorised loop wants).
    AxisGeometry chained = g;
    chained.in = outer * length;
    chained.out = outer * out;
    chained.pad_end = 0;
    window_sum_axis(src, dst, 1, 1, chained);
    return;
  }
  if (g.kernel > length || wide_steps<S>(stride * inner, g.kernel)) {
    // A window at a time, its in-bounds terms in k order (the same sums as the passes per k below): for a kernel
    // longer than the axis (huge kernels with matching pads) the work stays bounded by the input, not by the
    // kernel; for wide steps between windows (wide_steps) each window's terms are read contiguously.
    for (int64_t o = 0; o < outer; ++o) {
      const S* s = src + o * length * inner;
      A* d = dst + o * out * inner;
      fill(d, out * inner, A(0));
      for (int64_t j = 0; j < out; ++j) {
        int64_t k_lo, k_hi;
        g.valid_range(j, k_lo, k_hi);
        A* dj = d + j * inner;
        for (int64_t k = k_lo; k < k_hi; ++k) {
          const S* sk = s + (j * stride - g.pad_begin + k * g.dilation) * inner;
          for (int64_t i = 0; i < inner; ++i) dj[i] += static_cast<A>(sk[i]);
        }
      }
    }
    return;
  }
  for (int64_t o = 0; o < outer; ++o) {
    const S* s = src + o * length * inner;
    A* d = dst + o * out * inner;
    fill(d, out * inner, A(0));
    for (int64_t k = 0; k < g.kernel; ++k) {
      const int64_t offset = k * g.dilation - g.pad_begin;  // window j reads position j*stride + offset
      const int64_t j_lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
      const int64_t j_hi = offset >= length ? 0 : min_of(out, (length - 1 - offset) / stride + 1);
      if (inner == 1) {
        if (stride == 1) {
          for (int64_t j = j_lo; j < j_hi; ++j) d[j] += static_cast<A>(s[j + offset]);
        } else if (stride == 2) {  // a constant stride vectorises by shuffles, a variable one by single loads
          for (int64_t j = j_lo; j < j_hi; ++j) d[j] += static_cast<A>(s[j * 2 + offset]);
        } else {
          for (int64_t j = j_lo; j < j_hi; ++j) d[j] += static_cast<A>(s[j * stride + offset]);
        }
      } else {
        for (int64_t j = j_lo; j < j_hi; ++j) {
          A* dj = d + j * inner;
          const S* sj = s + (j * stride + offset) * inner;
          for (int64_t i = 0; i < inner; ++i) dj[i] += static_cast<A>(sj[i]);
        }
      }
    }
  }
}

// Runs the separable passes from `src` (laid out [spatial...][channels]) and returns the buffer holding the
// window sums ([out spatial...][channels]); first_pass converts S to A on the way.
template <class S, class A>
A* window_sums(const S* src, A* buf_a, A* buf_b, const PoolGeometry& g, int64_t channels) {
  const size_t rank = g.axes.size();
  int64_t inner = channels;
  A* out = buf_a;
  A* spare = buf_b;
  for (size_t a = rank; a-- > 0;) {
    int64_t outer = 1;
    for (size_t b = 0; b < a; ++b) outer *= g.axes[b].in;
    if (a + 1 == rank) {
      window_sum_axis(src, out, outer, inner, g.axes[a]);
    } else {
      window_sum_axis(static_cast<const A*>(spare), out, outer, inner, g.axes[a]);
    }
    inner *= g.axes[a].out;
    A* t = out;
    out = spare;
    spare = t;
  }
  return spare;  // the buffer written last
}

// Window sums of one 2-D plane with short output rows (fewer than 16 columns) and no dilation, for which the
// separable passes' per-row setup would dominate (e.g. 2x2 windows over 7x7 planes): a summed-area table, so
// no per-window loop or branch. Across each input row a running sum, of which each output column takes the
// difference of two values; those row sums accumulated down the height; each window is then the difference of
// two accumulated rows. All sums are unsigned and may wrap: every difference is still exact, as each window's sum
// fits A. Scratch: (in_w + 1) + (in_h + 1) * out_w values.
constexpr int64_t kDirectColumns = 16;
template <class S, class A>
void direct_window_sums_2d(const S* src, A* dst, const PoolGeometry& g, A* scratch) {
  using U = std::make_unsigned_t<A>;
  const AxisGeometry& gh = g.axes[0];
  const AxisGeometry& gw = g.axes[1];
  const int64_t out_w = gw.out;
  // [begin, end) of the in-bounds positions of a window along an axis; 0 to 0 when it holds none (all padding)
  auto bounds = [](const AxisGeometry& ax, int64_t j, int64_t& begin, int64_t& end) {
    int64_t lo, hi;
    ax.valid_range(j, lo, hi);
    begin = hi > lo ? j * ax.stride - ax.pad_begin + lo : 0;
    end = begin + (hi - lo);
  };
  int64_t begin[kDirectColumns], end[kDirectColumns];
  for (int64_t ow = 0; ow < out_w; ++ow) bounds(gw, ow, begin[ow], end[ow]);
  U* running = reinterpret_cast<U*>(scratch);  // running[w]: the current row's first w elements
  U* columns = running + gw.in + 1;            // columns[h][ow]: rows [0, h) summed over column ow's span
  for (int64_t ow = 0; ow < out_w; ++ow) columns[ow] = 0;
  running[0] = 0;
  for (int64_t h = 0; h < gh.in; ++h) {
    const S* row = src + h * gw.in;
    for (int64_t w = 0; w < gw.in; ++w) running[w + 1] = running[w] + static_cast<U>(static_cast<A>(row[w]));
    const U* above = columns + h * out_w;
    U* next = columns + (h + 1) * out_w;
    for (int64_t ow = 0; ow < out_w; ++ow) next[ow] = above[ow] + (running[end[ow]] - running[begin[ow]]);
  }
  for (int64_t oh = 0; oh < gh.out; ++oh) {
    int64_t top, bottom;
    bounds(gh, oh, top, bottom);
    const U* upper = columns + top * out_w;
    const U* lower = columns + bottom * out_w;
    A* d = dst + oh * out_w;
    for (int64_t ow = 0; ow < out_w; ++ow) d[ow] = static_cast<A>(lower[ow] - upper[ow]);
  }
}

// Calls f(offset) for the in-bounds positions of one window, in row-major order (last axis fastest); offset
// is the linear position in the input's spatial plane. `index` is scratch for kVisitScratch * rank values. Only
// in-bounds k are visited, so the cost is bounded by the input however large the kernel.
constexpr size_t kVisitScratch = 4;
template <class F>
void visit_window(const PoolGeometry& g, int64_t out_index, int64_t* index, F&& f) {
  const size_t rank = g.axes.size();
  int64_t* start = index;  // per axis: the window's first position, the current k and its in-bounds range
  int64_t* k = index + rank;
  int64_t* k_lo = index + 2 * rank;
  int64_t* k_hi = index + 3 * rank;
  for (size_t a = rank; a-- > 0;) {
    const AxisGeometry& ax = g.axes[a];
    const int64_t j = out_index % ax.out;
    out_index /= ax.out;
    ax.valid_range(j, k_lo[a], k_hi[a]);
    if (k_lo[a] >= k_hi[a]) return;  // no element along this axis: an empty window
    start[a] = j * ax.stride - ax.pad_begin;
    k[a] = k_lo[a];
  }
  for (;;) {
    int64_t offset = 0;
    for (size_t a = 0; a < rank; ++a) offset = offset * g.axes[a].in + start[a] + k[a] * g.axes[a].dilation;
    f(offset);
    size_t a = rank;
    while (a-- > 0) {
      if (++k[a] < k_hi[a]) break;
      k[a] = k_lo[a];
    }
    if (a == static_cast<size_t>(-1)) return;
  }
}

// ---- streaming window sums of 1-D and 2-D planes (bounded scratch) ------------------------------------------

// A 1-D or 2-D plane as rows x columns (a 1-D plane is one row).
struct RowsAndColumns {
  AxisGeometry rows, cols;
};
inline RowsAndColumns rows_and_columns(const PoolGeometry& g) {
  RowsAndColumns p;
  if (g.axes.size() == 1) {
    p.cols = g.axes[0];
    p.rows.in = p.rows.out = 1;  // kernel 1, stride 1, no pads: the one row
  } else {
    p.rows = g.axes[0];
    p.cols = g.axes[1];
  }
  return p;
}

// The elements of the plane (rows of cols.in values, in order) that the windows of output rows [0, out_rows_end) may
// read: its rows up to the last input row the last of those windows reaches.
inline int64_t rows_reach(const RowsAndColumns& rc, int64_t out_rows_end) {
  const AxisGeometry& r = rc.rows;
  const int64_t end = (out_rows_end - 1) * r.stride - r.pad_begin + (r.kernel - 1) * r.dilation + 1;
  return (end < 0 ? 0 : (end < r.in ? end : r.in)) * rc.cols.in;
}

// Output columns whose window sums are built at a time: scratch stays bounded however long a row is (a 1-D plane
// of 2^31 elements), while rows of ordinary images (up to a few hundred columns) are one strip. Fewer where the
// strides between windows are wide: the strip's copy of its input (kStripInputValues values at most, all channels,
// unless one stride alone is longer) stays in cache (kernel 1024 at stride 1024: 4096 windows would span 4M values).
constexpr int64_t kStripColumns = 4096;
constexpr int64_t kStripInputValues = 1 << 18;
inline int64_t strip_columns(const AxisGeometry& cols, int64_t channels) {
  const int64_t by_input = max_of<int64_t>(1, kStripInputValues / max_of<int64_t>(1, cols.stride * channels));
  return min_of(cols.out, min_of(kStripColumns, by_input));
}

// Rows one output row's windows span: the reduced rows kept in the ring.
inline int64_t ring_rows(const AxisGeometry& rows) { return min_of((rows.kernel - 1) * rows.dilation + 1, rows.in); }
// Input columns one strip's windows can reach.
inline int64_t strip_input_columns(const AxisGeometry& cols, int64_t channels) {
  const int64_t strip = strip_columns(cols, channels);
  return min_of((strip - 1) * cols.stride + (cols.kernel - 1) * cols.dilation + 1, cols.in);
}
// Scratch values stream_window_sums needs with `channels` interleaved channels (plus stream_tags() int64 values).
inline int64_t stream_tags(const RowsAndColumns& p) { return 2 * ring_rows(p.rows); }
inline int64_t stream_scratch(const RowsAndColumns& p, int64_t channels) {
  const int64_t strip = strip_columns(p.cols, channels);
  return channels * (strip_input_columns(p.cols, channels) + (ring_rows(p.rows) + 1) * strip);
}

// d[j] = (s[j*stride] + s[j*stride + dilation]) + ... (kernel terms, in k order) for n windows of one channel,
// all of whose terms s holds: fused loops for kernels of up to three columns at strides 1 and 2, the rest a pass
// per k. Shared by the streamed window sums and LpPool's blocked rows, so both add in the same order.
template <class S>
void single_channel_window_sums(const S* s, S* d, int64_t n, const AxisGeometry& g) {
  const int64_t dil = g.dilation;
  if (g.stride == 1) {
    switch (g.kernel) {
      case 1: std::memcpy(d, s, sizeof(S) * static_cast<size_t>(n)); return;
      case 2:
        for (int64_t j = 0; j < n; ++j) d[j] = s[j] + s[j + dil];
        return;
      case 3:
        for (int64_t j = 0; j < n; ++j) d[j] = (s[j] + s[j + dil]) + s[j + 2 * dil];
        return;
      default: break;
    }
  } else if (g.stride == 2) {
    switch (g.kernel) {
      case 1:
        for (int64_t j = 0; j < n; ++j) d[j] = s[2 * j];
        return;
      case 2:
        for (int64_t j = 0; j < n; ++j) d[j] = s[2 * j] + s[2 * j + dil];
        return;
      case 3:
        for (int64_t j = 0; j < n; ++j) d[j] = (s[2 * j] + s[2 * j + dil]) + s[2 * j + 2 * dil];
        return;
      default: break;
    }
  }
  // the first term stored, not added to 0: the same value for every summand here (integers, and |x|^p >= +0 or NaN)
  const int64_t stride = g.stride;
  if (wide_steps<S>(stride, g.kernel)) {  // a window at a time, its terms in k order: the same sums
    for (int64_t j = 0; j < n; ++j) {
      const S* sj = s + j * stride;
      S sum = sj[0];
      for (int64_t k = 1; k < g.kernel; ++k) sum += sj[k * dil];
      d[j] = sum;
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) d[j] = s[j * stride];
  for (int64_t k = 1; k < g.kernel; ++k) {
    const S* sk = s + k * dil;
    for (int64_t j = 0; j < n; ++j) d[j] += sk[j * stride];
  }
}

// dst[j - begin][c] = sum over the in-bounds k of src[j*stride - pad + k*dilation - src_first][c], for output
// columns j in [begin, begin + count); src holds input columns from src_first on. Terms are added in k order,
// the same on every path: windows wholly inside the row take fused loops for kernels of up to three columns, the
// edge windows one at a time.
template <class S>
void column_window_sums(const S* src, int64_t src_first, S* dst, const AxisGeometry& g, int64_t begin, int64_t count,
                        int64_t channels) {
  const int64_t end = begin + count;
  auto one_window = [&](int64_t j) {
    int64_t k_lo, k_hi;
    g.valid_range(j, k_lo, k_hi);
    S* d = dst + (j - begin) * channels;
    for (int64_t c = 0; c < channels; ++c) d[c] = S(0);
    for (int64_t k = k_lo; k < k_hi; ++k) {
      const S* s = src + (j * g.stride - g.pad_begin + k * g.dilation - src_first) * channels;
      for (int64_t c = 0; c < channels; ++c) d[c] += s[c];
    }
  };
  if (g.kernel > g.in) {  // longer than the axis: per window, only the k that land inside (bounded by the input)
    for (int64_t j = begin; j < end; ++j) one_window(j);
    return;
  }
  // windows wholly inside the row: [inner_lo, inner_hi)
  const int64_t reach = (g.kernel - 1) * g.dilation;
  const int64_t inner_lo = min_of(end, max_of(begin, (g.pad_begin + g.stride - 1) / g.stride));
  const int64_t inner_hi = max_of(
      inner_lo, min_of(end, g.in - 1 - reach + g.pad_begin >= 0 ? (g.in - 1 - reach + g.pad_begin) / g.stride + 1 : 0));
  for (int64_t j = begin; j < inner_lo; ++j) one_window(j);
  for (int64_t j = inner_hi; j < end; ++j) one_window(j);
  const int64_t n = inner_hi - inner_lo;
  if (n <= 0) return;
  S* d = dst + (inner_lo - begin) * channels;
  const S* s = src + (inner_lo * g.stride - g.pad_begin - src_first) * channels;
  if (channels == 1) {
    single_channel_window_sums(s, d, n, g);
    return;
  }
  const int64_t step = g.stride * channels, dil = g.dilation * channels;
  if (g.kernel <= 3) {
    for (int64_t j = 0; j < n; ++j) {
      S* dj = d + j * channels;
      const S* sj = s + j * step;
      if (g.kernel == 1) {
        for (int64_t c = 0; c < channels; ++c) dj[c] = sj[c];
      } else if (g.kernel == 2) {
        for (int64_t c = 0; c < channels; ++c) dj[c] = sj[c] + sj[c + dil];
      } else {
        for (int64_t c = 0; c < channels; ++c) dj[c] = (sj[c] + sj[c + dil]) + sj[c + 2 * dil];
      }
    }
    return;
  }
  fill(d, n * channels, S(0));
  if (wide_steps<S>(step, g.kernel)) {
    for (int64_t j = 0; j < n; ++j) {  // a window at a time (see wide_steps), its terms in k order: the same sums
      S* dj = d + j * channels;
      for (int64_t k = 0; k < g.kernel; ++k) {
        const S* sk = s + j * step + k * dil;
        for (int64_t c = 0; c < channels; ++c) dj[c] += sk[c];
      }
    }
    return;
  }
  for (int64_t k = 0; k < g.kernel; ++k) {
    const S* sk = s + k * dil;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < channels; ++c) d[j * channels + c] += sk[j * step + c];
    }
  }
}

// dst[i] = ((rows[0][i] + rows[1][i]) + ...) over n values: the vertical sum of a window's reduced rows.
template <class S>
void add_rows(S* const* rows, int64_t count, S* dst, int64_t n) {
  switch (count) {
    case 1: std::memcpy(dst, rows[0], sizeof(S) * static_cast<size_t>(n)); return;
    case 2:
      for (int64_t i = 0; i < n; ++i) dst[i] = rows[0][i] + rows[1][i];
      return;
    case 3:
      for (int64_t i = 0; i < n; ++i) dst[i] = (rows[0][i] + rows[1][i]) + rows[2][i];
      return;
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = (rows[0][i] + rows[1][i]) + rows[2][i];
      for (int64_t r = 3; r < count; ++r) {
        for (int64_t i = 0; i < n; ++i) dst[i] += rows[r][i];
      }
  }
}

// Window sums of one 1-D or 2-D plane, an output row (or strip of one) at a time: each input row the windows
// touch is loaded once (load(row, first_column, columns, dst) writes the summed quantity of those input columns,
// `channels` interleaved), reduced along the columns into a ring of ring_rows() rows, and each output row is the
// sum of its rows of the ring, in window order; finish(out_row, first_out_column, columns, sums) consumes it and
// returns false to stop early. Scratch: stream_scratch() values. Sums are taken in the same order on every ISA.
template <class S, class Load, class Finish>
bool stream_window_sums(const RowsAndColumns& p, int64_t channels, S* scratch, int64_t* ring_tags, Load&& load,
                        Finish&& finish) {
  const AxisGeometry& rows = p.rows;
  const AxisGeometry& cols = p.cols;
  const int64_t ring = ring_rows(rows);
  const int64_t strip_max = strip_columns(cols, channels);
  S* input_row = scratch;
  S* reduced = input_row + strip_input_columns(cols, channels) * channels;  // ring of reduced rows
  S* out_row = reduced + ring * strip_max * channels;
  S** window_rows = reinterpret_cast<S**>(ring_tags + ring);  // this output row's reduced rows, in window order
  for (int64_t begin = 0; begin < cols.out; begin += strip_max) {
    const int64_t count = min_of(strip_max, cols.out - begin);
    // the input columns this strip's windows reach, clipped to the input
    const int64_t first = max_of<int64_t>(0, begin * cols.stride - cols.pad_begin);
    const int64_t last =
        min_of(cols.in, (begin + count - 1) * cols.stride - cols.pad_begin + (cols.kernel - 1) * cols.dilation + 1);
    const int64_t width = max_of<int64_t>(0, last - first);
    for (int64_t r = 0; r < ring; ++r) ring_tags[r] = -1;
    for (int64_t oh = 0; oh < rows.out; ++oh) {
      int64_t k_lo, k_hi;
      rows.valid_range(oh, k_lo, k_hi);
      if (k_lo >= k_hi || width == 0) {
        fill(out_row, count * channels, S(0));
      } else {
        for (int64_t k = k_lo; k < k_hi; ++k) {
          const int64_t row = oh * rows.stride - rows.pad_begin + k * rows.dilation;
          const int64_t slot = row % ring;
          S* reduced_row = reduced + slot * strip_max * channels;
          if (ring_tags[slot] != row) {
            load(row, first, width, input_row);
            column_window_sums(static_cast<const S*>(input_row), first, reduced_row, cols, begin, count, channels);
            ring_tags[slot] = row;
          }
          window_rows[k - k_lo] = reduced_row;
        }
        add_rows(window_rows, k_hi - k_lo, out_row, count * channels);
      }
      if (!finish(oh, begin, count, static_cast<const S*>(out_row))) return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
