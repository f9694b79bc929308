// QLinearAveragePool with 3x3 windows, stride 1, pads 1 (Inception's and TFLite's average pool), NCHW planes and
// NHWC images alike: an output row is a run of n = W x d values whose horizontal neighbours lie d apart (d = 1 in a
// plane, C in an image), so one row kernel serves both. Per row: the three input rows summed vertically (int16,
// less x_zero_point per element so that pads add 0), then each window adds the column sums at i - d, i and i + d,
// requantised by the float pass (RequantiseLanes::requantised) and its marks settled by the rule of requantise.h.
// The AVX-512 build takes a step's 32 values as one vector of int16 (column sums, window sums, ShortRules) and two of
// 16 floats.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/common/per_isa.h"
#include "kernels/common/scratch.h"
#include "kernels/common/simd.h"
#include "kernels/common/window_geometry.h"
#include "kernels/common/windows.h"
#include "kernels/kernels.h"
#include "kernels/qlinear/requantise.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// The lane count outside the template (GCC 12 drops a vector_size depending on a template parameter): 8 with AVX2
// and AVX-512, 4 with SSE2 and NEON (every path takes the row kernel: at 4 lanes it still beats the general one).
constexpr int kRowLanes = RequantiseLanes<uint8_t>::kLength;

// Which neighbour rows the windows of an output row have (above, below, both or neither: a one-row input).
enum class WindowRows { Both, BelowOnly, AboveOnly, Neither };
constexpr bool has_above(WindowRows w) { return w == WindowRows::Both || w == WindowRows::AboveOnly; }
constexpr bool has_below(WindowRows w) { return w == WindowRows::Both || w == WindowRows::BelowOnly; }
constexpr int row_count(WindowRows w) { return 1 + has_above(w) + has_below(w); }

// How the float pass's marks of a kind of window are handled: never marked (None), now and then (Rare: a vector
// with marks is settled), or, with equal scales and an even count, a sixth of them on ties, where ORT's value
// decides every value (OrtOnly: within 3e-4 of the exact value, which, not on a tie, is at least 1/18 from one).
// Whole (the middle only): None, and every value the window can hold given exactly by a ShortRule, in int16.
enum class Ties { None, Rare, OrtOnly, Whole };

// A difference no window holds (9 x 255 at most): an empty slot of a list of differences.
constexpr int16_t kNoDifference = std::numeric_limits<int16_t>::min();

// The requantisation of the windows of one element count in int16 lanes, without floats: y = (((difference +
// offset) as uint16 x multiplier) >> (16 + shift)) + add, wrapping in int16, saturated to Q's range. Found by
// find_short_rule, which tries it on every difference such windows can hold.
struct ShortRule {
  bool found = false;
  int16_t offset = 0, add = 0;
  uint16_t multiplier = 0;
  int shift = 0;
  uint16_t product(int32_t difference) const {
    const uint32_t t = static_cast<uint16_t>(difference + offset);
    return static_cast<uint16_t>(((t * multiplier) >> 16) >> shift);
  }
  template <class Q>
  int32_t apply(int32_t difference) const {
    const int32_t r = static_cast<int16_t>(static_cast<uint16_t>(product(difference) + static_cast<uint16_t>(add)));
    return max_of<int32_t>(std::numeric_limits<Q>::min(), min_of<int32_t>(r, std::numeric_limits<Q>::max()));
  }
};

// A ShortRule giving, for every difference of a window of `valid` elements, the rounding rule's value (the exact
// value rounded; none near a tie, else no rule), or one not found. The multipliers near scale x 2^(16 + shift), the
// largest shift that fits them, and up to 256 offsets (the phases of scales in up to 256ths) are tried, each
// rejected at its first wrong value (the differences visited spread out).
template <class Q>
ShortRule find_short_rule(const Requantiser<Q, int16_t>& r, int64_t valid) {
  const int32_t lo = static_cast<int32_t>(valid) * (std::numeric_limits<Q>::min() - r.x_zero_point);
  const int32_t hi = static_cast<int32_t>(valid) * (std::numeric_limits<Q>::max() - r.x_zero_point);
  const int32_t size = hi - lo + 1, spread = size % 997 == 0 ? 991 : 997;  // a step coprime to size
  const double scale = r.window_scale(valid);
  if (!(scale > 0 && scale < 1) || size > 4096) return {};
  std::vector<int32_t> target(static_cast<size_t>(size));
  for (int32_t d = lo; d <= hi; ++d) {
    const double exact = clamp_to<Q>(static_cast<double>(d) * scale + r.y_zero);
    if (near_tie(exact)) return {};
    target[static_cast<size_t>(d - lo)] = to_quantized<Q>(exact);
  }
  int shift = 0;
  while (shift < 15 && scale * std::ldexp(1.0, 17 + shift) < 65535) ++shift;
  {
    const double m0 = std::floor(scale * std::ldexp(1.0, 16 + shift));
    for (double m = m0 - 1; m <= m0 + 2; ++m) {
      if (m < 1 || m > 65535) continue;
      for (int32_t offset = -lo; offset < min_of<int32_t>(-lo + 256, 65536 - size - lo); ++offset) {
        ShortRule rule{true, static_cast<int16_t>(offset), 0, static_cast<uint16_t>(m), shift};
        const int32_t add = target[static_cast<size_t>(-lo)] - rule.product(0);  // difference 0: y_zero_point
        if (add < std::numeric_limits<int16_t>::min() || add > std::numeric_limits<int16_t>::max()) continue;
        rule.add = static_cast<int16_t>(add);
        int32_t k = 0, at = 0;
        for (; k < size && rule.apply<Q>(lo + at) == target[static_cast<size_t>(at)]; ++k) at = (at + spread) % size;
        if (k == size) return rule;
      }
    }
  }
  return {};
}

// find_short_rule through a per-thread memory of the last few (a pool is rebuilt whenever a call's parameters differ
// from the last call's on the thread: models with several such nodes alternate them).
template <class Q>
ShortRule remembered_short_rule(const Requantiser<Q, int16_t>& r, int64_t valid) {
  struct Entry {
    double scale, y_zero;
    int32_t x_zero_point;
    int64_t valid;
    ShortRule rule;
  };
  thread_local Entry memory[16] = {};  // valid == 0: empty
  thread_local int next = 0;
  const double scale = r.window_scale(valid);
  for (const Entry& e : memory) {
    if (e.valid == valid && e.scale == scale && e.y_zero == r.y_zero && e.x_zero_point == r.x_zero_point) return e.rule;
  }
  memory[next] = {scale, r.y_zero, r.x_zero_point, valid, find_short_rule(r, valid)};
  const ShortRule rule = memory[next].rule;
  next = (next + 1) % 16;
  return rule;
}

template <class Q>
class Rows3x3Pool {
  using Lanes = RequantiseLanes<Q>;
  static constexpr int kLength = kRowLanes;
  static constexpr int64_t kStep = 4 * kLength;  // values per step of the middle: the four vectors Lanes::narrow packs
  static constexpr int64_t kBlockValues = 1024;  // values of a block of short rows (see rows)
  using Ints = typename Lanes::Ints;
  using Floats = typename Lanes::Floats;
  using HalfInts = typename Lanes::HalfInts;
  using HalfDoubles = typename Lanes::HalfDoubles;
  using Shorts = typename Lanes::Shorts;

 public:
  // Whether this pool was made for these parameters and this shape (qlinear_pool keeps one per thread).
  bool made_for(const PoolGeometry& g, const QLinearParams& q, int64_t channels) const {
    return q.x_scale == q_.x_scale && q.y_scale == q_.y_scale && q.x_zero_point == q_.x_zero_point &&
           q.y_zero_point == q_.y_zero_point && q.count_include_pad == q_.count_include_pad && h_ == g.axes[0].in &&
           w_ == g.axes[1].in && d_ == channels;
  }
  // Whether this pool beats the general path for its parameters: always with 8 lanes, on NEON and on NCHW planes;
  // with SSE2's 4 lanes an image's rows only where their middle windows take a ShortRule (rows: Ties::Whole; the
  // float pass at 4 lanes is slower than the streamed passes') or where a quarter or more of them are marked
  // (settled a vector at a time, against one at a time).
  bool preferred() const {
#if defined(__ARM_NEON)
    return true;
#else
    return kRowLanes == 8 || d_ == 1 || (middle_[3] == Ties::None && short_rule_[3].found) || tie_heavy_;
#endif
  }
  static bool applies(const PoolGeometry& g, int64_t channels) {
    if (g.axes.size() != 2) return false;
    for (const AxisGeometry& a : g.axes) {
      if (a.kernel != 3 || a.stride != 1 || a.dilation != 1 || a.pad_begin != 1 || a.out != a.in) return false;
    }
    // a row of at least one vector of column sums; shorter NCHW planes go faster through the general path
    if (channels == 1) return g.axes[1].in >= kStep && g.axes[0].in >= 3;
    return g.axes[1].in * channels >= 2 * kLength;
  }

  Rows3x3Pool(const PoolGeometry& g, const QLinearParams& q, int64_t channels)
      : q_(q),
        requantiser_(q, g.kernel_size),
        plane_(rows_and_columns(g)),
        h_(g.axes[0].in),
        w_(g.axes[1].in),
        d_(channels),
        n_(w_ * channels),
        block_rows_(min_of<int64_t>(h_, kBlockValues / (n_ + d_))),
        stride_(n_ + 2 * d_),
        plane_edges_(d_ == 1),
        memory_(layout(nullptr), ScratchFill::Zeroed) {
    layout(memory_.as<char>());
    const bool equal = requantiser_.marks_are_ties;
    const bool ort_decides = equal && q.x_scale >= 0x1p-100f && q.x_scale <= 0x1p100f;
    for (int64_t k = 0; block_scales_ && k < block_rows_ * (n_ + d_); ++k) {
      const int64_t at = k % (n_ + d_), columns = 1 + (at >= d_) + (at < n_ - d_);
      block_scales_[k] = at < n_ ? static_cast<float>(requantiser_.window_scale(3 * columns)) : 0.0f;
    }
    std::fill_n(&mark_list_[0][0], 4 * kMarkList, kNoDifference);
    Ties kind[4][4] = {};  // [rows][columns] of a window
    for (int rows = 1; rows <= 3; ++rows) {
      for (int cols = 1; cols <= 3; ++cols) {
        scale_[rows][cols] = static_cast<float>(requantiser_.window_scale(rows * cols));
        const bool odd = q.count_include_pad || rows * cols % 2 == 1;  // count 9, or the window's elements
        const Ties even = ort_decides ? Ties::OrtOnly : Ties::Rare;
        // None without marks, and values within int32 (rounded unclamped where saturating packs clamp)
        const bool marked = !equal && (marks(rows * cols) || !(std::fabs(scale_[rows][cols]) < 0x1p19f));
        kind[rows][cols] = equal ? (odd ? Ties::None : even) : marked ? Ties::Rare : Ties::None;
      }
      middle_[rows] = kind[rows][3];
      // a few differences marked (and values within int32): the middle's steps look for them instead of taking the
      // float pass's marks (listed_marks)
      if (middle_[rows] == Ties::Rare && std::fabs(scale_[rows][3]) < 0x1p19f) {
        const int marked = marked_differences(3 * rows, mark_list_[rows], kMarkList);
        marks_listed_[rows] = marked <= kMarkList;
        if (rows == 3 && kRowLanes == 4 && d_ > 1 && !marks_listed_[3])  // (preferred's question)
          tie_heavy_ = 4 * marked >= in_range_differences(9);
      }
      edge_kind_ = max_of(edge_kind_, kind[rows][2]);
      if (middle_[rows] == Ties::None) short_rule_[rows] = remembered_short_rule(requantiser_, 3 * rows);
      // an edge vector's lanes have 1 column in an input of one column, else 2, and 3 from the third
      Ties edge = w_ == 1 ? kind[rows][1] : max_of(kind[rows][2], w_ > 2 ? kind[rows][3] : Ties::None);
      // a few lanes of a vector: down the rows (edge_columns, plane_edge_columns: every window of two columns)
      const bool down = plane_edges_ || (edge == Ties::OrtOnly && d_ < kLength);
      edge_columns_ |= down;
      edge_[rows] = max_of(down ? Ties::None : edge, middle_[rows]);       // Ties are ordered: a mix takes the last
      const float counts[4] = {0, 1.0f * rows, 2.0f * rows, 3.0f * rows};  // elements of a window, by columns
      for (int side = 0; side < 2; ++side) {
        for (int64_t k = 0; k < d_ + kLength; ++k) {
          const int64_t at = side == 0 ? k : n_ - d_ - kLength + k;
          if (at < 0 || at >= n_) continue;
          const int cols = 1 + (at >= d_) + (at < n_ - d_);
          edge_lanes(rows, side, 0)[k] = scale_[rows][cols];
          edge_lanes(rows, side, 1)[k] = q.count_include_pad ? 9.0f : counts[cols];
        }
      }
    }
    // plane_edge_columns' windows of 4 and 6 elements by ShortRules, where both counts have one
    if (plane_edges_ && edge_kind_ != Ties::OrtOnly) {
      edge_rule_[0] = remembered_short_rule(requantiser_, 4);
      edge_rule_[1] = remembered_short_rule(requantiser_, 6);
      edge_rules_found_ = edge_rule_[0].found && edge_rule_[1].found;
    }
  }

  void run(const Q* x, Q* y, int64_t units) {
    for (int64_t u = 0; u < units; ++u, x += h_ * n_, y += h_ * n_) {
      for (int slot = 0; slot < 3; ++slot) whole_row_[slot] = edges_row_[slot] = -1;
      if (h_ == 1) rows<WindowRows::Neither>(x, y, 0, 1);
      if (h_ > 1) rows<WindowRows::BelowOnly>(x, y, 0, 1);
      rows<WindowRows::Both>(x, y, 1, h_ - 1);  // (none when h < 3)
      if (h_ > 1) rows<WindowRows::AboveOnly>(x, y, h_ - 1, h_);
      if (plane_edges_) plane_edge_columns(x, y);
      else if (edge_columns_) edge_columns(x, y);
    }
  }

 private:
  // The windows of the first and last value of each row of a plane (d == 1: windows of 6 elements, 4 at the
  // corners, which the rows' vectors took as the middle's, reaching into the next row), redone kLength rows at a time
  // by the rule of the windows of two columns (edge_kind_): ORT's value, the exact value by ShortRules where both
  // counts have one, or the float pass with its marks settled. The last two values of row k - 2 and the first two of
  // row k - 1 lie together, 4 bytes read at once: seam k, each byte a lane's element (rows outside the plane:
  // x_zero_point, which adds 0 to both sums). Seams p .. p + 2 hold the windows of both the last value of row
  // p - 1 (bytes 0, 1: right) and the first of row p (bytes 2, 3: left), which lie together in y too: pair p, one
  // 2-byte store.
  __attribute__((noinline)) void plane_edge_columns(const Q* x, Q* y) {
    const int64_t h = h_, w = w_, seams = plane_seams();  // the seams outside [1, h] hold pads only (layout)
    int32_t* const words = seam_words_;  // (a local: the member would be loaded again after each store)
    std::memcpy(reinterpret_cast<Q*>(words + 1) + 2, x, 2);
    int64_t k = 2;
    for (; k + 4 <= h + 1; k += 4) {  // (four at a time: the loop's own instructions were a third of it)
      const Q* from = x + (k - 1) * w - 2;
      std::memcpy(words + k, from, 4);
      std::memcpy(words + k + 1, from + w, 4);
      std::memcpy(words + k + 2, from + 2 * w, 4);
      std::memcpy(words + k + 3, from + 3 * w, 4);
    }
    for (; k <= h; ++k) std::memcpy(words + k, x + (k - 1) * w - 2, 4);
    std::memcpy(words + h + 1, x + h * w - 2, 2);
    int32_t* const pairs = pair_out_;  // pair p: y[p w - 1] then y[p w], the bytes of a little-endian 16-bit value
    const int32_t last = static_cast<int32_t>(h - 1);
    auto window_rows = [&](int64_t p0, Ints& left, Ints& right) {  // of the lanes' left and right windows
      const Ints pair = Lanes::iota() + static_cast<int32_t>(p0);
      left = Ints{} + 3 + (pair == 0) + (pair == last);
      right = Ints{} + 3 + (pair == 1) + (pair == last + 1);
    };
    // the pair sums of a seam's bytes (0 + 1, 2 + 3) in its 16-bit halves, each byte as unsigned (int8 offset by
    // 128, its zero point too), summed over the seams p .. p + 2
    constexpr int32_t kBias = std::is_signed_v<Q> ? static_cast<int32_t>(0x80808080u) : 0;
    const int32_t zero_sum = 6 * (q_.x_zero_point + (std::is_signed_v<Q> ? 128 : 0));  // the six elements'
    auto halves_at = [&](int64_t p0) {
      Ints halves{};
      for (int t = 0; t < 3; ++t) {
        Ints word;
        std::memcpy(&word, words + p0 + t, sizeof word);
        word ^= kBias;
        halves += (word & 0x00ff00ff) + ((word >> 8) & 0x00ff00ff);
      }
      return halves;
    };
    if (edge_rules_found_) {  // each 16-bit half its window's value by the ShortRule of its element count
      const ShortRule four = edge_rule_[0], six = edge_rule_[1];  // (locals: see words)
      const Shorts lowest = Shorts{} + static_cast<int16_t>(std::numeric_limits<Q>::min());
      const Shorts highest = Shorts{} + static_cast<int16_t>(std::numeric_limits<Q>::max());
      for (int64_t p0 = 0; p0 <= h; p0 += kLength) {
        Ints rows_left, rows_right;
        window_rows(p0, rows_left, rows_right);
        const Shorts corner = Shorts(((rows_right == 2) & 0xffff) | ((rows_left == 2) & ~0xffff));
        const Shorts difference = Shorts(halves_at(p0)) - static_cast<int16_t>(zero_sum);
        Shorts value = (corner & whole(difference, four)) | (~corner & whole(difference, six));
        value = value < lowest ? lowest : value;
        value = value > highest ? highest : value;
        const Ints both = Ints(value);
        const Ints bytes = (both & 0xff) | ((both >> 8) & 0xff00);
        std::memcpy(pairs + p0, &bytes, sizeof bytes);
      }
    } else if (edge_kind_ == Ties::OrtOnly) {
      // each byte of each seam less x_zero_point, dequantised as ORT does (seam_floats_ [byte])
      const Floats x_scale = Floats{} + q_.x_scale;
      for (int64_t s = 0; s + kLength <= seams; s += kLength) {
        Ints word;
        std::memcpy(&word, words + s, sizeof word);
        for (int b = 0; b < 4; ++b) {
          const Ints lane =
              (std::is_signed_v<Q> ? (word << (24 - 8 * b)) >> 24 : (word >> (8 * b)) & 0xff) - q_.x_zero_point;
          const Floats f = x_scale * __builtin_convertvector(lane, Floats);
          std::memcpy(seam_floats_ + b * seams + s, &f, sizeof f);
        }
      }
      const Floats y_scale = Floats{} + q_.y_scale;
      const float y_zero_point = static_cast<float>(q_.y_zero_point);
      for (int64_t p0 = 0; p0 <= h; p0 += kLength) {
        Ints rows_left, rows_right;
        window_rows(p0, rows_left, rows_right);
        // ORT's sums: the window's elements in row-major order
        Floats acc_left{}, acc_right{};
        for (int t = 0; t < 3; ++t) {
          acc_left = acc_left + Lanes::floats_at(seam_floats_ + 2 * seams + p0 + t);
          acc_left = acc_left + Lanes::floats_at(seam_floats_ + 3 * seams + p0 + t);
          acc_right = acc_right + Lanes::floats_at(seam_floats_ + p0 + t);
          acc_right = acc_right + Lanes::floats_at(seam_floats_ + seams + p0 + t);
        }
        const Ints left = Lanes::ort_rounded(acc_left, count_of(1, rows_left * 2), y_scale, y_zero_point);
        const Ints right = Lanes::ort_rounded(acc_right, count_of(1, rows_right * 2), y_scale, y_zero_point);
        const Ints bytes = (right & 0xff) | ((left & 0xff) << 8);
        std::memcpy(pairs + p0, &bytes, sizeof bytes);
      }
    } else {
      const Floats zero_point = Floats{} + static_cast<float>(requantiser_.y_zero);
      auto scale_of = [&](Ints rows) {
        return Lanes::select(rows == 2, Floats{} + scale_[2][2], Floats{} + scale_[3][2]);
      };
      for (int64_t p0 = 0; p0 <= h; p0 += kLength) {
        Ints rows_left, rows_right;
        window_rows(p0, rows_left, rows_right);
        const Ints halves = halves_at(p0);
        const Ints difference_right = (halves & 0xffff) - zero_sum, difference_left = (halves >> 16) - zero_sum;
        Ints marked_left, marked_right;
        Ints left = Lanes::requantised(difference_left, scale_of(rows_left), zero_point, marked_left);
        Ints right = Lanes::requantised(difference_right, scale_of(rows_right), zero_point, marked_right);
        // (the float pass marks no window of a kind None)
        if (edge_kind_ != Ties::None && Lanes::any(marked_left | marked_right)) {
          for (int lane = 0; lane < kLength; ++lane) {
            const int64_t p = p0 + lane;
            if (marked_left[lane] && p < h) {
              left[lane] =
                  requantiser_.settled(difference_left[lane], rows_left[lane] * 2, [&] { return ort_window(x, p, 0); });
            }
            if (marked_right[lane] && p >= 1 && p <= h) {
              right[lane] = requantiser_.settled(difference_right[lane], rows_right[lane] * 2,
                                                 [&] { return ort_window(x, p - 1, w - 1); });
            }
          }
        }
        const Ints bytes = (right & 0xff) | ((left & 0xff) << 8);
        std::memcpy(pairs + p0, &bytes, sizeof bytes);
      }
    }
    // to the rows' ends, once every vector is in (a store from a vector waited for the vector)
    y[0] = static_cast<Q>(pairs[0] >> 8);
    auto store_pair = [&](int64_t p) {
      const uint16_t both = static_cast<uint16_t>(pairs[p]);
      std::memcpy(y + p * w - 1, &both, 2);
    };
    int64_t p = 1;
    for (; p + 4 <= h; p += 4) {
      store_pair(p);
      store_pair(p + 1);
      store_pair(p + 2);
      store_pair(p + 3);
    }
    for (; p < h; ++p) store_pair(p);
    y[h * w - 1] = static_cast<Q>(pairs[h]);
  }

  // The kStep values of the middle from i (column sums at sums, output at out) by the float pass, its marks settled:
  // in a block of a plane's rows from row r (in_block, settled_in_block), else in row r (settled).
  template <WindowRows kRows>
  __attribute__((noinline)) void settled_step(const Q* x, int64_t r, bool in_block, const int16_t* sums, int64_t i,
                                              Q* out) {
    constexpr int rows_valid = row_count(kRows);
    const Floats scale = Floats{} + scale_[rows_valid][3];
    const Floats zero_point = Floats{} + static_cast<float>(requantiser_.y_zero);
    const Shorts a = window_sums16(sums, i), b = window_sums16(sums, i + 2 * kLength);
    const Ints difference[4] = {Lanes::low_half(a), Lanes::high_half(a), Lanes::low_half(b), Lanes::high_half(b)};
    // (settled inline: with a tie-heavy scale ratio most vectors have marks, and their divisions overlap)
    const float* const* rows_f = in_block ? nullptr : dequantised_rows(x, r, kRows, true);
    Ints outs[4];
    for (int v = 0; v < 4; ++v) {
      Ints marked;
      outs[v] = Lanes::requantised(difference[v], scale, zero_point, marked);
      if (!Lanes::any(marked)) continue;
      const int64_t at = i + v * kLength;
      outs[v] = in_block ? settled_in_block(x, r, at, difference[v], marked, outs[v])
                         : settled(rows_f, at, rows_valid, difference[v], marked, outs[v]);
    }
    Lanes::narrow(outs[0], outs[1], outs[2], outs[3], out);
  }

  // Requantiser::settled on the marked lanes of the middle's windows of values [i, i + kLength) of a block of a
  // plane's rows from row r (the rows lie together), each lane's row and column from its index. The first and last
  // value of a row are left: plane_edge_columns redoes them.
  __attribute__((noinline)) Ints settled_in_block(const Q* x, int64_t r, int64_t i, Ints difference, Ints marks,
                                                  Ints rounded) const {
    Ints out = rounded;
    for (int k = 0; k < kLength; ++k) {
      const int64_t at = i + k, row = r + at / w_, col = at % w_;
      if (!marks[k] || col == 0 || col == w_ - 1) continue;
      out[k] = requantiser_.settled(difference[k], 9, [&] { return ort_window(x, row, col); });
    }
    return out;
  }

  // ORT's output of the window of output value (r, col) of a plane (d_ == 1).
  int32_t ort_window(const Q* x, int64_t r, int64_t col) const { return ort_output_2d(x, plane_, 1, 0, r, col, q_, 9); }

  // ORT's output (OrtOnly) of the windows of the first and last d values of each row where d < kLength (a few
  // lanes of their vectors), kLength rows at a time. Such a window has two columns (W >= 3), dequantised first.
  __attribute__((noinline)) void edge_columns(const Q* x, Q* y) {
    const int64_t h = h_, n = n_, stride = h + 2 + kLength;
    float* left = columns_;
    float* right = left + stride;
    const Floats y_scale = Floats{} + q_.y_scale;
    const float y_zero_point = static_cast<float>(q_.y_zero_point);
    for (int64_t p = 0; p < 2 * d_; ++p) {
      const int64_t at = p < d_ ? p : n - 2 * d_ + p;  // the value, and its window's left column
      const int64_t first = p < d_ ? at : at - d_;
      for (int64_t r = 0; r < h; ++r) {
        left[r + 1] = ort_dequantised(x[r * n + first], q_);
        right[r + 1] = ort_dequantised(x[r * n + first + d_], q_);
      }
      for (int64_t first_row = 0; first_row < h; first_row += kLength) {
        const int64_t r0 = min_of(first_row, max_of<int64_t>(0, h - kLength));
        Floats acc{};
        for (int t = 0; t < 3; ++t) {
          acc = acc + Lanes::floats_at(left + r0 + t);
          acc = acc + Lanes::floats_at(right + r0 + t);
        }
        const Ints row = Lanes::iota() + static_cast<int32_t>(r0);
        const Ints rows_valid = Ints{} + 3 + (row == 0) + (row == static_cast<int32_t>(h - 1));
        const Ints out = Lanes::ort_rounded(acc, count_of(1, rows_valid * 2), y_scale, y_zero_point);
        for (int k = 0; k < min_of<int64_t>(kLength, h - r0); ++k) y[(r0 + k) * n + at] = static_cast<Q>(out[k]);
      }
    }
  }

  template <WindowRows kRows>
  void rows(const Q* x, Q* y, int64_t begin, int64_t end) {
    const Ties middle = middle_[row_count(kRows)], edge = edge_[row_count(kRows)];
    if (middle != Ties::None)
      return middle == Ties::Rare ? rows<kRows, Ties::Rare, Ties::Rare>(x, y, begin, end)
                                  : rows<kRows, Ties::OrtOnly, Ties::OrtOnly>(x, y, begin, end);
    // (blocks of rows with block_scales_ take them, for the rows' ends)
    const bool whole = short_rule_[row_count(kRows)].found && !(kRows == WindowRows::Both && block_scales_);
    if (edge == Ties::OrtOnly)
      return whole ? rows<kRows, Ties::Whole, Ties::OrtOnly>(x, y, begin, end)
                   : rows<kRows, Ties::None, Ties::OrtOnly>(x, y, begin, end);
    if (edge == Ties::Rare)  // (no blocks: the rows' ends take their own scales)
      return short_rule_[row_count(kRows)].found ? rows<kRows, Ties::Whole, Ties::Rare>(x, y, begin, end)
                                                 : rows<kRows, Ties::None, Ties::Rare>(x, y, begin, end);
    return whole ? rows<kRows, Ties::Whole, Ties::None>(x, y, begin, end)
                 : rows<kRows, Ties::None, Ties::None>(x, y, begin, end);
  }

  // Output rows [begin, end), which share which neighbour rows they have; kMiddle: the marks of the windows of
  // three columns, kEdge: of the vectors reaching the first or last d values (windows of fewer columns), whose
  // lanes take their scale and ORT's divisor from edge_lanes.
  template <WindowRows kRows, Ties kMiddle, Ties kEdge>
  __attribute__((noinline)) void rows(const Q* x, Q* y, int64_t begin, int64_t end) {
    constexpr int rows_valid = row_count(kRows);
    const Floats zero_point = Floats{} + static_cast<float>(requantiser_.y_zero);
    const Floats scale = Floats{} + scale_[rows_valid][3];
    const Floats count = count_of(rows_valid, Ints{} + 3);
    const int64_t n = n_, d = d_, middle_end = n_ - d_, right = n_ - d_ - kLength;
    const float* edge_scale[2] = {edge_lanes(rows_valid, 0, 0), edge_lanes(rows_valid, 1, 0)};
    const float* edge_count[2] = {edge_lanes(rows_valid, 0, 1), edge_lanes(rows_valid, 1, 1)};
    const ShortRule rule = short_rule_[rows_valid];
    const bool marks_listed = marks_listed_[rows_valid];
    const int16_t* const mark_list = mark_list_[rows_valid];
    const int16_t* sums = nullptr;         // the row's (or block's) column sums, d zeros on each side
    const float* const* rows_f = nullptr;  // where every vector of the middle or of the edges needs them
    Q* yr = nullptr;
    int64_t r = begin;
    bool in_block = false;  // the steps run in a block of a plane's rows (settled_step)
    // the kLength values from i: the float pass, or ORT's value alone
    auto one = [&](int64_t i, Ties ties, Floats scale_i, Floats count_i) __attribute__((always_inline)) {
      Ints out;
      if (ties == Ties::OrtOnly) {
        out = ort_values<kRows>(rows_f, i, count_i);
      } else {
        const Ints difference = window_sums8(sums, i);
        Ints marked;
        out = Lanes::requantised(difference, scale_i, zero_point, marked);
        if (ties == Ties::Rare && __builtin_expect(Lanes::any(marked), 0))
          out = settled_in_row<kRows>(x, r, i, difference, marked, out);
      }
      Lanes::narrow_one(out, yr + i);
    };
    auto edge = [&](int64_t i) __attribute__((always_inline)) {
      i = min_of(i, n - kLength);
      const int side = i < d ? 0 : 1;
      const int64_t k = side == 0 ? i : i - right;
      one(i, kEdge, Lanes::floats_at(edge_scale[side] + k), Lanes::floats_at(edge_count[side] + k));
    };
    // the kStep values of the middle from i, to base + i; with per_value, each value's scale from block_scales_
    auto step = [&](int64_t i, Q* base, auto per_value) __attribute__((always_inline)) {
      Q* out = base + i;
      Ints outs[4];
      if constexpr (kMiddle == Ties::Whole) {
#if defined(__AVX512BW__)
        return Lanes::narrow_shorts(whole(window_sums32(sums, i), rule), out);
#else
        return Lanes::narrow_shorts(whole(window_sums16(sums, i), rule),
                                    whole(window_sums16(sums, i + 2 * kLength), rule), out);
#endif
      } else if constexpr (kMiddle == Ties::OrtOnly) {
        for (int v = 0; v < 4; ++v) outs[v] = ort_values<kRows>(rows_f, i + v * kLength, count);
      } else {
#if defined(__AVX512BW__)
        {  // 16 lanes: without marks (None) the step's values, the saturating narrowing clamping; with marks (Rare)
           // a step with any is taken again below and settled
          using WideFloats = typename Lanes::WideFloats;
          using WideInts = typename Lanes::WideInts;
          const typename Lanes::WideShorts sums32 = window_sums32(sums, i);
          const WideInts low = Lanes::low_wide_ints(sums32), high = Lanes::high_wide_ints(sums32);
          const WideFloats scale_a = per_value ? Lanes::wide_floats_at(block_scales_ + i) : WideFloats{} + scale[0];
          const WideFloats scale_b = per_value ? Lanes::wide_floats_at(block_scales_ + i + 2 * kLength) : scale_a;
          const WideFloats zero = WideFloats{} + zero_point[0];
          if constexpr (kMiddle == Ties::None) {
            const WideInts out_a =
                Lanes::template rounded<WideInts>(__builtin_convertvector(low, WideFloats) * scale_a + zero);
            const WideInts out_b =
                Lanes::template rounded<WideInts>(__builtin_convertvector(high, WideFloats) * scale_b + zero);
            return Lanes::narrow_wide_saturated(out_a, out_b, out);
          } else {
            WideInts marked_a, marked_b;
            const WideInts out_a = Lanes::requantised(low, scale_a, zero, marked_a);
            const WideInts out_b = Lanes::requantised(high, scale_b, zero, marked_b);
            if (!Lanes::any(marked_a | marked_b)) return Lanes::narrow_wide(out_a, out_b, out);
          }
        }
#endif
        const Shorts a = window_sums16(sums, i), b = window_sums16(sums, i + 2 * kLength);
        // the marks listed: a step holding none of their differences has none, and takes the float pass as None
        const bool unmarked = kMiddle == Ties::None || (kMiddle == Ties::Rare && marks_listed);
        if (kMiddle == Ties::Rare && marks_listed &&
            Lanes::any(Ints(listed_marks(a, mark_list) | listed_marks(b, mark_list))))
          return settled_step<kRows>(x, r, in_block, sums, i, out);
        const Ints difference[4] = {Lanes::low_half(a), Lanes::high_half(a), Lanes::low_half(b), Lanes::high_half(b)};
        Ints marked[4];
        for (int v = 0; v < 4; ++v) {
          const Floats scale_v = per_value ? Lanes::floats_at(block_scales_ + i + v * kLength) : scale;
#if defined(__AVX2__)
          if (unmarked) {  // no marks: narrow's saturating packs clamp
            outs[v] =
                Lanes::template rounded<Ints>(__builtin_convertvector(difference[v], Floats) * scale_v + zero_point);
            continue;
          }
#endif
          outs[v] = Lanes::requantised(difference[v], scale_v, zero_point, marked[v]);
        }
        // (a step with marks is done again out of line, at the middle's one scale: no vector is live across a call,
        // none spilled)
        static_assert(!(kMiddle == Ties::Rare && decltype(per_value)::value), "marks at per-value scales");
        if (kMiddle == Ties::Rare && !unmarked && Lanes::any((marked[0] | marked[1]) | (marked[2] | marked[3])))
          return settled_step<kRows>(x, r, in_block, sums, i, out);
      }
      Lanes::narrow(outs[0], outs[1], outs[2], outs[3], out);
    };
    // Rows of a few vectors (NCHW planes): blocks of rows whose column sums lie d zeros apart, so that the middle's
    // steps run on across the rows, then copied out. The windows of the first and last d values are summed right
    // too; scaled as the middle's with count_include_pad, else by block_scales_ (or redone by edge_columns). Where
    // plane_edge_columns redoes the first and last value of every row, the rows lie together instead, as in x and
    // y, and the steps store straight to y; there the middle's marks (Rare) are settled in the block too where they
    // are few (marks_listed: settled_in_block takes a lane at a time, far slower than settled's vectors where a
    // scale ratio puts a sixth or more of the windows on ties).
    const bool unmarked_blocks = kEdge == Ties::None && (kMiddle == Ties::None || kMiddle == Ties::Whole) &&
                                 (q_.count_include_pad || edge_columns_ || (kMiddle == Ties::None && block_scales_));
    const bool blocks = kRows == WindowRows::Both && block_rows_ > 1 &&
                        (unmarked_blocks || (kMiddle == Ties::Rare && plane_edges_ && marks_listed));
    const int64_t gap = plane_edges_ ? 0 : d;
    Q* const block_out = block_out_;
    for (; blocks && r + 1 < end; r += block_rows_) {
      const int64_t rows = min_of(block_rows_, end - r), length = rows * (n + gap) - gap;
      for (int64_t k = 0; k < rows; ++k) column_sums<kRows>(x + (r + k) * n, column_sums_ + d + k * (n + gap));
      sums = column_sums_ + d;
      Q* const out = gap == 0 ? y + r * n : block_out;
      auto steps = [&](auto per_value) {
        for (int64_t i = 0; i < length; i += kStep) step(min_of(i, length - kStep), out, per_value);
      };
      in_block = true;
      if constexpr (kMiddle == Ties::None) block_scales_ ? steps(std::true_type{}) : steps(std::false_type{});
      else steps(std::false_type{});
      in_block = false;
      for (int64_t k = 0; gap != 0 && k < rows; ++k) copy_row(block_out + k * (n + d), y + (r + k) * n);
    }
    if (r < end) column_sums<kRows>(x + r * n, row_sums(r));
    for (; r < end; ++r) {
      // the next row's sums first: loaded right after their stores, they waited for them
      if (r + 1 < end) column_sums<kRows>(x + (r + 1) * n, row_sums(r + 1));
      sums = row_sums(r);
      yr = y + r * n;
      rows_f = kEdge == Ties::OrtOnly ? dequantised_rows(x, r, kRows, kMiddle == Ties::OrtOnly) : nullptr;
      int64_t i = 0;
      for (; i < d; i += kLength) edge(i);
      for (; i + kStep <= middle_end; i += kStep) step(i, yr, std::false_type{});
      for (; i + kLength <= middle_end; i += kLength) one(i, kMiddle, scale, count);
      for (; i < n; i += kLength) edge(i);
    }
  }

  // Seams of plane_edge_columns: h + 1 (rows -1 .. h - 1 and the next), and past them the last vectors' reach.
  int64_t plane_seams() const { return h_ + 2 * kLength + 4; }

  // Per row kind and side (the first or last d + kLength values), the lanes' scales (what 0) or ORT's divisors (1).
  float* edge_lanes(int rows_valid, int side, int what) {
    return edges_ + (((rows_valid - 1) * 2 + side) * 2 + what) * (d_ + kLength);
  }

  // ORT's divisor per lane: 9 with count_include_pad, else the window's elements
  Floats count_of(int rows_valid, Ints columns) const {
    return q_.count_include_pad ? Floats{} + 9.0f : __builtin_convertvector(columns * rows_valid, Floats);
  }

  // settled on the marked lanes of the windows of values [i, i + kLength) of row r, from its whole rows dequantised
  // (out of line for the rows' per-vector calls: their loop keeps its vectors in registers).
  template <WindowRows kRows>
  __attribute__((noinline)) Ints settled_in_row(const Q* x, int64_t r, int64_t i, Ints difference, Ints marks,
                                                Ints rounded) {
    return settled(dequantised_rows(x, r, kRows, true), i, row_count(kRows), difference, marks, rounded);
  }

  // Requantiser::settled on the marked lanes of the windows of values [i, i + kLength), with ORT's outputs.
  __attribute__((always_inline)) Ints settled(const float* const* rows_f, int64_t i, int rows_valid, Ints difference,
                                              Ints marks, Ints rounded) const {
    const Ints at = Lanes::iota() + static_cast<int32_t>(i);
    const Ints columns = Ints{} + 1 - (at >= static_cast<int32_t>(d_)) - (at < static_cast<int32_t>(n_ - d_));
    const Ints ort = ort_values(rows_f, i, count_of(rows_valid, columns));
    return Lanes::select(
        marks, requantiser_.template settled_lanes<Ints, HalfInts, HalfDoubles>(difference, rows_valid * columns, ort),
        rounded);
  }

  // ORT's output (as ort_output) of the windows of values [i, i + kLength) of a row, from its three window rows
  // dequantised (rows_f; d zeros on each side, a row of zeros for one outside the input): the nine terms added in
  // row-major window order, each pad's 0 included, which leaves ORT's sum as it is.
  // kRows: which window rows lie in the input (a pad row's zeros add nothing to a sum that is never -0).
  template <WindowRows kRows = WindowRows::Both>
  Ints ort_values(const float* const* rows_f, int64_t i, Floats count) const {
    Floats acc{};
    for (int t = has_above(kRows) ? 0 : 1; t < (has_below(kRows) ? 3 : 2); ++t) {
      const float* f = rows_f[t] + i;
      acc = acc + Lanes::floats_at(f - d_);
      acc = acc + Lanes::floats_at(f);
      acc = acc + Lanes::floats_at(f + d_);
    }
    return Lanes::ort_rounded(acc, count, Floats{} + q_.y_scale, static_cast<float>(q_.y_zero_point));
  }

  // Input rows r - 1 .. r + 1 dequantised as ORT does (ort_dequantised), those outside the input a row of zeros:
  // whole, or only the values the edge vectors read. Each row once per unit (a ring of three, tagged by row).
  const float* const* dequantised_rows(const Q* x, int64_t r, WindowRows kind, bool whole) {
    for (int t = 0; t < 3; ++t) {
      const int64_t row = r - 1 + t, slot = row % 3;
      if ((t == 0 && !has_above(kind)) || (t == 2 && !has_below(kind))) {
        window_rows_[t] = floats_ + 3 * stride_ + d_;
        continue;
      }
      float* f = floats_ + slot * stride_ + d_;
      window_rows_[t] = f;
      if (whole_row_[slot] == row || (!whole && edges_row_[slot] == row)) continue;
      const Q* xr = x + row * n_;
      if (whole) {
        dequantise(xr, f, 0, n_);
        whole_row_[slot] = row;
      } else {
        // an edge vector reads up to d past its lanes; its first lane is below d or above n - d - kLength
        const int64_t reach = min_of(n_, 2 * d_ + kLength);
        dequantise(xr, f, 0, reach);
        dequantise(xr, f, n_ - reach, n_);
        whole_row_[slot] = -1;
      }
      edges_row_[slot] = row;
    }
    return window_rows_;
  }

  // f[j] = ORT's dequantised xr[j] for j in [begin, end) (at least kLength values), the last vector moved back.
  void dequantise(const Q* xr, float* f, int64_t begin, int64_t end) const {
    const Floats x_scale = Floats{} + q_.x_scale;
    for (int64_t at = begin; at < end; at += kLength) {
      const int64_t j = min_of(at, end - kLength);
      const Floats v = x_scale * __builtin_convertvector(Lanes::widened(xr + j) - q_.x_zero_point, Floats);
      std::memcpy(f + j, &v, sizeof v);
    }
  }

  // out[i], i in [0, n): value i summed over the window rows of the row at xr, less x_zero_point per row. In int16
  // (at most 3 x 255), a vector of Shorts at a time, the last moved back to end at n.
  template <WindowRows kRows>
  void column_sums(const Q* xr, int16_t* out) const {
    constexpr int64_t kShorts = 2 * kLength;
    const Shorts zero_sum = Shorts{} + static_cast<int16_t>(q_.x_zero_point * row_count(kRows));
    const int64_t n = n_;
#if defined(__AVX512BW__)
    if (n >= Lanes::kWideShorts) {  // 32 at a time
      using WideShorts = typename Lanes::WideShorts;
      const WideShorts zero_sum32 = WideShorts{} + zero_sum[0];
      for (int64_t at = 0; at < n; at += Lanes::kWideShorts) {
        const int64_t i = min_of<int64_t>(at, n - Lanes::kWideShorts);
        WideShorts s = Lanes::widened_wide_shorts(xr + i) - zero_sum32;
        if constexpr (has_above(kRows)) s += Lanes::widened_wide_shorts(xr + i - n);
        if constexpr (has_below(kRows)) s += Lanes::widened_wide_shorts(xr + i + n);
        Lanes::store(out + i, s);
      }
      return;
    }
#endif
    for (int64_t at = 0; at < n; at += kShorts) {
      const int64_t i = min_of<int64_t>(at, n - kShorts);
      Shorts s = Lanes::widened_shorts(xr + i) - zero_sum;
      if constexpr (has_above(kRows)) s += Lanes::widened_shorts(xr + i - n);
      if constexpr (has_below(kRows)) s += Lanes::widened_shorts(xr + i + n);
      Lanes::store(out + i, s);
    }
  }

  // Output row r's column sums, d zeros on each side: two rows' buffers, used in turn.
  int16_t* row_sums(int64_t r) { return column_sums_ + (r & 1) * (n_ + d_) + d_; }

  // Points the arrays into the zeroed scratch at base (nullptr: nowhere). Returns the bytes they take.
  size_t layout(char* base) {
    Carve c{base};
    column_sums_ = c.take<int16_t>(max_of<int64_t>(2, block_rows_) * (n_ + d_) + d_);
    floats_ = c.take<float>(4 * stride_);
    edges_ = c.take<float>(12 * (d_ + kLength));
    columns_ = c.take<float>(2 * (h_ + 2 + kLength));
    const int64_t seams = plane_edges_ ? plane_seams() : 0;  // see plane_edge_columns
    seam_words_ = c.take<int32_t>(seams);
    if (base) {  // pads (x_zero_point) in every byte a plane's elements do not overwrite
      const Q zero = static_cast<Q>(q_.x_zero_point);
      const Q pad[4] = {zero, zero, zero, zero};
      for (int64_t k = 0; k < seams; ++k) std::memcpy(seam_words_ + k, pad, 4);
    }
    pair_out_ = c.take<int32_t>(seams);
    seam_floats_ = c.take<float>(4 * seams);
    block_out_ = c.take<Q>(block_rows_ * (n_ + d_));
    // the scale of each value of a block of rows, d zeros apart (fewer columns at the row's ends)
    const bool per_value = !requantiser_.marks_are_ties && !q_.count_include_pad && block_rows_ > 1 && !plane_edges_;
    block_scales_ = per_value ? c.take<float>(block_rows_ * (n_ + d_)) : nullptr;
    return c.bytes;
  }

  // The windows' sums less their zero sums of values [i, i + 2 kLength) of a row, in int16 (at most 9 x 255), and
  // of [i, i + kLength) widened to int32.
  Shorts window_sums16(const int16_t* sums, int64_t i) const {
    return (Lanes::shorts_at(sums + i - d_) + Lanes::shorts_at(sums + i)) + Lanes::shorts_at(sums + i + d_);
  }
#if defined(__AVX512BW__)
  typename Lanes::WideShorts window_sums32(const int16_t* sums, int64_t i) const {
    return (Lanes::wide_shorts_at(sums + i - d_) + Lanes::wide_shorts_at(sums + i)) +
           Lanes::wide_shorts_at(sums + i + d_);
  }
#endif
  Ints window_sums8(const int16_t* sums, int64_t i) const {
    return Lanes::ints_of((Lanes::half_shorts_at(sums + i - d_) + Lanes::half_shorts_at(sums + i)) +
                          Lanes::half_shorts_at(sums + i + d_));
  }

  // Lanes (all ones) whose difference is one of a row kind's listed marked differences.
  static Shorts listed_marks(Shorts difference, const int16_t* list) {
    Shorts hit = difference == list[0];
    for (int k = 1; k < kMarkList; ++k) hit |= difference == list[k];
    return hit;
  }

  // A vector of window values requantised by a ShortRule.
  template <class S>
  static S whole(S difference, const ShortRule& rule) {
    typedef uint16_t UShorts __attribute__((vector_size(sizeof(S))));
    const S product = Lanes::high_product(difference + rule.offset, rule.multiplier);
    return S(UShorts(product) >> rule.shift) + rule.add;
  }

  // A row of n_ (at least kStep) values from a block to the output, a vector at a time (the last moved back).
  void copy_row(const Q* from, Q* to) const {
    if (n_ < kStep) return static_cast<void>(std::memcpy(to, from, static_cast<size_t>(n_)));
    for (int64_t at = 0; at < n_; at += kStep) {
      const int64_t j = min_of(at, n_ - kStep);
      std::memcpy(to + j, from + j, kStep);
    }
  }

  // Whether the float pass marks any window of `valid` elements (1..9), every sum it can hold tried.
  bool marks(int valid) const { return marked_differences(valid, nullptr, 0) > 0; }

  // The differences whose windows of `valid` elements (1..9) the float pass marks, every one tried: how many, and
  // the first `capacity` of them in out.
  int marked_differences(int valid, int16_t* out, int capacity) const {
    const int32_t lowest = valid * (std::numeric_limits<Q>::min() - q_.x_zero_point);
    const int32_t highest = valid * (std::numeric_limits<Q>::max() - q_.x_zero_point);
    const Floats scale = Floats{} + static_cast<float>(requantiser_.window_scale(valid));
    const Floats zero_point = Floats{} + static_cast<float>(requantiser_.y_zero);
    int count = 0;
    for (int32_t s = lowest; s <= highest; s += kLength) {
      const Ints difference = Lanes::iota() + s;
      Ints marked;
      Lanes::requantised(Lanes::select(difference <= highest, difference, Ints{} + highest), scale, zero_point, marked);
      if (!Lanes::any(marked)) continue;
      for (int k = 0; k < kLength; ++k) {
        if (!marked[k] || difference[k] > highest) continue;
        if (count < capacity) out[count] = static_cast<int16_t>(difference[k]);
        ++count;
      }
    }
    return count;
  }

  // The differences of windows of `valid` elements (1..9) whose exact values lie within Q's range (unclamped,
  // where the float pass can mark them).
  int in_range_differences(int valid) const {
    const double scale = requantiser_.window_scale(valid);
    int count = 0;
    for (int32_t d = valid * (std::numeric_limits<Q>::min() - q_.x_zero_point);
         d <= valid * (std::numeric_limits<Q>::max() - q_.x_zero_point); ++d) {
      const double value = d * scale + requantiser_.y_zero;
      count += value >= std::numeric_limits<Q>::min() && value <= std::numeric_limits<Q>::max();
    }
    return count;
  }

  const QLinearParams q_;
  const Requantiser<Q, int16_t> requantiser_;
  const RowsAndColumns plane_;                // for ort_output_2d, on planes (d_ == 1)
  const int64_t h_, w_, d_, n_, block_rows_;  // n_: values of a row; block_rows_: of a block (see rows), if > 1
  const int64_t stride_;                      // n_ and d_ zeros on each side: a row of floats_
  const bool plane_edges_;                    // see plane_edge_columns
  float scale_[4][4] = {};                    // [rows][columns] of a window: its float scale
  ShortRule short_rule_[4];                   // [rows]: of the windows of three columns (Ties::Whole)
  Ties middle_[4] = {}, edge_[4] = {};        // [rows]: the marks of the middle's windows and of the edge vectors'
  static constexpr int kMarkList = 4;         // differences of mark_list_
  bool marks_listed_[4] = {};                 // [rows]: the middle's marked differences are in mark_list_ (Rare)
  bool tie_heavy_ = false;                    // a quarter or more of the middle's in-range windows marked (Rare)
  int16_t mark_list_[4][kMarkList];           // [rows]: kNoDifference in the slots past the list
  int16_t* column_sums_ = nullptr;  // a block's rows' or two rows' (see row_sums), d zeros before and after each
  Q* block_out_ = nullptr;          // a block's outputs, d values apart
  float* block_scales_ = nullptr;   // the scale of each value of a block of rows (see layout)
  float* floats_ = nullptr;         // three dequantised input rows (see dequantised_rows), then a row of zeros
  float *edges_ = nullptr, *columns_ = nullptr;          // see edge_lanes, edge_columns
  int32_t *seam_words_ = nullptr, *pair_out_ = nullptr;  // see plane_edge_columns
  float* seam_floats_ = nullptr;
  Ties edge_kind_ = Ties::None;                    // the marks of the windows of two columns (plane_edge_columns)
  ShortRule edge_rule_[2];                         // plane_edge_columns' for windows of 4 [0] and 6 [1] elements
  bool edge_rules_found_ = false;                  // both found: plane_edge_columns takes them
  ScratchBuffer memory_;                           // the arrays above, zeroed
  bool edge_columns_ = false;                      // see edge_columns
  int64_t whole_row_[3] = {}, edges_row_[3] = {};  // per row of floats_: the input row it holds, or -1
  const float* window_rows_[3] = {};               // dequantised_rows' answer
};

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
