// QLinearAveragePool over NCHW planes with 3x3 windows, stride 1, pads 1 (Inception's and TFLite's average pool):
// window sums and requantisation in one pass over each plane, in registers, and ORT's float evaluation of the
// rounding ties of a vector's windows at once. Written on RequantiseLanes (GCC vector extensions); taken where
// those have 8 lanes (kOnePass3x3): with 4 (SSE2) qlinear_pool's flat passes are faster.
// Part of the per-ISA kernels: included by qlinear_pool.h inside namespace onnx_pools::ONNX_POOLS_ISA::{anon}.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/kernels.h"
#include "kernels/qlinear/requantise.h"

// RequantiseLanes' lane count, as a constant outside the template (a vector_size depending on a template
// parameter is dropped by GCC 12, leaving a scalar type).
constexpr int kPlaneLanes = RequantiseLanes<uint8_t>::kLength;
#if defined(__ARM_NEON)
constexpr bool kOnePass3x3 = true;
#else
constexpr bool kOnePass3x3 = kPlaneLanes == 8;
#endif

// Which neighbour rows the windows of an output row have (above, below, both or neither: a one-row input).
enum class WindowRows { Both, BelowOnly, AboveOnly, Neither };
constexpr bool has_above(WindowRows w) { return w == WindowRows::Both || w == WindowRows::AboveOnly; }
constexpr bool has_below(WindowRows w) { return w == WindowRows::Both || w == WindowRows::BelowOnly; }
constexpr int row_count(WindowRows w) { return 1 + has_above(w) + has_below(w); }

// How a one-pass kernel treats the float pass's marks in a stretch of outputs: none can occur (skipped), they are
// rare (gathered, and settled where found), every output is settled (with equal scales a sixth of the edge
// windows are ties: a branch per vector would mispredict), or ORT's float value alone decides every output.
enum class MarkRule { Skip, Rare, SettleAll, OrtOnly };

// The vector steps both one-pass 3x3 kernels share (Plane3x3Pool below, Nhwc3x3Pool in nhwc3x3.h): the exact
// values in double, and the test whether a window kind can be marked at all.
template <class Q>
struct Window3x3Lanes : RequantiseLanes<Q> {
  using Lanes = RequantiseLanes<Q>;
  static constexpr int kLength = kPlaneLanes;
  static_assert(kLength == Lanes::kLength);
  using Ints = typename Lanes::Ints;
  using Floats = typename Lanes::Floats;
  typedef int32_t HalfInts __attribute__((vector_size(kLength * 2)));
  typedef double Doubles __attribute__((vector_size(kLength * 4)));  // half the lanes, in double
  typedef int64_t Longs __attribute__((vector_size(kLength * 4)));

  // Whether the windows are 3x3, stride 1, pads 1 over a 2-D input (so outputs and inputs have the same size): the
  // geometry both kernels take.
  static bool same_size_3x3(const PoolGeometry& g) {
    if (!kOnePass3x3 || g.axes.size() != 2) return false;
    for (const AxisGeometry& a : g.axes) {
      if (a.kernel != 3 || a.stride != 1 || a.dilation != 1 || a.pad_begin != 1 || a.out != a.in) return false;
    }
    return true;
  }

  // Whether the float pass can mark a window of `valid` input elements with this scale: every difference from its
  // zero sum such a window can hold (valid x (qmin - x_zero_point) .. valid x (qmax - x_zero_point)), tried once.
  static bool can_mark(int64_t valid, float scale, int32_t x_zero_point, double y_zero) {
    const int32_t lowest = static_cast<int32_t>(valid) * (std::numeric_limits<Q>::min() - x_zero_point);
    const int32_t highest = static_cast<int32_t>(valid) * (std::numeric_limits<Q>::max() - x_zero_point);
    const Floats zero_point = Floats{} + static_cast<float>(y_zero);
    const Ints iota = Lanes::iota();
    for (int32_t d = lowest; d <= highest; d += kLength) {
      const Ints difference = iota + d;
      Ints marked;
      Lanes::requantised(Lanes::select(difference <= highest, difference, Ints{} + highest), Floats{} + scale,
                         zero_point, marked);
      if (Lanes::any(marked)) return true;
    }
    return false;
  }

  // The exact value of each lane, difference x scale_of(h) + y_zero in double (scale_of(h): the scales of lanes
  // [h * kLength / 2, (h + 1) * kLength / 2)), clamped and rounded half to even (as Requantiser::exact), and
  // whether it lies on a tie (all ones, as near_tie). Half the lanes at a time (a double is twice as wide).
  template <class ScaleOf>
  static void exact_and_ties(const Ints& difference, ScaleOf scale_of, double y_zero, Ints& exact, Ints& tie) {
    const Doubles low = Doubles{} + static_cast<double>(std::numeric_limits<Q>::min());
    const Doubles high = Doubles{} + static_cast<double>(std::numeric_limits<Q>::max());
    const Doubles band = Doubles{} + kTieBand;
    HalfInts exact_half[2], tie_half[2];
    for (int h = 0; h < 2; ++h) {
      Doubles v = __builtin_convertvector(half(difference, h), Doubles) * scale_of(h) + y_zero;
      v = v < low ? low : v;  // as clamp_to
      v = v > high ? high : v;
      const Doubles whole = (v + kRoundMagicDouble) - kRoundMagicDouble;  // as round_half_even
      const Doubles off = v - whole;
      exact_half[h] = __builtin_convertvector(whole, HalfInts);
      tie_half[h] = __builtin_convertvector((off > band) | (off < -band), HalfInts);
    }
    exact = joined(exact_half[0], exact_half[1]);
    tie = joined(tie_half[0], tie_half[1]);
  }

  // Lanes [h * kLength / 2, (h + 1) * kLength / 2) of a, and two halves joined.
  static HalfInts half(const Ints& a, int h) {
    HalfInts out;
    std::memcpy(&out, reinterpret_cast<const char*>(&a) + h * sizeof out, sizeof out);
    return out;
  }
  static Ints joined(const HalfInts& lo, const HalfInts& hi) {
    Ints out;
    std::memcpy(&out, &lo, sizeof lo);
    std::memcpy(reinterpret_cast<char*>(&out) + sizeof lo, &hi, sizeof hi);
    return out;
  }
};

// Per plane of h x w: output (r, c) sums input rows r-1..r+1 and columns c-1..c+1 that lie in the plane. The plane
// is taken row by row: the column sums of the row's window rows (less x_zero_point per element, so that pads add
// 0) into a row buffer with a 0 on each side, then each output adds three neighbouring column sums and takes its
// window's scale from a per-column array (no per-lane column masks). Each value is requantised as
// Requantiser::span does (same values, same marks); marked values are settled exactly in double, and those on a
// tie are evaluated as ORT does (ort_float_value_2d), kLength windows per vector (settled), except in columns 0
// and w - 1, settled down the columns (edge_columns). With equal scales and count_include_pad=0, where a sixth of
// the edge windows are ties, the first and last rows and columns 0 and w - 1 take ORT's value (border_row,
// edge_columns); with distinct scales the middle rows gather marks only if their windows can be marked
// (middle_rows_mark). Planes of at least kStep columns.
template <class Q>
class Plane3x3Pool : Window3x3Lanes<Q> {
  using Shared = Window3x3Lanes<Q>;
  using Shared::any, Shared::floats_at, Shared::half, Shared::ints_at, Shared::joined, Shared::narrow_one,
      Shared::ort_rounded, Shared::widened;

 public:
  using Lanes = RequantiseLanes<Q>;
  static constexpr int kLength = kPlaneLanes;
  static constexpr int64_t kStep = 4 * kLength;  // outputs per step of a row: the four vectors Lanes::narrow packs
  using Ints = typename Lanes::Ints;
  using Floats = typename Lanes::Floats;
  using HalfInts = typename Shared::HalfInts;
  using Doubles = typename Shared::Doubles;
  using Longs = typename Shared::Longs;
  using Shorts = typename Lanes::Shorts;

  static bool applies(const PoolGeometry& g, int64_t channels) {
    return channels == 1 && Shared::same_size_3x3(g) && g.axes[0].in >= 3 && g.axes[1].in >= kStep;
  }

  Plane3x3Pool(const PoolGeometry& g, const QLinearParams& q)
      : q_(q),
        requantiser_(q, g.kernel_size),
        marks_are_ties_(q.x_scale == q.y_scale),
        ties_at_edges_(marks_are_ties_ && !q.count_include_pad),
        ort_decides_edges_(ties_at_edges_ && q.x_scale >= 0x1p-100f && q.x_scale <= 0x1p100f),
        h_(g.axes[0].in),
        w_(g.axes[1].in),
        size_(g.in_size),
        // the bytes settle_row reads around a vector, from its first index - w - 1 to its last + w + 1
        edge_copy_(static_cast<size_t>(2 * w_ + kLength + 2)),
        column_sums_(static_cast<size_t>(2 * (w_ + 2))),
        scale_outer_(static_cast<size_t>(w_)),
        scale_middle_(static_cast<size_t>(w_)),
        edge_dwords_(static_cast<size_t>(2 * (h_ + 2 + kLength))),
        edge_pairs_(static_cast<size_t>(h_ + 2 + kLength)),
        edge_terms_(static_cast<size_t>(2 * (h_ + 2 + kLength))),
        row_terms_(ties_at_edges_ ? static_cast<size_t>(2 * (w_ + 2)) : 0),
        count_outer_(ties_at_edges_ ? static_cast<size_t>(w_) : 0) {
    for (int64_t c = 0; c < w_; ++c) {
      const int64_t columns = c == 0 || c == w_ - 1 ? 2 : 3;
      scale_outer_[c] = static_cast<float>(requantiser_.window_scale(2 * columns));
      scale_middle_[c] = static_cast<float>(requantiser_.window_scale(3 * columns));
      if (ties_at_edges_) count_outer_[c] = static_cast<float>(2 * columns);
    }
  }

  void run(const Q* x, Q* y, int64_t planes) {
    if (!marks_are_ties_) marks_middle_ = middle_rows_mark(planes * size_);
    for (int64_t p = 0; p < planes; ++p) {
      // a step at the plane's start or end reads a byte before or after it (masked off): within the tensor
      // except before the call's first plane and after its last, which read a zero-padded copy instead
      plane(x + p * size_, y + p * size_, p == 0, p == planes - 1);
    }
  }

 private:
  // One plane, row by row: the first row, the rows with a row above and below, the last row.
  // The rows leave the lanes of columns 0 and w - 1 as the float pass rounds them and only note whether any is
  // marked; those two columns are then settled together (edge_columns), vectorised down the rows: with equal
  // scales a sixth of the edge windows are ties, and settling the vector of each cost more than the rest of the
  // plane. With equal scales (marks_are_ties_) only windows of an even count can hold a tie: none with
  // count_include_pad (count 9 everywhere), else those at a row's end or in the first or last row (4 or 6)
  // (ties_at_edges_): then the rows between round without marks, the first and last row are border rows
  // (border_row: ORT's value for every lane, no marked rows done again), and columns 0 and w - 1 are always
  // settled apart.
  void plane(const Q* x, Q* y, bool first, bool last) {
    Ints edge_marks{};
    if (ties_at_edges_) {
      if (ort_decides_edges_) {
        edges<MarkRule::OrtOnly>(x, y, first, last);
      } else {
        edges<MarkRule::SettleAll>(x, y, first, last);
      }
      return;
    }
    rows<WindowRows::BelowOnly>(x, y, 0, 1, first, last, marks_outer_, edge_marks);
    rows<WindowRows::Both>(x, y, 1, h_ - 1, first, last, marks_middle_, edge_marks);
    rows<WindowRows::AboveOnly>(x, y, h_ - 1, h_, first, last, marks_outer_, edge_marks);
    if (any(edge_marks)) {
      edge_columns<MarkRule::Rare>(y, 0);
      edge_columns<MarkRule::Rare>(y, w_ - 1);
    }
  }

  // A plane with ties at its edges (ties_at_edges_); kEdges OrtOnly: ORT's float value decides every edge output (see
  // ort_decides_edges_), else only the ties, the float pass the others.
  template <MarkRule kEdges>
  void edges(const Q* x, Q* y, bool first, bool last) {
    Ints edge_marks{};
    border_row<WindowRows::BelowOnly, kEdges>(x, y, 0);
    rows<WindowRows::Both, MarkRule::Skip>(x, y, 1, h_ - 1, first, last, edge_marks);
    border_row<WindowRows::AboveOnly, kEdges>(x, y, h_ - 1);
    edge_columns<kEdges>(y, 0);
    edge_columns<kEdges>(y, w_ - 1);
  }

  // Row r, the first (has_below(kRows)) or last (has_above(kRows)) of a plane with ties at its edges: ORT's float value
  // for every lane, from the dequantised elements of the two window rows, kept in row_terms_ with a 0 for each pad
  // column (adding a pad's 0 leaves ORT's sum as it is); kept in every lane (OrtOnly), or in those the float pass (from
  // the column sums) marks, every one a tie (marks_are_ties_). No branch per vector: a sixth of the lanes are ties
  // (count 4, 6).
  template <WindowRows kRows, MarkRule kEdges>
  void border_row(const Q* x, Q* y, int64_t r) {
    static_assert(row_count(kRows) == 2);
    const int64_t w = w_;
    const Q* xr = x + r * w;
    if constexpr (kEdges != MarkRule::OrtOnly) column_sums<kRows>(xr, row_sums(r));
    std::memcpy(edge_dwords(0) + r + 1, xr, sizeof(int32_t));  // for edge_columns
    std::memcpy(edge_dwords(1) + r + 1, xr + w - 4, sizeof(int32_t));
    float* upper = row_terms_.data() + 1;  // the window's upper row (row-major: its elements are added first)
    float* lower = upper + w + 2;
    dequantised_row(xr - (has_above(kRows) ? w : 0), upper);
    dequantised_row(xr + (has_below(kRows) ? w : 0), lower);
    const Floats zero_point = Floats{} + static_cast<float>(requantiser_.y_zero);
    const Floats y_scale = Floats{} + q_.y_scale;
    const float y_zero_point = static_cast<float>(q_.y_zero_point);
    const int16_t* sums = row_sums(r);
    for (int64_t j = 0; j < w; j += kLength) {
      j = min_of(j, w - kLength);
      // ORT's sum in the window's order (left to right, upper row first), the pads' 0 included
      const Floats acc = floats_at(upper + j - 1) + floats_at(upper + j) + floats_at(upper + j + 1) +
                         floats_at(lower + j - 1) + floats_at(lower + j) + floats_at(lower + j + 1);
      Ints out = ort_rounded(acc, floats_at(count_outer_.data() + j), y_scale, y_zero_point);
      if constexpr (kEdges != MarkRule::OrtOnly) {
        Ints marked;
        const Ints rounded = requantised(sums, j, scale_outer_.data(), zero_point, marked);
        out = Lanes::resolved(marked, Ints{} - 1, out, out, rounded);  // every mark a tie (marks_are_ties_)
      }
      narrow_one(out, y + r * w + j);
    }
  }

  // out[c] = x_scale x (xr[c] - x_zero_point) for c in [0, w), as ort_dequantised (out[-1] and out[w] stay 0).
  void dequantised_row(const Q* xr, float* out) const {
    const Floats x_scale = Floats{} + q_.x_scale;
    for (int64_t c = 0;; c += kLength) {
      c = min_of(c, w_ - kLength);
      const Floats term = x_scale * __builtin_convertvector(widened(xr + c) - q_.x_zero_point, Floats);
      std::memcpy(out + c, &term, sizeof term);
      if (c + kLength >= w_) break;
    }
  }

  template <WindowRows kRows>
  void rows(const Q* x, Q* y, int64_t begin, int64_t end, bool first, bool last, bool marks, Ints& edge_marks) {
    if (marks) {
      rows<kRows, MarkRule::Rare>(x, y, begin, end, first, last, edge_marks);
    } else {
      rows<kRows, MarkRule::Skip>(x, y, begin, end, first, last, edge_marks);
    }
  }

  // Output rows [begin, end), which share which neighbour rows they have (above: has_above(kRows), below:
  // has_below(kRows)). Per row: the column sums of its window rows (less x_zero_point per element) into column_sums_,
  // then each output adds three neighbouring column sums (the pad columns hold 0) and is requantised as
  // Requantiser::span does (same float operations, same marks), in steps of kStep outputs, the rest a vector at a time.
  // Marks are only gathered over the row (MarkRule::Rare); a row with any is done again by settle_row.
  template <WindowRows kRows, MarkRule kMarks>
  void rows(const Q* x, Q* y, int64_t begin, int64_t end, bool first, bool last, Ints& edge_marks) {
    constexpr int64_t rows_valid = row_count(kRows);
    const float* scale = (rows_valid == 3 ? scale_middle_ : scale_outer_).data();
    const Floats zero_point = Floats{} + static_cast<float>(requantiser_.y_zero);
    if (begin < end) column_sums<kRows>(x + begin * w_, row_sums(begin));
    for (int64_t r = begin; r < end; ++r) {
      // the next row's sums first: loaded right after their stores, they waited for them (store forwarding
      // fails for loads across two stores)
      if (r + 1 < end) column_sums<kRows>(x + (r + 1) * w_, row_sums(r + 1));
      const int16_t* sums = row_sums(r);
      std::memcpy(edge_dwords(0) + r + 1, x + r * w_, sizeof(int32_t));  // for edge_columns
      std::memcpy(edge_dwords(1) + r + 1, x + r * w_ + w_ - 4, sizeof(int32_t));
      Ints row_marks{};
      Q* yr = y + r * w_;
      int64_t j = 0;
      for (; j + kStep <= w_; j += kStep) {
        Ints rounded[4];
        for (int v = 0; v < 4; ++v) {
          Ints marked;
          rounded[v] = requantised(sums, j + v * kLength, scale, zero_point, marked);
          if constexpr (kMarks == MarkRule::Rare) row_marks |= marked;
        }
        Lanes::narrow(rounded[0], rounded[1], rounded[2], rounded[3], yr + j);
      }
      for (; j < w_; j += kLength) {  // the rest a vector at a time, the last moved back to end at w
        j = min_of(j, w_ - kLength);
        Ints marked;
        narrow_one(requantised(sums, j, scale, zero_point, marked), yr + j);
        if constexpr (kMarks == MarkRule::Rare) row_marks |= marked;
      }
      if (kMarks == MarkRule::Rare && __builtin_expect(any(row_marks), 0)) {
        settle_row<kRows>(x, y, r, first, last, scale, zero_point, edge_marks);
      }
    }
  }

  // out[1 + c], c in [0, w): the sum of column c over the window rows of the row at xr, less x_zero_point per
  // row (so that a window's three of them add up to its difference from its zero sum). In int16 (at most
  // 3 x 255), 16 columns at a time, the last 16 moved back to end at w.
  template <WindowRows kRows>
  void column_sums(const Q* xr, int16_t* out_padded) {
    constexpr int rows_valid = row_count(kRows);
    constexpr int64_t kShorts = 2 * kLength;
    const Shorts zero_sum = Shorts{} + static_cast<int16_t>(q_.x_zero_point * rows_valid);
    int16_t* out = out_padded + 1;
    const int64_t w = w_;
    for (int64_t c = 0;; c += kShorts) {
      c = min_of<int64_t>(c, w - kShorts);
      Shorts s = Shared::widened_shorts(xr + c) - zero_sum;
      if constexpr (has_above(kRows)) s += Shared::widened_shorts(xr + c - w);
      if constexpr (has_below(kRows)) s += Shared::widened_shorts(xr + c + w);
      Shared::store(out + c, s);
      if (c + kShorts >= w) break;
    }
  }

  // Output row r's column sums (see column_sums): two rows' buffers, used in turn.
  int16_t* row_sums(int64_t r) { return column_sums_.data() + (r & 1) * (w_ + 2); }

  // The float pass of the kLength outputs from column c of a row with column sums `sums` (Lanes::requantised of
  // the window's difference from its zero sum, with the window's scale from the row's scales): the same
  // rounded values and marks.
  static Ints requantised(const int16_t* sums, int64_t c, const float* scale, Floats zero_point, Ints& marked) {
    auto sums_at = [&](int64_t at) { return Shared::ints_of_shorts(sums + at); };
    const Ints difference = sums_at(c) + sums_at(c + 1) + sums_at(c + 2);
    return Shared::requantised(difference, floats_at(scale + c), zero_point, marked);
  }

  // With distinct scales the float pass marks only windows whose value can lie within kMarkBand of a tie; for
  // most scale pairs none of the middle rows' windows (9 elements, 6 at the row's ends) can, and those rows then round
  // without gathering marks. Decided by can_mark, remembered per thread for the last parameters: ORT's thread pool
  // calls run() per chunk of a few planes. A call of fewer than kMarkCheckWork elements does not decide (the decision
  // would cost more than it can save) and gathers the marks.
  bool middle_rows_mark(int64_t work) const {
    struct Decision {
      bool known;
      float x_scale, y_scale;
      int32_t x_zero_point, y_zero_point;
      bool count_include_pad, marks;
    };
    thread_local Decision last{};
    if (last.known && last.x_scale == q_.x_scale && last.y_scale == q_.y_scale &&
        last.x_zero_point == q_.x_zero_point && last.y_zero_point == q_.y_zero_point &&
        last.count_include_pad == q_.count_include_pad) {
      return last.marks;
    }
    if (work < kMarkCheckWork) return true;
    auto can_mark = [&](int64_t valid) {
      return Shared::can_mark(valid, static_cast<float>(requantiser_.window_scale(valid)), q_.x_zero_point,
                              requantiser_.y_zero);
    };
    const bool marks = can_mark(9) || can_mark(6);
    last = {true, q_.x_scale, q_.y_scale, q_.x_zero_point, q_.y_zero_point, q_.count_include_pad, marks};
    return marks;
  }
  static constexpr int64_t kMarkCheckWork = 4096;

  // Row r again, with marks: the marks of columns 0 and w - 1 added to edge_marks (edge_columns settles them),
  // the other marked values settled a vector at a time (settled). The vectors' input bytes around them come from
  // the plane, or at the call's first or last plane, where they reach outside it, from a zero-padded copy.
  template <WindowRows kRows>
  __attribute__((noinline)) void settle_row(const Q* x, Q* y, int64_t r, bool first, bool last, const float* scale,
                                            Floats zero_point, Ints& edge_marks) {
    constexpr int64_t rows_valid = row_count(kRows);
    Ints iota;
    for (int k = 0; k < kLength; ++k) iota[k] = k;
    const WindowConstants k{Ints{} + static_cast<int32_t>(q_.x_zero_point * rows_valid * 3),
                            Ints{} + static_cast<int32_t>(q_.x_zero_point * rows_valid * 2),
                            Floats{} + static_cast<float>(requantiser_.window_scale(rows_valid * 3)),
                            Floats{} + static_cast<float>(requantiser_.window_scale(rows_valid * 2)), iota};
    for (int64_t j = 0; j < w_; j += kLength) {
      j = min_of(j, w_ - kLength);
      const int64_t i = r * w_ + j;
      const int64_t lo = i - 1 - (has_above(kRows) ? w_ : 0),
                    hi = i + kLength + 1 + (has_below(kRows) ? w_ : 0);  // bytes read: [lo, hi)
      const Q* at = x + i;
      if ((first && lo < 0) || (last && hi > size_)) {
        Q* copy = edge_copy_.data();
        const int64_t from = max_of<int64_t>(lo, 0), to = min_of(hi, size_);
        std::memset(copy, 0, static_cast<size_t>(hi - lo));
        std::memcpy(copy + (from - lo), x + from, static_cast<size_t>(to - from));
        at = copy + (i - lo);
      }
      Ints marks;
      Ints rounded = requantised(row_sums(r), j, scale, zero_point, marks);
      const Ints col = iota + static_cast<int32_t>(j);
      const Ints edge = (col == 0) | (col == static_cast<int32_t>(w_ - 1));
      edge_marks |= marks & edge;
      marks &= ~edge;
      if (any(marks)) rounded = settled<kRows>(at, j, k, marks, rounded);
      narrow_one(rounded, y + i);
    }
  }

  // The first (side 0) or last (side 1) four bytes of each row of the plane, row r at r + 1, 0 before the first
  // row and after the last (edge_columns loads a vector from any row -1 .. h - 1).
  int32_t* edge_dwords(int side) { return edge_dwords_.data() + side * (h_ + 2 + kLength); }

  // What window_at needs of the rows it is called for (which of them the windows have: rows_valid)
  struct WindowConstants {
    Ints zero_full, zero_edge;      // x_zero_point x the elements of a window away from / at a row's end
    Floats scale_full, scale_edge;  // Requantiser::window_scale of the same
    Ints iota;                      // 0, 1, ... kLength - 1
  };
  // kLength windows from the one centred on p, at column col (before the wrap to the next row)
  struct Window {
    Ints left_in, right_in;  // whether the window's left / right column lies in the plane
    Ints edge;               // at a row's end (not left_in or not right_in)
    Ints sum, zero_sum;      // the window's sum, and x_zero_point x its element count
  };
  template <WindowRows kRows>
  static Window window_at(const Q* p, int64_t col, const WindowConstants& k, int64_t w) {
    auto column = [&](const Q* q) {  // the column of up to three rows at q
      Ints s = widened(q);
      if constexpr (has_above(kRows)) s += widened(q - w);
      if constexpr (has_below(kRows)) s += widened(q + w);
      return s;
    };
    Ints c = k.iota + static_cast<int32_t>(col);
    c = c >= static_cast<int32_t>(w) ? c - static_cast<int32_t>(w) : c;
    Window window;
    window.left_in = c != 0;
    window.right_in = c != static_cast<int32_t>(w - 1);
    window.sum = column(p) + (column(p - 1) & window.left_in) + (column(p + 1) & window.right_in);
    window.edge = ~(window.left_in & window.right_in);
    window.zero_sum = (window.edge & k.zero_edge) | (~window.edge & k.zero_full);
    return window;
  }
  template <WindowRows kRows>
  Window window_at(const Q* p, int64_t col, const WindowConstants& k) const {
    return window_at<kRows>(p, col, k, w_);
  }

  // The final outputs of a vector of marked values (marks), whose first window is centred on p: the exact value
  // in double where it decides (as Requantiser::exact and near_tie), ORT's float value where it lies on a tie (as
  // ort_float_value_2d: each in-bounds element dequantised in float, added in row-major window order, the sum
  // divided by the count, then by y_scale, plus y_zero_point; clamped and rounded as rounded_output), the float
  // pass's value where unmarked. Every lane computed, the marked lanes selected: at the cost of about one window
  // per vector, instead of a scalar evaluation per tie. Distinct scales only (the rows with equal scales have no
  // marks, or are border rows), where marked values are rare and most are not ties.
  template <WindowRows kRows>
  __attribute__((noinline)) Ints settled(const Q* p, int64_t col, const WindowConstants& k, Ints marks,
                                         Ints rounded) const {
    const Window window = window_at<kRows>(p, col, k);
    const Ints &left_in = window.left_in, &right_in = window.right_in, &edge = window.edge;
    const Ints &sum = window.sum, &zero_sum = window.zero_sum;
    constexpr int64_t rows_valid = row_count(kRows);
    Ints exact, tie;
    exact_and_ties(sum - zero_sum, edge, requantiser_.window_scale(rows_valid * 2),
                   requantiser_.window_scale(rows_valid * 3), exact, tie);
    // ORT's float value
    const Floats x_scale = Floats{} + q_.x_scale;
    Floats acc = {};
    auto add = [&](const Q* e, const Ints& inside) {
      const Floats term = x_scale * __builtin_convertvector(widened(e) - q_.x_zero_point, Floats);
      acc = Floats((inside & Ints(acc + term)) | (~inside & Ints(acc)));
    };
    const Ints all = Ints{} - 1;
    auto add_row = [&](const Q* row) {
      add(row - 1, left_in);
      add(row, all);
      add(row + 1, right_in);
    };
    if constexpr (has_above(kRows)) add_row(p - w_);
    add_row(p);
    if constexpr (has_below(kRows)) add_row(p + w_);
    const Floats count_full = Floats{} + static_cast<float>(q_.count_include_pad ? 9 : rows_valid * 3);
    const Floats count_edge = Floats{} + static_cast<float>(q_.count_include_pad ? 9 : rows_valid * 2);
    const Floats count = Floats((edge & Ints(count_edge)) | (~edge & Ints(count_full)));
    const Ints ort = ort_rounded(acc, count, Floats{} + q_.y_scale, static_cast<float>(q_.y_zero_point));
    return Lanes::resolved(marks, tie, ort, exact, rounded);
  }

  // Outputs of column c (0 or w - 1) of every row, kLength rows at a time (the last group moved back to end at row
  // h; lanes past h left out where the plane has fewer rows): the float pass's value as the row pass rounds it, and
  // where it marks one, as settled() would: the exact value in double, ORT's float value on a tie (the window's
  // elements in row-major order: per row, its left column then its right). Every lane computed, the results
  // selected. kTies (ties_at_edges_): every mark is a tie and a sixth of the lanes are, so each group is settled
  // without a branch; else only the groups with a mark, rare. kOrtOnly (ort_decides_edges_): ORT's value in every
  // lane, no float pass.
  template <MarkRule kEdges>
  void edge_columns(Q* y, int64_t c) {
    constexpr bool kTies = kEdges != MarkRule::Rare, kOrtOnly = kEdges == MarkRule::OrtOnly;
    Ints iota;
    for (int k = 0; k < kLength; ++k) iota[k] = k;
    const int64_t w = w_, h = h_;  // locals: the byte stores below may alias any member
    // Per row of the plane, at r + 1 (0 before the first row and after the last, so that a window adds 0 for
    // them): the two elements of the row's window columns less x_zero_point, summed (edge_pairs_), and
    // dequantised as ort_dequantised (edge_terms_: the left element's, then at `stride` the right's). From the
    // dword rows() copied of each row (at its start, or ending at its end: w >= kStep keeps both in the row), the
    // bytes taken out and extended, kLength rows at a time.
    const int first_shift = c == 0 ? 0 : 16;
    const int32_t* row_dwords = edge_dwords(c == 0 ? 0 : 1);
    const int64_t stride = h + 2 + kLength;
    int32_t* pairs = edge_pairs_.data();
    float* left_terms = edge_terms_.data();
    float* right_terms = left_terms + stride;
    const Floats x_scale = Floats{} + q_.x_scale;
    const int32_t x_zero_point = q_.x_zero_point;
    for (int64_t i = 0; i < h + 2; i += kLength) {
      const Ints at = iota + static_cast<int32_t>(i);
      const Ints in_plane = (at >= 1) & (at <= static_cast<int32_t>(h));
      const Ints dwords = ints_at(row_dwords + i);
      Ints left, right;
      if constexpr (std::is_signed_v<Q>) {
        left = (dwords << (24 - first_shift)) >> 24;
        right = (dwords << (16 - first_shift)) >> 24;
      } else {
        left = (dwords >> first_shift) & 255;
        right = (dwords >> (first_shift + 8)) & 255;
      }
      left -= x_zero_point;
      right -= x_zero_point;
      if constexpr (!kOrtOnly) {
        const Ints pair = (left + right) & in_plane;
        std::memcpy(pairs + i, &pair, sizeof pair);
      }
      const Ints left_term = Ints(x_scale * __builtin_convertvector(left, Floats)) & in_plane;
      const Ints right_term = Ints(x_scale * __builtin_convertvector(right, Floats)) & in_plane;
      std::memcpy(left_terms + i, &left_term, sizeof left_term);
      std::memcpy(right_terms + i, &right_term, sizeof right_term);
    }
    const Floats zero_point = Floats{} + static_cast<float>(requantiser_.y_zero);
    // windows of 3 rows (6 elements) and of 2 (the first and last row: 4)
    const Floats scale_full = Floats{} + static_cast<float>(requantiser_.window_scale(6));
    const Floats scale_short = Floats{} + static_cast<float>(requantiser_.window_scale(4));
    const double dscale_full = requantiser_.window_scale(6), dscale_short = requantiser_.window_scale(4);
    const Floats count_full = Floats{} + static_cast<float>(q_.count_include_pad ? 9 : 6);
    const Floats count_short = Floats{} + static_cast<float>(q_.count_include_pad ? 9 : 4);
    const Floats y_scale = Floats{} + q_.y_scale;
    const float y_zero_point = static_cast<float>(q_.y_zero_point);
    for (int64_t r0 = 0;; r0 += kLength) {
      r0 = min_of(r0, max_of<int64_t>(0, h - kLength));
      // lane k: output row r0 + k, its window rows at r0 + k .. r0 + k + 2 of the arrays above
      const Ints row = iota + static_cast<int32_t>(r0);
      const Ints full = (row >= 1) & (row <= static_cast<int32_t>(h - 2));
      Ints out{}, marked = Ints{} - 1, difference{};
      if constexpr (!kOrtOnly) {
        difference = ints_at(pairs + r0) + ints_at(pairs + r0 + 1) + ints_at(pairs + r0 + 2);
        // the float pass (as step)
        const Floats scale = Floats((full & Ints(scale_full)) | (~full & Ints(scale_short)));
        out = Lanes::requantised(difference, scale, zero_point, marked);
      }
      if (kTies || any(marked & (row < static_cast<int32_t>(h)))) {
        Ints exact = out, tie = Ints{} - 1;  // with equal scales every marked value is a tie (marks_are_ties_)
        // (with kOrtOnly every lane is "marked" and a "tie": the selects keep ORT's value)
        if constexpr (!kTies) exact_and_ties(difference, full, dscale_full, dscale_short, exact, tie);
        // ORT's float value (as settled), the rows outside the plane adding 0
        Floats acc = {};
        for (int d = 0; d < 3; ++d) acc = acc + floats_at(left_terms + r0 + d) + floats_at(right_terms + r0 + d);
        const Floats count = Floats((full & Ints(count_full)) | (~full & Ints(count_short)));
        const Ints ort = ort_rounded(acc, count, y_scale, y_zero_point);
        out = Lanes::resolved(marked, tie, ort, exact, out);
      }
      Q* yc = y + r0 * w + c;
      if (r0 + kLength <= h) {
        for (int k = 0; k < kLength; ++k) yc[k * w] = static_cast<Q>(out[k]);
      } else {
        for (int k = 0; k < h - r0; ++k) yc[k * w] = static_cast<Q>(out[k]);
      }
      if (r0 + kLength >= h) break;
    }
  }

  // Shared::exact_and_ties with scale_if_set in the lanes where `which` is set, scale_if_clear elsewhere.
  void exact_and_ties(const Ints& difference, const Ints& which, double scale_if_set, double scale_if_clear,
                      Ints& exact, Ints& tie) const {
    auto scale_of = [&](int h) {
      const Longs set = __builtin_convertvector(half(which, h), Longs);
      return Doubles((set & Longs(Doubles{} + scale_if_set)) | (~set & Longs(Doubles{} + scale_if_clear)));
    };
    Shared::exact_and_ties(difference, scale_of, requantiser_.y_zero, exact, tie);
  }

  const QLinearParams q_;
  const Requantiser<Q, int16_t> requantiser_;
  // x_scale == y_scale: the exact value is y_zero_point + (sum - zero_sum) / count, a multiple of 1 / count (at
  // most 9), so the float pass marks exactly the values on a tie (x.5) and those need no exact value in double
  const bool marks_are_ties_;
  const bool ties_at_edges_;  // and windows of 4 and 6 elements: a sixth of the edge windows on a tie
  // and scales where ORT's float value of a window of 4 or 6 elements lies within 3e-4 of the exact value (its
  // products and sums off by at most 11 roundings of values up to 6 x 255 x x_scale, then divided by count x
  // y_scale = count x x_scale, no value subnormal or infinite): a value not on a tie is at least 1 / 6 from one,
  // so there ORT's value rounds as the exact one and ORT's float pass alone decides every edge output
  const bool ort_decides_edges_;
  // whether the rows between the first and last, and those two, gather marks (see middle_rows_mark)
  bool marks_middle_ = !marks_are_ties_;
  const bool marks_outer_ = !marks_are_ties_;
  const int64_t h_, w_, size_;
  ZeroedArray<Q> edge_copy_;          // settle_row's bytes at the call's first or last plane, 0 outside the planes
  ZeroedArray<int16_t> column_sums_;  // two rows' (see row_sums), with a 0 for each pad column
  ZeroedArray<float> scale_outer_;    // per column, the float window scale in the first and last row
  ZeroedArray<float> scale_middle_;   // and in the rows between
  ZeroedArray<int32_t> edge_dwords_;  // see edge_dwords
  ZeroedArray<int32_t> edge_pairs_;   // see edge_columns
  ZeroedArray<float> edge_terms_;     // and its two columns' dequantised elements
  ZeroedArray<float> row_terms_;      // border_row's two window rows dequantised, each with a 0 on each side
  ZeroedArray<float> count_outer_;    // per column, the element count of the first and last row's windows
};
