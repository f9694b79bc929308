// Window iteration: separable window sums over a plane, summed-area sums for small planes, visiting one window.
// Part of the per-ISA kernels: included by kernels_impl.h inside namespace onnx_pools::ONNX_POOLS_ISA::{anon},
// so everything here is compiled once per instruction set with that file's flags.
#pragma once

// ---- separable window sums (LpPool and QLinearAveragePool) -----------------------------------------------

// dst[o][j][i] = sum over k of src[o][j*stride - pad_begin + k*dilation][i], positions outside [0, in) skipped.
// Sums over a box are separable, so an N-D window is N of these passes, one per axis.
template <class S, class A>
void window_sum_axis(const S* src, A* dst, int64_t outer, int64_t inner, const AxisGeometry& g) {
  const int64_t length = g.in, out = g.out, stride = g.stride;
  if (g.kernel > length) {
    // Kernel longer than the axis (huge kernels with matching pads): per window, only the k that land inside, so
    // the work is bounded by the input, not by the kernel.
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

