// QLinearAveragePool over NHWC images with 3x3 windows, stride 1, pads 1: window sums and requantisation in one
// pass over each image row, the vectors running across the row's interleaved columns and channels, and ORT's float
// evaluation of the rounding ties of a vector's windows at once.
// Part of the per-ISA kernels: included by qlinear_pool.h inside namespace onnx_pools::ONNX_POOLS_ISA::{anon}.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/qlinear/plane3x3.h"
#include "kernels/qlinear/requantise.h"

// Per image of h x w positions of C channels, an input row holding n = w x C values: output (r, c, ch) sums input
// rows r-1..r+1, columns c-1..c+1 in the image, channel ch. Row by row: the column sums of the row's window rows
// (less x_zero_point per element, so that pads add 0) into a row buffer with C zeros on each side, then output
// value i of the row (i = c x C + ch) adds the column sums at i - C, i and i + C. Vectors whose lanes all lie in
// columns 1 .. w - 2 take that window's one scale; those reaching column 0 or w - 1 pick each lane's. Each value is
// requantised as Requantiser::span does (same values, same marks); a vector with marks has them settled at once
// (settled): the exact value in double, and where that lies on a tie, ORT's float evaluation, all lanes together.
// With equal scales and count_include_pad=0 (windows of 4 and 6 elements at the edges, a sixth of them on ties),
// the vectors reaching column 0 or w - 1 and the first and last rows take ORT's float value alone
// (ort_decides_edges_).
// Images of at least 2 channels and 16 values a row, any h and w.
// Whether a vector's lanes may lie in column 0 or w - 1 (their windows then leave out a column).
enum class Columns { Middle, ReachEdges };
// How the vectors reaching column 0 or w - 1 are requantised: the float pass, or ORT's float value alone.
enum class EdgeValues { FloatPass, OrtOnly };

template <class Q>
class Nhwc3x3Pool : Window3x3Lanes<Q> {
  using Shared = Window3x3Lanes<Q>;
  using Shared::any, Shared::half, Shared::joined, Shared::narrow_one, Shared::select, Shared::widened;

 public:
  using Lanes = RequantiseLanes<Q>;
  static constexpr int kLength = kPlaneLanes;
  static constexpr int64_t kStep = 4 * kLength;  // values per step of the middle columns: the four vectors of a narrow
  using Ints = typename Lanes::Ints;
  using Floats = typename Lanes::Floats;
  using HalfInts = typename Shared::HalfInts;
  using Doubles = typename Shared::Doubles;
  using Longs = typename Shared::Longs;
  using Shorts = typename Lanes::Shorts;

  static bool applies(const PoolGeometry& g, int64_t channels) {
    // at least column_sums' one vector a row
    return channels >= 2 && Shared::same_size_3x3(g) && g.axes[1].in * channels >= 2 * kLength;
  }

  // images: how many the call pools (small calls skip the can_mark test: it would cost more than it saves)
  Nhwc3x3Pool(const PoolGeometry& g, const QLinearParams& q, int64_t channels, int64_t images)
      : q_(q),
        requantiser_(q, g.kernel_size),
        marks_are_ties_(requantiser_.marks_are_ties),
        edge_ties_(marks_are_ties_ && !q.count_include_pad),
        ort_decides_edges_(edge_ties_ && q.x_scale >= 0x1p-100f && q.x_scale <= 0x1p100f),
        h_(g.axes[0].in),
        w_(g.axes[1].in),
        c_(channels),
        n_(w_ * channels),
        image_(h_ * n_),
        row_stride_(n_ + 2 * c_ + kLength),
        column_sums_(static_cast<size_t>(2 * (n_ + 2 * c_))),
        dequantised_(static_cast<size_t>(3 * row_stride_)) {
    for (int rows = 1; rows <= 3; ++rows) {
      for (int cols = 1; cols <= 3; ++cols) {
        scale_[rows][cols] = static_cast<float>(requantiser_.window_scale(rows * cols));
        exact_scale_[rows][cols] = requantiser_.window_scale(rows * cols);
      }
      // (the row kinds the image has: 1 row alone, else 2 at its ends and 3 between)
      const bool occurs = h_ == 1 ? rows == 1 : rows == 2 || (rows == 3 && h_ > 2);
      middle_marks_[rows] = occurs && (images * image_ < kMarkCheckWork || can_mark(rows * 3, scale_[rows][3]));
    }
  }

  void run(const Q* x, Q* y, int64_t images) {
    for (int64_t u = 0; u < images; ++u) image(x + u * image_, y + u * image_);
  }

 private:
  void image(const Q* x, Q* y) {
    for (int slot = 0; slot < 3; ++slot) whole_row_[slot] = edges_row_[slot] = -1;
    if (h_ == 1) {
      rows<WindowRows::Neither>(x, y, 0, 1);
      return;
    }
    rows<WindowRows::BelowOnly>(x, y, 0, 1);
    rows<WindowRows::Both>(x, y, 1, h_ - 1);
    rows<WindowRows::AboveOnly>(x, y, h_ - 1, h_);
  }

  // Input rows r - 1 .. r + 1 of the image at x (those in it) dequantised as ORT does (ort_dequantised), for
  // settled(): whole, or only the values the vectors reaching column 0 or w - 1 read. Each row once per image
  // (a ring of three, tagged by row): settling from bytes, the conversions cost settled() about half its time,
  // and with equal scales (count 4 and 6 windows on ties) it runs for most vectors of the first and last rows
  // and of the edge columns.
  template <WindowRows kRows>
  const float* const* dequantised_rows(const Q* x, int64_t r, bool whole) {
    for (int d = 0; d < 3; ++d) {
      if ((d == 0 && !has_above(kRows)) || (d == 2 && !has_below(kRows))) continue;
      const int64_t row = r - 1 + d, slot = row % 3;
      float* f = dequantised_.data() + slot * row_stride_ + c_;
      window_rows_[d] = f;
      if (whole_row_[slot] == row || (!whole && edges_row_[slot] == row)) continue;
      const Q* xr = x + row * n_;
      if (whole) {
        dequantise(xr, f, 0, n_);
        whole_row_[slot] = edges_row_[slot] = row;
      } else {
        // a vector starting before C (or after n - C - kLength) reads up to C past its end (before its start)
        const int64_t reach = min_of(n_, 2 * c_ + kLength);
        dequantise(xr, f, 0, reach);
        dequantise(xr, f, n_ - reach, n_);
        whole_row_[slot] = -1;
        edges_row_[slot] = row;
      }
    }
    return window_rows_;
  }

  // f[j] = ORT's dequantised xr[j] for j in [begin, end) (at least kLength values), the last vector moved back.
  void dequantise(const Q* xr, float* f, int64_t begin, int64_t end) const {
    const Floats x_scale = Floats{} + q_.x_scale;
    const int32_t x_zero_point = q_.x_zero_point;
    for (int64_t j = begin;; j += kLength) {
      j = min_of(j, end - kLength);
      const Floats v = x_scale * __builtin_convertvector(widened(xr + j) - x_zero_point, Floats);
      std::memcpy(f + j, &v, sizeof v);
      if (j + kLength >= end) break;
    }
  }

  // How the float pass's marks of a row's middle columns are handled: none can occur (can_mark), they are rare
  // (a branch per step, settled when taken), or with equal scales a sixth of the values are ties (every vector
  // settled without a branch: taken for three vectors in four, it mispredicted often and cost more than the ties).
  // MarkRule::OrtOnly: with equal scales where ORT's float value decides every output of a tie-prone window (see
  // ort_decides_edges_), that value alone, no float pass.

  // Output rows [begin, end), which share which neighbour rows they have (above: has_above(kRows), below:
  // has_below(kRows)). kEdgeValues (OrtOnly where ort_decides_edges_): the vectors reaching column 0 or w - 1 take
  // ORT's float value alone.
  template <WindowRows kRows>
  void rows(const Q* x, Q* y, int64_t begin, int64_t end) {
    constexpr int rows_valid = row_count(kRows);
    const bool marks = middle_marks_[rows_valid];
    if (ort_decides_edges_) {
      if (marks) {
        rows<kRows, MarkRule::OrtOnly, EdgeValues::OrtOnly>(x, y, begin, end);
      } else {
        rows<kRows, MarkRule::Skip, EdgeValues::OrtOnly>(x, y, begin, end);
      }
    } else if (!marks) {
      rows<kRows, MarkRule::Skip, EdgeValues::FloatPass>(x, y, begin, end);
    } else if (marks_are_ties_) {
      rows<kRows, MarkRule::SettleAll, EdgeValues::FloatPass>(x, y, begin, end);
    } else {
      rows<kRows, MarkRule::Rare, EdgeValues::FloatPass>(x, y, begin, end);
    }
  }

  template <WindowRows kRows, MarkRule kMiddle, EdgeValues kEdgeValues>
  __attribute__((noinline)) void rows(const Q* x, Q* y, int64_t begin, int64_t end) {
    constexpr int rows_valid = row_count(kRows);
    const Floats zero_point = Floats{} + static_cast<float>(requantiser_.y_zero);
    const Floats middle_scale = Floats{} + scale_[rows_valid][3];
    const int64_t n = n_, c = c_, middle_end = (w_ - 1) * c_;
    if (begin < end) column_sums<kRows>(x + begin * n, row_sums(begin));
    for (int64_t r = begin; r < end; ++r) {
      // the next row's sums first: loaded right after their stores, they waited for them (as Plane3x3Pool)
      if (r + 1 < end) column_sums<kRows>(x + (r + 1) * n, row_sums(r + 1));
      const int16_t* sums = row_sums(r);
      Q* yr = y + r * n;
      // the dequantised rows the row's tie-heavy vectors use (rare ones ask for theirs when they come)
      constexpr bool kWholeRows = kMiddle == MarkRule::SettleAll || kMiddle == MarkRule::OrtOnly;
      const float* const* tie_rows = kWholeRows || edge_ties_ ? dequantised_rows<kRows>(x, r, kWholeRows) : nullptr;
      auto edges = [&](int64_t at) __attribute__((always_inline)) {
        edge_vector<kRows, kEdgeValues>(x, r, sums, min_of(at, n - kLength), zero_point, tie_rows, yr);
      };
      int64_t i = 0;
      for (; i < c; i += kLength) edges(i);
      if constexpr (kMiddle == MarkRule::OrtOnly) {
        for (; i + kStep <= middle_end; i += kStep) {
          Lanes::narrow(ort_values<kRows, Columns::Middle>(tie_rows, i),
                        ort_values<kRows, Columns::Middle>(tie_rows, i + kLength),
                        ort_values<kRows, Columns::Middle>(tie_rows, i + 2 * kLength),
                        ort_values<kRows, Columns::Middle>(tie_rows, i + 3 * kLength), yr + i);
        }
        for (; i + kLength <= middle_end; i += kLength)
          narrow_one(ort_values<kRows, Columns::Middle>(tie_rows, i), yr + i);
      }
      for (; i + kStep <= middle_end; i += kStep) {
        const Shorts a = window_sums16(sums, i), b = window_sums16(sums, i + 2 * kLength);
        Ints rounded[4], marked[4];
        const Ints difference[4] = {Shared::low_half(a), Shared::high_half(a), Shared::low_half(b),
                                    Shared::high_half(b)};
        for (int v = 0; v < 4; ++v) {
          rounded[v] = requantised(difference[v], middle_scale, zero_point, marked[v]);
        }
        if constexpr (kMiddle == MarkRule::SettleAll) {
          for (int v = 0; v < 4; ++v) {
            rounded[v] =
                settled<kRows, Columns::Middle>(tie_rows, i + v * kLength, difference[v], marked[v], rounded[v]);
          }
        } else if constexpr (kMiddle == MarkRule::Rare) {
          if (__builtin_expect(any((marked[0] | marked[1]) | (marked[2] | marked[3])), 0)) {
            const float* const* window_rows = dequantised_rows<kRows>(x, r, true);
            for (int v = 0; v < 4; ++v) {
              if (any(marked[v])) {
                rounded[v] = settled_apart<kRows, Columns::Middle>(window_rows, i + v * kLength, difference[v],
                                                                   marked[v], rounded[v]);
              }
            }
          }
        }
        Lanes::narrow(rounded[0], rounded[1], rounded[2], rounded[3], yr + i);
      }
      for (; i + kLength <= middle_end; i += kLength) {
        const Ints difference = window_sums8(sums, i);
        Ints marked;
        Ints rounded = requantised(difference, middle_scale, zero_point, marked);
        if (kMiddle != MarkRule::Skip && any(marked)) {
          rounded = settled_apart<kRows, Columns::Middle>(dequantised_rows<kRows>(x, r, true), i, difference, marked,
                                                          rounded);
        }
        narrow_one(rounded, yr + i);
      }
      for (; i < n; i += kLength) edges(i);
    }
  }

  // Whether the float pass (requantised) marks any window of `valid` elements and scale `scale` (Shared::can_mark).
  // Marks are rare with distinct scales (a value within 2e-4 of a tie) and the values few, so that often none can
  // be marked and the middle columns skip the marks; with equal scales none can in
  // windows of an odd count (see Requantiser::tie_free).
  bool can_mark(int valid, float scale) const {
    return Shared::can_mark(valid, scale, q_.x_zero_point, requantiser_.y_zero);
  }
  static constexpr int64_t kMarkCheckWork = 4096;  // values of a call from which can_mark is tried

  // The kLength values from i of a row, any of them in column 0 or w - 1: each lane's window scale by its column.
  // tie_rows: the dequantised rows, where edge_ties_ (each vector settled, without a branch, or with
  // EdgeValues::OrtOnly ORT's value alone).
  template <WindowRows kRows, EdgeValues kEdgeValues>
  __attribute__((always_inline)) void edge_vector(const Q* x, int64_t r, const int16_t* sums, int64_t i,
                                                  Floats zero_point, const float* const* tie_rows, Q* yr) {
    constexpr int rows_valid = row_count(kRows);
    if constexpr (kEdgeValues == EdgeValues::OrtOnly) {
      narrow_one(ort_values<kRows, Columns::ReachEdges>(tie_rows, i), yr + i);
      return;
    }
    Ints left_in, right_in;
    lanes_in(i, left_in, right_in);
    const Floats scale =
        select(left_in & right_in, Floats{} + scale_[rows_valid][3],
               select(left_in | right_in, Floats{} + scale_[rows_valid][2], Floats{} + scale_[rows_valid][1]));
    const Ints difference = window_sums8(sums, i);
    Ints marked;
    Ints rounded = requantised(difference, scale, zero_point, marked);
    if (edge_ties_) {
      rounded = settled<kRows, Columns::ReachEdges>(tie_rows, i, difference, marked, rounded);
    } else if (any(marked)) {
      rounded = settled_apart<kRows, Columns::ReachEdges>(dequantised_rows<kRows>(x, r, false), i, difference, marked,
                                                          rounded);
    }
    narrow_one(rounded, yr + i);
  }

  // Whether the left / right column of the windows of values [i, i + kLength) lies in the image.
  void lanes_in(int64_t i, Ints& left_in, Ints& right_in) const {
    Ints at;
    for (int k = 0; k < kLength; ++k) at[k] = static_cast<int32_t>(i + k);
    left_in = at >= static_cast<int32_t>(c_);
    right_in = at < static_cast<int32_t>(n_ - c_);
  }

  // out[c_ + i], i in [0, n): the sum of value i over the window rows of the row at xr, less x_zero_point per
  // row (so that a window's three column sums add up to its difference from its zero sum). In int16 (at most
  // 3 x 255), a vector of Shorts at a time, the last moved back to end at n.
  template <WindowRows kRows>
  void column_sums(const Q* xr, int16_t* out_padded) const {
    constexpr int rows_valid = row_count(kRows);
    constexpr int64_t kShorts = 2 * kLength;
    const Shorts zero_sum = Shorts{} + static_cast<int16_t>(q_.x_zero_point * rows_valid);
    int16_t* out = out_padded + c_;
    const int64_t n = n_;
    for (int64_t i = 0;; i += kShorts) {
      i = min_of<int64_t>(i, n - kShorts);
      Shorts s = Shared::widened_shorts(xr + i) - zero_sum;
      if constexpr (has_above(kRows)) s += Shared::widened_shorts(xr + i - n);
      if constexpr (has_below(kRows)) s += Shared::widened_shorts(xr + i + n);
      Shared::store(out + i, s);
      if (i + kShorts >= n) break;
    }
  }

  // Output row r's column sums (see column_sums), C zeros on each side: two rows' buffers, used in turn.
  int16_t* row_sums(int64_t r) { return column_sums_.data() + (r & 1) * (n_ + 2 * c_); }

  // The windows' differences from their zero sums of values [i, i + 2 kLength) of a row with column sums `sums`,
  // in int16 (at most 9 x 255), and of [i, i + kLength) widened to int32.
  Shorts window_sums16(const int16_t* sums, int64_t i) const {
    return (Shared::shorts_at(sums + i) + Shared::shorts_at(sums + i + c_)) + Shared::shorts_at(sums + i + 2 * c_);
  }
  Ints window_sums8(const int16_t* sums, int64_t i) const {
    return Shared::ints_of((Shared::half_shorts_at(sums + i) + Shared::half_shorts_at(sums + i + c_)) +
                           Shared::half_shorts_at(sums + i + 2 * c_));
  }
  static Ints requantised(Ints difference, Floats scale, Floats zero_point, Ints& marked) {
    return Shared::requantised(difference, scale, zero_point, marked);
  }

  // settled() out of line, for the rare marks.
  template <WindowRows kRows, Columns kColumns>
  __attribute__((noinline)) Ints settled_apart(const float* const* window_rows, int64_t i, Ints difference, Ints marks,
                                               Ints rounded) const {
    return settled<kRows, kColumns>(window_rows, i, difference, marks, rounded);
  }

  // The final values of the marked lanes (marks) of the kLength windows of values [i, i + kLength) of a row
  // (difference: their differences from their zero sums): the exact value in double where it decides (as
  // Requantiser::exact and near_tie; with equal scales every marked value is a tie, see marks_are_ties), ORT's
  // float value (ort_values) where it lies on a tie, the float pass's value (rounded) where unmarked. Every lane
  // computed, the marked lanes selected: about the cost of a few windows per vector, not a scalar evaluation per
  // tie (with equal scales a sixth of the edge windows are ties). kColumns: whether lanes may lie in column 0 or w - 1.
  template <WindowRows kRows, Columns kColumns>
  __attribute__((always_inline)) Ints settled(const float* const* window_rows, int64_t i, Ints difference, Ints marks,
                                              Ints rounded) const {
    constexpr bool kEdges = kColumns == Columns::ReachEdges;
    constexpr int rows_valid = row_count(kRows);
    const Ints all = Ints{} - 1;
    Ints exact = rounded, tie = all;
    if (!marks_are_ties_) {
      Ints left_in = all, right_in = all;
      if constexpr (kEdges) lanes_in(i, left_in, right_in);
      exact_and_ties(difference, Ints{} + 1 - left_in - right_in, rows_valid, exact, tie);
    }
    return Lanes::resolved(marks, tie, ort_values<kRows, kColumns>(window_rows, i), exact, rounded);
  }

  // ORT's float value of the kLength windows of values [i, i + kLength) of a row (as ort_float_value_2d: each
  // in-image element dequantised in float, added in row-major window order, the sum divided by the count, then by
  // y_scale, plus y_zero_point; clamped and rounded as rounded_output), from the dequantised rows. kColumns: whether
  // lanes may lie in column 0 or w - 1.
  template <WindowRows kRows, Columns kColumns>
  __attribute__((always_inline)) Ints ort_values(const float* const* window_rows, int64_t i) const {
    constexpr bool kEdges = kColumns == Columns::ReachEdges;
    constexpr int rows_valid = row_count(kRows);
    const Ints all = Ints{} - 1;
    Ints left_in = all, right_in = all;
    if constexpr (kEdges) lanes_in(i, left_in, right_in);
    const int64_t c = c_;
    Floats acc = {};
    // lanes of columns 0 and w - 1 leave out their left / right column: where C is a multiple of kLength, all
    // lanes of a vector alike (no select)
    const bool any_left = !kEdges || any(left_in), any_right = !kEdges || any(right_in);
    const bool all_left = !kEdges || !any(~left_in), all_right = !kEdges || !any(~right_in);
    // (lambdas always inlined: GCC left add_row out of line, a call per row of each window)
    auto add = [&](const float* e, const Ints& inside, bool any, bool every) __attribute__((always_inline)) {
      if (!any) return;
      Floats term;
      std::memcpy(&term, e, sizeof term);
      acc = every ? acc + term : select(inside, acc + term, acc);
    };
    auto add_row = [&](const float* row) __attribute__((always_inline)) {
      add(row + i - c, left_in, any_left, all_left);
      add(row + i, all, true, true);
      add(row + i + c, right_in, any_right, all_right);
    };
    if constexpr (has_above(kRows)) add_row(window_rows[0]);
    add_row(window_rows[1]);
    if constexpr (has_below(kRows)) add_row(window_rows[2]);
    const Ints columns = Ints{} + 1 - left_in - right_in;  // in-image columns of each window
    const Floats count = q_.count_include_pad ? Floats{} + 9.0f : __builtin_convertvector(columns * rows_valid, Floats);
    return Shared::ort_rounded(acc, count, Floats{} + q_.y_scale, static_cast<float>(q_.y_zero_point));
  }

  // Shared::exact_and_ties with each lane's window_scale(rows_valid x columns).
  void exact_and_ties(const Ints& difference, const Ints& columns, int rows_valid, Ints& exact, Ints& tie) const {
    auto scale_of = [&](int h) {
      const Longs cols = __builtin_convertvector(half(columns, h), Longs);
      auto scale = [&](int k) { return Longs(Doubles{} + exact_scale_[rows_valid][k]); };
      return Doubles((cols == 3 ? scale(3) : cols == 2 ? scale(2) : scale(1)));
    };
    Shared::exact_and_ties(difference, scale_of, requantiser_.y_zero, exact, tie);
  }

  const QLinearParams q_;
  const Requantiser<Q, int16_t> requantiser_;
  const bool marks_are_ties_;  // x_scale == y_scale: every marked value lies on a tie (Requantiser::marks_are_ties)
  const bool edge_ties_;       // and windows of 4 and 6 elements at the edges: a sixth of their values on a tie
  // and scales where ORT's float value alone decides the outputs of those windows: then they take it with no float
  // pass (MarkRule::OrtOnly, edge_vector). The argument is Plane3x3Pool's ort_decides_edges_, for any count k <= 9:
  // ORT's value is off the exact one by at most 2k - 1 roundings of sums up to k x 255 x x_scale, divided by k x
  // y_scale, and 2 of values up to 255 (under 3e-4), while a value of a window of k elements not on a tie is at least 1
  // / 18 from one, so that both round alike
  const bool ort_decides_edges_;
  const int64_t h_, w_, c_, n_, image_;  // n_: values of a row; image_: of an image
  float scale_[4][4] = {};               // [rows][columns] in the image: the float window scale
  double exact_scale_[4][4] = {};        // and Requantiser::window_scale itself
  bool middle_marks_[4] = {};            // [rows]: whether can_mark for the middle columns' windows
  const int64_t row_stride_;             // floats per row of dequantised_: C before the row, C + kLength after
  ZeroedArray<int16_t> column_sums_;     // two rows' (see row_sums), with C zeros for each pad column
  ZeroedArray<float> dequantised_;       // three input rows (see dequantised_rows), 0 around each
  int64_t whole_row_[3] = {}, edges_row_[3] = {};  // per row of dequantised_: the input row it holds, or -1
  const float* window_rows_[3] = {};               // dequantised_rows' answer
};
