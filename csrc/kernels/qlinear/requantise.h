// QLinearAveragePool's rounding rule: the exact value (integer window sums, requantised in double) decides the
// rounding, except within kTieBand of a tie, where ONNX Runtime's own float evaluation decides (settled); the
// float pass on vectors that finds the few values needing either (RequantiseLanes); the Requantiser.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/common/byte_lanes.h"
#include "kernels/common/per_isa.h"
#include "kernels/common/simd.h"
#include "kernels/common/window_geometry.h"
#include "kernels/common/windows.h"
#include "kernels/kernels.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// The requantisation's constants.
// (v + magic) - magic rounds half to even: 1.5 * 2^52 for |v| < 2^51 (ByteLanes::rounded: 1.5 * 2^23 in float).
constexpr double kRoundMagicDouble = 6755399441055744.0;
constexpr double kTieBand = 0.5 - 1e-4;    // |v - round(v)| above this: a tie within rounding noise (near_tie)
constexpr float kMarkBand = 0.5f - 2e-4f;  // the float pass marks above this (a superset of the tie band)

inline double round_half_even(double v) { return (v + kRoundMagicDouble) - kRoundMagicDouble; }

// ONNX Runtime's own float arithmetic: each element dequantised in float, and a window's float sum of those divided
// by the count, then by y_scale, plus y_zero_point (before rounding).
template <class Q>
inline float ort_dequantised(Q v, const QLinearParams& q) {
  return q.x_scale * static_cast<float>(static_cast<int32_t>(v) - q.x_zero_point);
}
inline float ort_requantised(float sum, int64_t count, const QLinearParams& q) {
  return sum / static_cast<float>(count) / q.y_scale + static_cast<float>(q.y_zero_point);
}

// Clamped to Q's range (whole bounds, so clamping before rounding changes nothing).
template <class Q>
inline double clamp_to(double v) {
  constexpr double qmin = std::numeric_limits<Q>::min(), qmax = std::numeric_limits<Q>::max();
  return v < qmin ? qmin : v > qmax ? qmax : v;
}

// A clamped value within rounding noise of a tie (x.5), where the exact value cannot decide the rounding.
inline bool near_tie(double clamped) { return std::fabs(clamped - round_half_even(clamped)) > kTieBand; }

template <class Q>
inline Q to_quantized(double clamped) {
  return static_cast<Q>(static_cast<int32_t>(round_half_even(clamped)));
}

// ORT's output, computed as ONNX Runtime's kernel does (ort_dequantised, added in row-major window order, then
// ort_requantised), clamped and rounded: the answer where the exact value lies on a tie.
template <class Q>
int32_t ort_output(const Q* x, const PoolGeometry& g, int64_t channels, int64_t c, int64_t out_index,
                   const QLinearParams& q, int64_t* index) {
  float sum = 0;
  int64_t valid = 0;
  visit_window(g, out_index, index, [&](int64_t offset) {
    sum += ort_dequantised(x[offset * channels + c], q);
    ++valid;
  });
  return to_quantized<Q>(clamp_to<Q>(ort_requantised(sum, q.count_include_pad ? g.kernel_size : valid, q)));
}

// Arrays carved one after another from one scratch block, each 8-byte aligned; without a block, only counted.
struct Carve {
  char* base;
  size_t bytes = 0;
  template <class T>
  T* take(int64_t n) {
    T* at = base ? reinterpret_cast<T*>(base + bytes) : nullptr;
    bytes += (sizeof(T) * static_cast<size_t>(n) + 7) & ~size_t{7};
    return at;
  }
};

// Calls f(i) for each i < n with mark[i] != 0 (marks are 0 or 1), in order, eight marks at a time (a branch per
// mark mispredicted on every tie).
template <class F>
void for_each_marked(const uint8_t* mark, int64_t n, F&& f) {
  int64_t i = 0;
  for (; __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && i + 8 <= n; i += 8) {  // mark i + k is byte k of the word
    uint64_t word;
    std::memcpy(&word, mark + i, sizeof word);
    while (word != 0) {
      f(i + (__builtin_ctzll(word) >> 3));
      word &= word - 1;
    }
  }
  for (; i < n; ++i) {
    if (mark[i]) f(i);
  }
}

// Elements in bounds of a window of output row `row` (all axes but the last), as a product over those axes.
inline int64_t lead_valid_count(const PoolGeometry& g, int64_t row) {
  int64_t valid = 1;
  for (int64_t a = static_cast<int64_t>(g.axes.size()) - 2; a >= 0; --a) {
    valid *= g.axes[a].valid_count(row % g.axes[a].out);
    row /= g.axes[a].out;
  }
  return valid;
}

// ort_output of one window of a 1-D or 2-D input, without the generic window walk: with equal scales the edge
// windows of 4 or 6 elements land exactly on .5, a few percent of all outputs.
template <class Q>
int32_t ort_output_2d(const Q* x, const RowsAndColumns& p, int64_t channels, int64_t c, int64_t oh, int64_t ow,
                      const QLinearParams& q, int64_t kernel_size) {
  int64_t r_lo, r_hi, k_lo, k_hi;
  p.rows.valid_range(oh, r_lo, r_hi);
  p.cols.valid_range(ow, k_lo, k_hi);
  float sum = 0;
  const int64_t row0 = oh * p.rows.stride - p.rows.pad_begin, col0 = ow * p.cols.stride - p.cols.pad_begin;
  for (int64_t r = r_lo; r < r_hi; ++r) {
    const Q* xr = x + ((row0 + r * p.rows.dilation) * p.cols.in + col0) * channels + c;
    for (int64_t k = k_lo; k < k_hi; ++k) sum += ort_dequantised(xr[k * p.cols.dilation * channels], q);
  }
  const int64_t count = q.count_include_pad ? kernel_size : (r_hi - r_lo) * (k_hi - k_lo);
  return to_quantized<Q>(clamp_to<Q>(ort_requantised(sum, count, q)));
}

// The requantisation's float pass on ByteLanes' vectors, for every path: Requantiser::span and the 3x3 rows.
template <class Q>
struct RequantiseLanes : ByteLanes<Q> {
  using Ints = typename ByteLanes<Q>::Ints;
  using Floats = typename ByteLanes<Q>::Floats;

  using ByteLanes<Q>::clamped;

  // The float pass on each lane: difference x scale + y_zero, clamped and rounded, and marked (all ones) where it
  // lies within kMarkBand of a tie, for the caller to settle. I, F: Ints and Floats, or WideInts and WideFloats.
  template <class I, class F>
  static I requantised(I difference, F scale, F y_zero, I& marked) {
    const F value = clamped(__builtin_convertvector(difference, F) * scale + y_zero);
    const I whole = ByteLanes<Q>::template rounded<I>(value);
    const F off = value - __builtin_convertvector(whole, F);
    marked = F(I(off) & 0x7fffffff) > (F{} + kMarkBand);
    return whole;
  }

  // ORT's output for windows whose dequantised elements add up to acc (as ort_requantised, then rounded).
  static Ints ort_rounded(Floats acc, Floats count, Floats y_scale, float y_zero_point) {
    return ByteLanes<Q>::template rounded<Ints>(clamped(acc / count / y_scale + y_zero_point));
  }
};

// Window sums of up to this many elements fit int16 (128 x 255 = 32640): half the bytes of int32, and float lanes.
constexpr int64_t kShortSumKernel = 128;

// Output values requantised per pass: many vector steps, while the pass's sums, scales and marks stay in L1.
constexpr int64_t kRequantiseBlock = 4096;

// Whether each value of a stretch has its own zero_sum and scale, or the stretch shares one pair; whether the float
// pass marks the values near a tie, or skips the marks (none can occur).
enum class Pattern { PerValue, Uniform };
enum class Marking { Gather, Skip };

// The requantisation: y = round((sum - zero_sum) * scale + y_zero_point), clamped, zero_sum = x_zero_point x (the
// window's elements), scale = x_scale / (y_scale x count). With int16 sums in float: (sum - zero_sum) is exact and
// the value within 8e-5 of the exact one where the clamp does not decide, so values over 2e-4 from a tie round as
// the exact value; those within (a superset of the 1e-4 tie band) are marked and settled. Wider sums: in double.
template <class Q, class I>
struct Requantiser {
  static constexpr bool kFloat = sizeof(I) == 2;
  using Scale = std::conditional_t<kFloat, float, double>;
  double y_zero, ratio;
  int32_t x_zero_point;
  int64_t kernel_size;
  bool count_include_pad;
  // With int16 sums and x_scale == y_scale the exact value is y_zero_point + an integer / count: not on a tie, at
  // least 1 / (2 count) >= 0.004 from one, so the float pass marks exactly the values on a tie.
  bool marks_are_ties;

  Requantiser(const QLinearParams& q, int64_t kernel)
      : y_zero(static_cast<double>(q.y_zero_point)),
        ratio(static_cast<double>(q.x_scale) / static_cast<double>(q.y_scale)),
        x_zero_point(q.x_zero_point),
        kernel_size(kernel),
        count_include_pad(q.count_include_pad),
        marks_are_ties(kFloat && ratio == 1.0) {
    if constexpr (kFloat) {
      for (int64_t count = 1; count <= kernel_size; ++count) count_scale[count] = ratio / static_cast<double>(count);
    }
  }
  // ratio / count for each count of a short kernel (a division per settled value cost more than the rest of it)
  double count_scale[kFloat ? kShortSumKernel + 1 : 1];  // [1, kernel_size] filled, the rest never read

  // x_scale / (y_scale * count) of a window holding `valid` input elements; 0 for a window without any
  double window_scale(int64_t valid) const {
    const int64_t count = count_include_pad ? kernel_size : valid;
    return count == 0 ? 0.0 : kFloat ? count_scale[count] : ratio / static_cast<double>(count);
  }

  // zero_sum and scale of a window holding `valid` input elements
  void pattern(int64_t valid, I& zero_sum, Scale& scale) const {
    zero_sum = static_cast<I>(x_zero_point * valid);
    scale = static_cast<Scale>(window_scale(valid));
  }

  // The rounding rule for a value the float pass marked, the one place every path settles one: the exact value
  // (double, clamped) where it is not near_tie, else ORT's output (ort(), only then evaluated). With
  // marks_are_ties every mark is a tie.
  template <class Ort>
  int32_t settled(int64_t difference, int64_t valid, Ort&& ort) const {
    if (marks_are_ties) return ort();
    const double exact = clamp_to<Q>(static_cast<double>(difference) * window_scale(valid) + y_zero);
    return near_tie(exact) ? ort() : to_quantized<Q>(exact);
  }

  // settled on each lane of a vector V of int32 lanes, without branches (a tie-heavy scale ratio marks half the
  // lanes, unpredictably): windows of `valid` (>= 1) elements, ORT's outputs given (ort). In doubles a half of V at a
  // time (H: half V's lanes, D: as many doubles), as wide as the ISA's vectors: GCC does wider ones lane by lane.
  template <class V, class H, class D>
  V settled_lanes(V difference, V valid, V ort) const {
    if (marks_are_ties) return ort;
    static_assert(sizeof(H) * 2 == sizeof(V) && sizeof(D) == sizeof(H) * 2, "V in two halves, in doubles");
    using Mask = decltype(D{} < D{});  // int64 lanes
    constexpr double qmin = std::numeric_limits<Q>::min(), qmax = std::numeric_limits<Q>::max();
    const auto half_lanes = std::make_index_sequence<sizeof(H) / sizeof(int32_t)>{};
    const H differences[2] = {lower_half(difference, half_lanes), upper_half(difference, half_lanes)};
    const H valids[2] = {lower_half(valid, half_lanes), upper_half(valid, half_lanes)};
    const H orts[2] = {lower_half(ort, half_lanes), upper_half(ort, half_lanes)};
    H out[2];
    for (int half = 0; half < 2; ++half) {
      // window_scale's, as a vector (lane by lane through memory, each store would stall the vector's load)
      const H count = count_include_pad ? H{} + static_cast<int32_t>(kernel_size) : valids[half];
      const D scale = ratio / __builtin_convertvector(count, D);
      D exact = __builtin_convertvector(differences[half], D) * scale + y_zero;
      const Mask low = (exact < qmin), high = (exact > qmax);  // clamp_to
      exact = D((low & Mask(D{} + qmin)) | (high & Mask(D{} + qmax)) | (~(low | high) & Mask(exact)));
      const D rounded = (exact + kRoundMagicDouble) - kRoundMagicDouble;  // round_half_even
      const D magnitude = D(Mask(exact - rounded) & std::numeric_limits<int64_t>::max());
      const H tie = __builtin_convertvector(magnitude > kTieBand, H);  // near_tie
      out[half] = (tie & orts[half]) | (~tie & __builtin_convertvector(rounded, H));
    }
    return V(joined_halves(out[0], out[1], half_lanes));
  }

  // n positions of `channels` interleaved values each; marks (one byte per value, 0 or 1) the values the caller
  // must settle, and returns whether there are any. int16 sums: span() over stretches of values sharing
  // zero_sum and scale; wider sums: run_wide().
  bool run(const I* sums, const I* zero_sum, const Scale* scale, int64_t n, int64_t channels, Q* y,
           uint8_t* mark) const {
    if constexpr (kFloat) {
      if (channels == 1) {
        const auto plane = marks_are_ties && count_include_pad && kernel_size % 2 == 1  // one odd count: no ties
                               ? &Requantiser::span<Pattern::PerValue, Marking::Skip>
                               : &Requantiser::span<Pattern::PerValue, Marking::Gather>;
        return (this->*plane)(sums, zero_sum, scale, I(0), Scale(0), n, y, mark);
      }
      // positions sharing zero_sum and scale (a row's interior windows) as one stretch
      bool any = false;
      for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && zero_sum[j] == zero_sum[i] && scale[j] == scale[i]) ++j;
        const int64_t at = i * channels, length = (j - i) * channels;
        const auto stretch = tie_free(scale[i]) ? &Requantiser::span<Pattern::Uniform, Marking::Skip>
                                                : &Requantiser::span<Pattern::Uniform, Marking::Gather>;
        any |= (this->*stretch)(sums + at, nullptr, nullptr, zero_sum[i], scale[i], length, y + at, mark + at);
        i = j;
      }
      return any;
    }
    return run_wide(sums, zero_sum, scale, n, channels, y, mark);
  }

  // Whether no window with this scale (window_scale) can hold a value on a tie, so that the float pass marks none
  // (see marks_are_ties): with equal scales the scale is 1 / count in float, and a count of 0 (scale 0) or an odd
  // count (the value's fraction a multiple of 1 / count) never lands on x.5.
  bool tie_free(Scale scale) const {
    if (!marks_are_ties) return false;
    if (scale == 0) return true;
    return std::lround(1.0 / static_cast<double>(scale)) % 2 == 1;
  }

  // n values through the float pass (RequantiseLanes::requantised), 4 vectors at a time, the rest through a
  // padded copy: y, and a mark (0 or 1) per value; zero_sum and scale per value (Pattern::PerValue) or one pair for
  // all. Returns whether any value is marked. With Marking::Skip (values that cannot be marked, see tie_free) only
  // the rounding: the marks are cleared.
  template <Pattern kPattern, Marking kMarking>
  bool span(const I* sums, const I* zero_sum, const Scale* scale, I zero_sum_all, Scale scale_all, int64_t n, Q* y,
            uint8_t* mark) const {
    static_assert(kFloat);
    using Lanes = RequantiseLanes<Q>;
    constexpr int kLength = Lanes::kLength, kBlock = 4 * kLength;
    using Ints = typename Lanes::Ints;
    using Floats = typename Lanes::Floats;
    constexpr bool kPerValue = kPattern == Pattern::PerValue;
    const Floats zero_point = Floats{} + static_cast<float>(y_zero);
    Ints any{};
    auto block = [&](const I* s, const I* z, const Scale* sc, Q* out, uint8_t* m) {
      Ints rounded[4], marked[4];
      for (int v = 0; v < 4; ++v) {
        Ints difference = Lanes::ints_of(Lanes::half_shorts_at(s + v * kLength)) - static_cast<int32_t>(zero_sum_all);
        Floats scale_v = Floats{} + scale_all;
        if constexpr (kPerValue) {
          difference -= Lanes::ints_of(Lanes::half_shorts_at(z + v * kLength));
          scale_v = Lanes::floats_at(sc + v * kLength);
        }
        rounded[v] = Lanes::requantised(difference, scale_v, zero_point, marked[v]);
      }
      Lanes::narrow(rounded[0], rounded[1], rounded[2], rounded[3], out);
      if constexpr (kMarking == Marking::Gather) {
        any |= (marked[0] | marked[1]) | (marked[2] | marked[3]);
        Lanes::narrow(marked[0] & 1, marked[1] & 1, marked[2] & 1, marked[3] & 1, m);
      }
    };
    int64_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
      block(sums + i, kPerValue ? zero_sum + i : nullptr, kPerValue ? scale + i : nullptr, y + i, mark + i);
    }
    if (i < n) {  // padded with values of difference 0 (y_zero_point, never marked)
      const size_t rest = static_cast<size_t>(n - i);
      I s[kBlock], z[kBlock] = {};
      Scale sc[kBlock] = {};
      Q out[kBlock];
      uint8_t m[kBlock];
      fill(s, kBlock, zero_sum_all);
      std::memcpy(s, sums + i, rest * sizeof(I));
      if constexpr (kPerValue) {
        std::memcpy(z, zero_sum + i, rest * sizeof(I));
        std::memcpy(sc, scale + i, rest * sizeof(Scale));
      }
      block(s, z, sc, out, m);
      std::memcpy(y + i, out, rest);
      if constexpr (kMarking == Marking::Gather) std::memcpy(mark + i, m, rest);
    }
    if constexpr (kMarking == Marking::Skip) std::memset(mark, 0, static_cast<size_t>(n));
    return Lanes::any(any);
  }

  // run() for int32/int64 sums, in double: each value as the exact value, marked where near_tie.
  bool run_wide(const I* sums, const I* zero_sum, const Scale* scale, int64_t n, int64_t channels, Q* y,
                uint8_t* mark) const {
    int32_t any = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t e = i * channels; e < (i + 1) * channels; ++e) {
        const double v = clamp_to<Q>(static_cast<double>(sums[e] - zero_sum[i]) * scale[i] + y_zero);
        const int32_t marked = near_tie(v);
        y[e] = to_quantized<Q>(v);
        mark[e] = static_cast<uint8_t>(marked);
        any |= marked;
      }
    }
    return any != 0;
  }
};

// The float pass's marked values of n positions of `channels` values (mark: see Requantiser::run) settled by
// Requantiser::settled: valid_of(i), the elements of position i's windows; ort(i, c), ORT's output.
template <class Q, class I, class Valid, class Ort>
void settle_marked(const Requantiser<Q, I>& r, const I* sums, int64_t n, int64_t channels, const uint8_t* mark, Q* y,
                   Valid&& valid_of, Ort&& ort) {
  for_each_marked(mark, n * channels, [&](int64_t e) {
    const int64_t i = e / channels, valid = valid_of(i);
    y[e] = static_cast<Q>(r.settled(static_cast<int64_t>(sums[e]) - r.x_zero_point * valid, valid,
                                    [&] { return ort(i, e - i * channels); }));
  });
}

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
