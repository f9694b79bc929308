// QLinearAveragePool: integer window sums, requantisation in double, ORT's float evaluation near rounding ties.
// Part of the per-ISA kernels: included by kernels_impl.h inside namespace onnx_pools::ONNX_POOLS_ISA::{anon},
// so everything here is compiled once per instruction set with that file's flags.
#pragma once

#include "kernels/qlinear/windows.h"  // (inside the per-ISA namespace, as this file)

// ---- QLinearAveragePool ---------------------------------------------------------------------------------

// The requantisation's constants, named once (qlinear_plane3x3.h's vector pass uses them too).
// (v + magic) - magic rounds half to even: 1.5 * 2^52 for |v| < 2^51 in double, 1.5 * 2^23 for |v| < 2^22 in float.
constexpr double kRoundMagicDouble = 6755399441055744.0;
constexpr float kRoundMagicFloat = 12582912.0f;
constexpr double kTieBand = 0.5 - 1e-4;    // |v - round(v)| above this: a tie within rounding noise (near_tie)
constexpr float kMarkBand = 0.5f - 2e-4f;  // the float pass marks above this (a superset of the tie band)

inline double round_half_even(double v) { return (v + kRoundMagicDouble) - kRoundMagicDouble; }

// ONNX Runtime's own float arithmetic, written once: each element dequantised in float, ...
template <class Q>
inline float ort_dequantised(Q v, const QLinearParams& q) {
  return q.x_scale * static_cast<float>(static_cast<int32_t>(v) - q.x_zero_point);
}
// ... and a window's float sum of those divided by the count, then by y_scale, plus y_zero_point (before rounding).
inline float ort_requantised(float sum, int64_t count, const QLinearParams& q) {
  return sum / static_cast<float>(count) / q.y_scale + static_cast<float>(q.y_zero_point);
}

// y + y_zero_point before rounding, computed as ONNX Runtime's own kernel does: dequantise each element in float,
// add them in row-major window order, divide by the count, divide by y_scale. Used only for values within
// rounding noise of a tie, where the exact value cannot decide and agreeing with ORT is the useful answer.
template <class Q>
double ort_float_value(const Q* x, const PoolGeometry& g, int64_t channels, int64_t c, int64_t out_index,
                       const QLinearParams& q, int64_t* index) {
  float sum = 0;
  int64_t valid = 0;
  visit_window(g, out_index, index, [&](int64_t offset) {
    sum += ort_dequantised(x[offset * channels + c], q);
    ++valid;
  });
  return ort_requantised(sum, q.count_include_pad ? g.kernel_size : valid, q);
}

// Clamped to Q's range (whole bounds, so clamping before rounding changes nothing).
template <class Q>
inline double clamp_to(double v) {
  constexpr double qmin = static_cast<double>(std::numeric_limits<Q>::min());
  constexpr double qmax = static_cast<double>(std::numeric_limits<Q>::max());
  v = v < qmin ? qmin : v;
  return v > qmax ? qmax : v;
}

// A clamped value within rounding noise of a tie (x.5), where the exact value cannot decide the rounding; such
// elements are recomputed as ORT does. (Tested as |v - round(v)| because floor() blocks vectorisation.)
inline bool near_tie(double clamped) { return std::fabs(clamped - round_half_even(clamped)) > kTieBand; }

template <class Q>
inline Q to_quantized(double clamped) {
  return static_cast<Q>(static_cast<int32_t>(round_half_even(clamped)));
}

// Whether any of n marks is set, eight bytes at a time (a library call per window costs more than the test).
inline bool any_marked(const uint8_t* mark, int64_t n) {
  uint64_t any = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, mark + i, sizeof word);
    any |= word;
  }
  for (; i < n; ++i) any |= mark[i];
  return any != 0;
}

// How many of n marks (0 or 1 each) are set, eight at a time.
inline int64_t count_marked(const uint8_t* mark, int64_t n) {
  int64_t count = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, mark + i, sizeof word);
    count += __builtin_popcountll(word);
  }
  for (; i < n; ++i) count += mark[i];
  return count;
}

// Calls f(i) for each i < n with mark[i] != 0 (marks are 0 or 1), in order, eight marks at a time: a loop turn
// per marked element (its lowest set bit) instead of a branch per mark, which mispredicted on every tie.
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

// ORT's float value (as ort_float_value) of one window of a 1-D or 2-D plane, without the generic window walk:
// the tie path runs for a few percent of all outputs when scales are equal (edge windows of 4 or 6 elements land
// exactly on .5), so it must cost about as much as the window itself.
template <class Q>
double ort_float_value_2d(const Q* x, const RowsAndColumns& p, int64_t channels, int64_t c, int64_t oh, int64_t ow,
                          const QLinearParams& q, int64_t kernel_size) {
  int64_t r_lo, r_hi, k_lo, k_hi;
  p.rows.valid_range(oh, r_lo, r_hi);
  p.cols.valid_range(ow, k_lo, k_hi);
  float sum = 0;
  const int64_t row0 = oh * p.rows.stride - p.rows.pad_begin, col0 = ow * p.cols.stride - p.cols.pad_begin;
  for (int64_t r = r_lo; r < r_hi; ++r) {
    const Q* xr = x + ((row0 + r * p.rows.dilation) * p.cols.in + col0) * channels + c;
    for (int64_t k = k_lo; k < k_hi; ++k) {
      sum += ort_dequantised(xr[k * p.cols.dilation * channels], q);
    }
  }
  const int64_t valid = (r_hi - r_lo) * (k_hi - k_lo);
  return ort_requantised(sum, q.count_include_pad ? kernel_size : valid, q);
}

// A float value clamped to Q's range and rounded half to even, still as a float: to_quantized(clamp_to(value)) in
// float (the same result: the value and its bounds are exact in both), so that loops over channels vectorise.
template <class Q>
inline float rounded_output(float value) {
  constexpr float qmin = static_cast<float>(std::numeric_limits<Q>::min());
  constexpr float qmax = static_cast<float>(std::numeric_limits<Q>::max());
  constexpr float magic = kRoundMagicFloat;
  value = qmin > value ? qmin : value;
  value = qmax < value ? qmax : value;
  return (value + magic) - magic;
}

// ORT's outputs (as ort_float_value_2d, rounded by rounded_output) of all `channels` values of the window at
// output row oh, column col, into out: vectorised across the channels, divisions included.
template <class Q>
void ort_channel_outputs_2d(const Q* x, const RowsAndColumns& p, int64_t channels, int64_t oh, int64_t col,
                            const QLinearParams& q_in, int64_t kernel_size, float* out) {
  const QLinearParams q = q_in;  // a local copy: the stores to out cannot alias it, so the loops vectorise
  int64_t r_lo, r_hi, k_lo, k_hi;
  p.rows.valid_range(oh, r_lo, r_hi);
  p.cols.valid_range(col, k_lo, k_hi);
  fill(out, channels, 0.0f);
  const int64_t row0 = oh * p.rows.stride - p.rows.pad_begin, col0 = col * p.cols.stride - p.cols.pad_begin;
  for (int64_t r = r_lo; r < r_hi; ++r) {
    const Q* xr = x + ((row0 + r * p.rows.dilation) * p.cols.in + col0) * channels;
    for (int64_t k = k_lo; k < k_hi; ++k) {
      const Q* xk = xr + k * p.cols.dilation * channels;
      for (int64_t c = 0; c < channels; ++c) out[c] += ort_dequantised(xk[c], q);
    }
  }
  const int64_t valid = (r_hi - r_lo) * (k_hi - k_lo);
  const int64_t count = q.count_include_pad ? kernel_size : valid;
  for (int64_t c = 0; c < channels; ++c) out[c] = rounded_output<Q>(ort_requantised(out[c], count, q));
}

// Outputs of the marked elements of output row oh, columns [begin, begin + n) with `channels` interleaved,
// evaluated as ort_float_value_2d does but vectorised: across the channels of a window (NHWC), or across the row
// (one plane): with equal scales whole edge rows land on ties, and one window at a time would cost several times
// the row's fast path. Each value adds the same terms in the same order as ort_float_value_2d. acc: scratch for
// max(channels, n) floats.
template <class Q>
void ort_tie_outputs_2d(const Q* x, const RowsAndColumns& p, int64_t channels, int64_t oh, int64_t begin, int64_t n,
                        const QLinearParams& q_in, int64_t kernel_size, const uint8_t* mark, Q* y, float* acc) {
  const QLinearParams q = q_in;  // a local copy: the stores to acc cannot alias it, so the loops vectorise
  int64_t r_lo, r_hi;
  p.rows.valid_range(oh, r_lo, r_hi);
  const int64_t row0 = oh * p.rows.stride - p.rows.pad_begin;
  auto count_of = [&](int64_t valid) { return q.count_include_pad ? kernel_size : valid; };
  auto output = [](float value) { return to_quantized<Q>(clamp_to<Q>(static_cast<double>(value))); };
  const AxisGeometry& cols = p.cols;
  if (channels > 1) {
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* mj = mark + j * channels;
      if (!any_marked(mj, channels)) continue;
      ort_channel_outputs_2d(x, p, channels, oh, begin + j, q, kernel_size, acc);
      Q* yj = y + j * channels;
      for (int64_t c = 0; c < channels; ++c) yj[c] = mj[c] ? static_cast<Q>(static_cast<int32_t>(acc[c])) : yj[c];
    }
    return;
  }
  if (count_marked(mark, n) <= 4 || cols.kernel > cols.in) {  // a few windows (the edge columns): one at a time
    for_each_marked(mark, n, [&](int64_t j) {
      y[j] = to_quantized<Q>(clamp_to<Q>(ort_float_value_2d(x, p, 1, 0, oh, begin + j, q, kernel_size)));
    });
    return;
  }
  fill(acc, n, 0.0f);
  for (int64_t r = r_lo; r < r_hi; ++r) {
    const Q* xr = x + (row0 + r * p.rows.dilation) * cols.in;
    for (int64_t k = 0; k < cols.kernel; ++k) {
      // the columns j of [begin, begin + n) whose window's k-th element lies inside the row
      const int64_t offset = k * cols.dilation - cols.pad_begin;
      const int64_t j_lo = max_of(begin, offset >= 0 ? 0 : (-offset + cols.stride - 1) / cols.stride);
      const int64_t j_hi = min_of(begin + n, offset >= cols.in ? 0 : (cols.in - 1 - offset) / cols.stride + 1);
      for (int64_t j = j_lo; j < j_hi; ++j) {
        acc[j - begin] += ort_dequantised(xr[j * cols.stride + offset], q);
      }
    }
  }
  for_each_marked(mark, n, [&](int64_t j) {
    y[j] = output(ort_requantised(acc[j], count_of((r_hi - r_lo) * cols.valid_count(begin + j)), q));
  });
}

// The vectors Requantiser::span works in, and the narrowing of four of them (whole values within Q's range, or
// marks 0/1) to bytes: by packs where the instruction set has them (x86-64 narrows lanes one by one otherwise).
// AVX2 width also in the AVX-512 build: the same, tested, code.
template <class Q>
struct RequantiseLanes {
#if defined(__AVX2__)
  static constexpr int kLength = 8;
#elif defined(__SSE2__) || defined(__ARM_NEON)
  static constexpr int kLength = 4;
#else
  static constexpr int kLength = 4;
#endif
  typedef int32_t Ints __attribute__((vector_size(kLength * 4)));
  typedef float Floats __attribute__((vector_size(kLength * 4)));
  static Floats max(Floats a, Floats b) {
#if defined(__AVX2__)
    return _mm256_max_ps(a, b);
#elif defined(__SSE2__)
    return __builtin_ia32_maxps(a, b);
#else
    return a < b ? b : a;
#endif
  }
  static Floats min(Floats a, Floats b) {
#if defined(__AVX2__)
    return _mm256_min_ps(a, b);
#elif defined(__SSE2__)
    return __builtin_ia32_minps(a, b);
#else
    return b < a ? b : a;
#endif
  }
  // value clamped to Q's range and rounded half to even, as Requantiser::element (max/min are its selects: the
  // value is never NaN)
  static Floats clamped(Floats value) {
    value = max(value, Floats{} + static_cast<float>(std::numeric_limits<Q>::min()));
    return min(value, Floats{} + static_cast<float>(std::numeric_limits<Q>::max()));
  }
  static Floats rounded(Floats clamped_value) { return (clamped_value + kRoundMagicFloat) - kRoundMagicFloat; }
  // The float pass of Requantiser::element on each lane: (difference x scale + y_zero) clamped and rounded, and
  // marked (all ones) where it lies within kMarkBand of a tie, for the caller to settle.
  static Ints requantised(Ints difference, Floats scale, Floats y_zero, Ints& marked) {
    const Floats value = clamped(__builtin_convertvector(difference, Floats) * scale + y_zero);
    const Floats whole = rounded(value);
    const Floats off = value - whole;
    const Floats band = Floats{} + kMarkBand;
    marked = (off > band) | (off < -band);
    return __builtin_convertvector(whole, Ints);
  }
  template <class B>
  static void narrow(Ints a, Ints b, Ints c, Ints d, B* out) {
#if defined(__AVX2__) || defined(__SSE2__)
    constexpr bool kSigned = std::is_signed_v<B>;
#endif
#if defined(__AVX2__)
    const __m256i ab = _mm256_packs_epi32(__m256i(a), __m256i(b));  // per 128-bit half: a, b
    const __m256i cd = _mm256_packs_epi32(__m256i(c), __m256i(d));
    const __m256i bytes = kSigned ? _mm256_packs_epi16(ab, cd) : _mm256_packus_epi16(ab, cd);
    const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    std::memcpy(out, &ordered, sizeof ordered);
#elif defined(__SSE2__)
    typedef short Shorts8 __attribute__((vector_size(16)));
    typedef char Bytes16 __attribute__((vector_size(16)));
    const Shorts8 ab = __builtin_ia32_packssdw128(a, b);
    const Shorts8 cd = __builtin_ia32_packssdw128(c, d);
    const Bytes16 bytes = kSigned ? __builtin_ia32_packsswb128(ab, cd) : Bytes16(__builtin_ia32_packuswb128(ab, cd));
    std::memcpy(out, &bytes, sizeof bytes);
#else
    typedef B Bytes __attribute__((vector_size(kLength)));
    const Bytes parts[4] = {__builtin_convertvector(a, Bytes), __builtin_convertvector(b, Bytes),
                            __builtin_convertvector(c, Bytes), __builtin_convertvector(d, Bytes)};
    std::memcpy(out, parts, sizeof parts);
#endif
  }
  static void narrow_marks(Ints a, Ints b, Ints c, Ints d, uint8_t* out) { narrow(a, b, c, d, out); }
};

// Window sums of up to this many elements fit int16 (128 x 255 = 32640; s8: 128 x 128), so the streamed and
// whole-plane passes move half the bytes of int32 and the requantisation runs in float (see Requantiser).
constexpr int64_t kShortSumKernel = 128;

// The requantisation, written once: y = round((sum - zero_sum) * scale + y_zero_point), clamped, where per output
// position zero_sum = x_zero_point * (elements in the window) and scale = x_scale / (y_scale * count).
// With int16 sums the vectorised pass runs in float (twice the lanes of double): (sum - zero_sum) is exact in
// float and the float value is within 8e-5 of the exact one wherever the clamp does not decide, so elements more
// than 2e-4 from a tie round as the exact value does; those within 2e-4 (a superset of the 1e-4 tie band) are
// marked and the caller settles them with exact() in double. Results equal the all-double evaluation.
template <class Q, class I>
struct Requantiser {
  static constexpr bool kFloat = sizeof(I) == 2;
  using Scale = std::conditional_t<kFloat, float, double>;
  double y_zero, ratio;
  int32_t x_zero_point;
  int64_t kernel_size;
  bool count_include_pad;
  // With int16 sums and x_scale == y_scale (ratio exactly 1) the exact value is y_zero_point + an integer / count
  // (count <= kShortSumKernel): a value not on a tie lies at least 1 / (2 count) >= 0.004 from one, far outside
  // the float pass's band, so the float pass marks exactly the values on a tie.
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
  // ratio / count for each count of a short kernel: exact() runs per marked element, and a division costs more
  // than the rest of it (the same values as the division, so pattern() uses them too)
  double count_scale[kFloat ? kShortSumKernel + 1 : 1] = {};

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

  // The exact value (double, clamped) of a window sum over `valid` input elements.
  double exact(I sum, int64_t valid) const {
    return clamp_to<Q>(static_cast<double>(static_cast<int64_t>(sum) - x_zero_point * valid) * window_scale(valid) +
                       y_zero);
  }

  // Settles the marked values of one position of `channels` values whose windows hold `valid` input elements,
  // given ORT's outputs for them (ort: rounded floats): the exact value where it decides (as settle()), ORT's
  // where it lies on a tie. Only the marked values, found eight marks at a time (a sixth of them with equal
  // scales): across all channels, the mixed int16/double/byte loop stayed scalar and branchy on SSE2.
  void settle_position(const I* sums, int64_t channels, int64_t valid, const float* ort, const uint8_t* mark,
                       Q* y) const {
    if (marks_are_ties) {  // ORT's value for every mark: a select across the channels, no branch per mark
      for (int64_t c = 0; c < channels; ++c) y[c] = mark[c] ? static_cast<Q>(static_cast<int32_t>(ort[c])) : y[c];
      return;
    }
    const int64_t zero = x_zero_point * valid;
    const double scale = window_scale(valid);
    for_each_marked(mark, channels, [&](int64_t c) {
      const double v = clamp_to<Q>(static_cast<double>(static_cast<int64_t>(sums[c]) - zero) * scale + y_zero);
      y[c] = near_tie(v) ? static_cast<Q>(static_cast<int32_t>(ort[c])) : to_quantized<Q>(v);
    });
  }

  // One element, rounded; `marked` (0 or 1) when it lies in the band the caller must settle.
  template <class Flag>
  Q element(I sum, I zero_sum, Scale scale, Flag& marked) const {
    if constexpr (kFloat) {
      constexpr float qmin = static_cast<float>(std::numeric_limits<Q>::min());
      constexpr float qmax = static_cast<float>(std::numeric_limits<Q>::max());
      constexpr float magic = kRoundMagicFloat;
      float v = static_cast<float>(static_cast<int32_t>(sum) - static_cast<int32_t>(zero_sum)) * scale +
                static_cast<float>(y_zero);
      v = qmin > v ? qmin : v;
      v = qmax < v ? qmax : v;
      const float rounded = (v + magic) - magic;
      marked = std::fabs(v - rounded) > kMarkBand;
      return static_cast<Q>(static_cast<int32_t>(rounded));
    } else {
      const double v = clamp_to<Q>(static_cast<double>(sum - zero_sum) * scale + y_zero);
      marked = near_tie(v);
      return to_quantized<Q>(v);
    }
  }

  // n positions of `channels` interleaved values each; marks (one byte per value, 0 or 1) the values the caller
  // must settle, and returns whether there are any. int16 sums: span() over stretches of values sharing
  // zero_sum and scale; wider sums: run_chunks().
  bool run(const I* sums, const I* zero_sum, const Scale* scale, int64_t n, int64_t channels, Q* y,
           uint8_t* mark) const {
    if constexpr (kFloat) {
      if (channels == 1) {
        if (marks_are_ties && count_include_pad && kernel_size % 2 == 1) {  // one odd count: no ties at all
          span<true, false>(sums, zero_sum, scale, I(0), Scale(0), n, y, mark);
          return false;
        }
        return span<true>(sums, zero_sum, scale, I(0), Scale(0), n, y, mark);
      }
      // positions sharing zero_sum and scale (a row's interior windows) as one stretch
      bool any = false;
      for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && zero_sum[j] == zero_sum[i] && scale[j] == scale[i]) ++j;
        const int64_t at = i * channels, length = (j - i) * channels;
        if (tie_free(scale[i])) {
          span<false, false>(sums + at, nullptr, nullptr, zero_sum[i], scale[i], length, y + at, mark + at);
        } else {
          any |= span<false>(sums + at, nullptr, nullptr, zero_sum[i], scale[i], length, y + at, mark + at);
        }
        i = j;
      }
      return any;
    }
    return run_chunks(sums, zero_sum, scale, n, channels, y, mark);
  }

  // Whether no window with this scale (window_scale) can hold a value on a tie, so that the float pass marks none
  // (see marks_are_ties): with equal scales the scale is 1 / count in float, and a count of 0 (scale 0) or an odd
  // count (the value's fraction a multiple of 1 / count) never lands on x.5.
  bool tie_free(Scale scale) const {
    if (!marks_are_ties) return false;
    if (scale == 0) return true;
    return std::lround(1.0 / static_cast<double>(scale)) % 2 == 1;
  }

  // n values, as element() computes each (the same float operations, lane by lane, 4 vectors at a time): y,
  // and a mark (0 or 1) per value; zero_sum and scale per value (kPerValue) or one pair for all. Returns whether
  // any value is marked. Written with vector types and packs rather than left to the auto-vectoriser, whose code
  // for element() spilled registers, blended, and narrowed int32 lanes to bytes one by one.
  // Without kMarks (values that cannot be marked, see tie_free) only the rounding: the marks are cleared.
  template <bool kPerValue, bool kMarks = true>
  bool span(const I* sums, const I* zero_sum, const Scale* scale, I zero_sum_all, Scale scale_all, int64_t n, Q* y,
            uint8_t* mark) const {
    static_assert(kFloat);
    using Lanes = RequantiseLanes<Q>;
    constexpr int kLength = Lanes::kLength;
    using Ints = typename Lanes::Ints;
    using Floats = typename Lanes::Floats;
    typedef int16_t Shorts __attribute__((vector_size(kLength * 2)));
    const Floats zero_point = Floats{} + static_cast<float>(y_zero);
    const Floats scale_v = Floats{} + scale_all;
    // values [at, at + kLength): the rounded values as Ints, and the marks (all ones where marked)
    auto lanes = [&](int64_t at, Ints& rounded_ints, Ints& marked) {
      Shorts s;
      std::memcpy(&s, sums + at, sizeof s);
      Ints d = __builtin_convertvector(s, Ints);
      Floats sc = scale_v;
      if constexpr (kPerValue) {
        Shorts z;
        std::memcpy(&z, zero_sum + at, sizeof z);
        d -= __builtin_convertvector(z, Ints);
        std::memcpy(&sc, scale + at, sizeof sc);
      } else {
        d -= static_cast<int32_t>(zero_sum_all);
      }
      rounded_ints = Lanes::requantised(d, sc, zero_point, marked);
    };
    Ints any{};
    int64_t i = 0;
    if constexpr (!kMarks) {
      for (; i + 4 * kLength <= n; i += 4 * kLength) {
        Ints r0, r1, r2, r3, m;
        lanes(i, r0, m);
        lanes(i + kLength, r1, m);
        lanes(i + 2 * kLength, r2, m);
        lanes(i + 3 * kLength, r3, m);
        Lanes::narrow(r0, r1, r2, r3, y + i);
      }
      for (; i < n; ++i) {
        uint8_t unused;
        y[i] = element(sums[i], kPerValue ? zero_sum[i] : zero_sum_all, kPerValue ? scale[i] : scale_all, unused);
      }
      std::memset(mark, 0, static_cast<size_t>(n));
      return false;
    }
    for (; i + 4 * kLength <= n; i += 4 * kLength) {
      Ints r0, r1, r2, r3, m0, m1, m2, m3;
      lanes(i, r0, m0);
      lanes(i + kLength, r1, m1);
      lanes(i + 2 * kLength, r2, m2);
      lanes(i + 3 * kLength, r3, m3);
      Lanes::narrow(r0, r1, r2, r3, y + i);
      const Ints m = (m0 | m1) | (m2 | m3);
      any |= m;
      Lanes::narrow_marks(m0 & 1, m1 & 1, m2 & 1, m3 & 1, mark + i);
    }
    int32_t flags = 0;
    for (int k = 0; k < kLength; ++k) flags |= any[k];
    for (; i < n; ++i) {
      y[i] = element(sums[i], kPerValue ? zero_sum[i] : zero_sum_all, kPerValue ? scale[i] : scale_all, mark[i]);
      flags |= mark[i];
    }
    return flags != 0;
  }

  // run() for int32/int64 sums (double arithmetic), in chunks: while chunks carry no marks, the vectorised loop
  // keeps only a flag in int32 lanes (storing byte marks costs it a third of its time) and a flagged chunk gets its
  // marks from a second loop; after a flagged chunk the next chunk stores its marks directly.
  bool run_chunks(const I* sums, const I* zero_sum, const Scale* scale, int64_t n, int64_t channels, Q* y,
                  uint8_t* mark) const {
    bool any = false, last_flagged = false;
    // elements [begin, end) of a stretch sharing zero_sum_of / scale_of (per element, or one position's)
    auto chunk = [&](const I* s, auto&& zero_sum_of, auto&& scale_of, Q* out, uint8_t* m, int64_t begin, int64_t end) {
      if (last_flagged) {
        uint8_t flags = 0;
        for (int64_t i = begin; i < end; ++i) {
          out[i] = element(s[i], zero_sum_of(i), scale_of(i), m[i]);
          flags |= m[i];
        }
        last_flagged = flags != 0;
      } else {
        int32_t flags = 0;
        for (int64_t i = begin; i < end; ++i) {
          int32_t f;
          out[i] = element(s[i], zero_sum_of(i), scale_of(i), f);
          flags |= f;
        }
        last_flagged = flags != 0;
        if (last_flagged) {
          for (int64_t i = begin; i < end; ++i) element(s[i], zero_sum_of(i), scale_of(i), m[i]);
        } else {
          std::memset(m + begin, 0, static_cast<size_t>(end - begin));
        }
      }
      any |= last_flagged;
    };
    constexpr int64_t kChunk = 64;
    if (channels == 1) {
      auto zs = [&](int64_t i) { return zero_sum[i]; };
      auto sc = [&](int64_t i) { return scale[i]; };
      for (int64_t begin = 0; begin < n; begin += kChunk)
        chunk(sums, zs, sc, y, mark, begin, min_of(n, begin + kChunk));
      return any;
    }
    for (int64_t i = 0; i < n; ++i) {
      const I zs = zero_sum[i];
      const Scale sc = scale[i];
      const int64_t at = i * channels;
      for (int64_t begin = 0; begin < channels; begin += kChunk) {
        chunk(
            sums + at, [&](int64_t) { return zs; }, [&](int64_t) { return sc; }, y + at, mark + at, begin,
            min_of(channels, begin + kChunk));
      }
    }
    return any;
  }

  // Settles the marked elements the exact value decides (writes y, clears the mark) and returns how many stay
  // marked: those within the tie band, left for ORT's float evaluation. n positions of `channels` values;
  // valid_of(i): elements in position i's windows. Position by position, so no division per element.
  template <class Valid>
  int64_t settle(const I* sums, int64_t n, int64_t channels, uint8_t* mark, Q* y, Valid&& valid_of) const {
    int64_t ties = 0;
    auto one = [&](int64_t e, int64_t valid) {
      const double v = exact(sums[e], valid);
      if (near_tie(v)) {
        ++ties;
      } else {
        y[e] = to_quantized<Q>(v);
        mark[e] = 0;
      }
    };
    if (channels == 1) {
      for_each_marked(mark, n, [&](int64_t i) { one(i, valid_of(i)); });
      return ties;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = i * channels;
      if (!any_marked(mark + at, channels)) continue;
      const int64_t valid = valid_of(i);
      for_each_marked(mark + at, channels, [&](int64_t c) { one(at + c, valid); });
    }
    return ties;
  }
};

// Offsets of several arrays in one scratch block, each aligned to 8 bytes whatever the arrays before it hold.
struct ScratchLayout {
  size_t bytes = 0;
  template <class T>
  size_t add(int64_t n) {
    const size_t at = bytes;
    bytes += (sizeof(T) * static_cast<size_t>(n) + 7) & ~size_t{7};
    return at;
  }
  template <class T>
  static T* at(ScratchBuffer& memory, size_t offset) {
    return reinterpret_cast<T*>(memory.as<char>() + offset);
  }
};

// Per output position of a block of output rows: Requantiser::pattern's zero_sum and scale. Output rows whose
// windows have the same element counts share one, so it is rebuilt only when the block's kind changes (the edge
// rows); `key` says which kind it holds.
template <class Q, class I>
struct RequantisePattern {
  using Scale = typename Requantiser<Q, I>::Scale;
  I* zero_sum = nullptr;
  Scale* scale = nullptr;
  int64_t key = -1;  // what the rows were made for (caller-defined; -1: nothing yet)
  int64_t rows = 0;  // rows filled

  // Row `at` for the output columns [first, first + n) of a row whose windows hold lead_valid elements over the
  // axes before the last.
  void fill_row(const Requantiser<Q, I>& r, const AxisGeometry& last, int64_t lead_valid, int64_t first, int64_t n,
                int64_t at = 0) {
    for (int64_t j = 0; j < n; ++j) {
      r.pattern(lead_valid * last.valid_count(first + j), zero_sum[at * n + j], scale[at * n + j]);
    }
  }
  // n_rows rows of n columns from `first`, each with lead_valid; row 0 rebuilt only when `key` changes.
  void ensure(const Requantiser<Q, I>& r, const AxisGeometry& last, int64_t key_of_rows, int64_t lead_valid,
              int64_t first, int64_t n, int64_t n_rows) {
    if (key != key_of_rows) {
      fill_row(r, last, lead_valid, first, n);
      key = key_of_rows;
      rows = 1;
    }
    for (; rows < n_rows; ++rows) {
      std::memcpy(zero_sum + rows * n, zero_sum, sizeof(I) * static_cast<size_t>(n));
      std::memcpy(scale + rows * n, scale, sizeof(Scale) * static_cast<size_t>(n));
    }
  }
};

// The requantisation of n positions of `channels` values, the one sequence both paths run: the vectorised pass
// (Requantiser::run), the exact value for the elements it marks (settle; valid_of(i): elements in position i's
// windows), and ORT's float evaluation, by ties(), for those the exact value leaves on a tie (still marked).
// With kSettleFirst false, ties() gets every marked element and settles them itself (see settle_position).
template <bool kSettleFirst = true, class Q, class I, class Valid, class Ties>
void requantise(const Requantiser<Q, I>& r, const I* sums, const RequantisePattern<Q, I>& pattern, int64_t n,
                int64_t channels, Q* y, uint8_t* mark, Valid&& valid_of, Ties&& ties) {
  if (!r.run(sums, pattern.zero_sum, pattern.scale, n, channels, y, mark)) return;
  if (kSettleFirst && r.settle(sums, n, channels, mark, y, valid_of) == 0) return;
  ties();
}

// 1-D and 2-D pools (NCHW planes, channels == 1, or NHWC images): window sums streamed an output row at a time
// (scratch: a ring of kernel rows of one strip, not a plane), requantised row by row. Built once per call.
template <class Q, class I>
class QLinearStreamPlan {
 public:
  using Scale = typename Requantiser<Q, I>::Scale;

  QLinearStreamPlan(const PoolGeometry& g, const QLinearParams& q, int64_t channels)
      : g_(g),
        q_(q),
        channels_(channels),
        rc_(rows_and_columns(g)),
        requantiser_(q, g.kernel_size),
        strip_(min_of(rc_.cols.out, kStripColumns)),
        row_length_(rc_.cols.in * channels),
        memory_(layout(nullptr)) {
    layout(&memory_);
  }

  void run(const Q* x, Q* y, int64_t units) {
    for (int64_t u = 0; u < units; ++u) unit(x + u * g_.in_size * channels_, y + u * g_.out_size * channels_);
  }

 private:
  // Lays out the scratch; with `memory`, also points the arrays into it. Returns the bytes it needs.
  size_t layout(ScratchBuffer* memory) {
    ScratchLayout l;
    const size_t tags_at = l.add<int64_t>(stream_tags(rc_)), scale_at = l.add<Scale>(strip_),
                 acc_at = l.add<float>(max_of(channels_, strip_)), sums_at = l.add<I>(stream_scratch(rc_, channels_)),
                 zero_sum_at = l.add<I>(strip_), mark_at = l.add<uint8_t>(strip_ * channels_);
    if (memory) {
      tags_ = ScratchLayout::at<int64_t>(*memory, tags_at);
      pattern_.scale = ScratchLayout::at<Scale>(*memory, scale_at);
      acc_ = ScratchLayout::at<float>(*memory, acc_at);
      sums_ = ScratchLayout::at<I>(*memory, sums_at);
      pattern_.zero_sum = ScratchLayout::at<I>(*memory, zero_sum_at);
      mark_ = ScratchLayout::at<uint8_t>(*memory, mark_at);
    }
    return l.bytes;
  }

  void unit(const Q* xu, Q* yu) {
    pattern_.key = -1;
    auto load = [&](int64_t row, int64_t first, int64_t n, I* dst) {
      const Q* src = xu + row * row_length_ + first * channels_;
      for (int64_t i = 0; i < n * channels_; ++i) dst[i] = static_cast<I>(src[i]);
    };
    auto finish = [&](int64_t oh, int64_t begin, int64_t n, const I* sums) {
      const int64_t rows_valid = rc_.rows.valid_count(oh);
      // the pattern of one row of the strip: the key tells the row count and the strip apart
      pattern_.ensure(requantiser_, rc_.cols, rows_valid * (rc_.cols.out + 1) + begin, rows_valid, begin, n, 1);
      Q* out = yu + (oh * rc_.cols.out + begin) * channels_;
      auto valid_of = [&](int64_t j) { return rows_valid * rc_.cols.valid_count(begin + j); };
      if constexpr (Requantiser<Q, I>::kFloat) {
        if (channels_ > 1) {
          // NHWC: each marked window's exact and ORT values across its channels at once; with equal scales the
          // edge windows of 4 or 6 elements put a sixth of their values on exact ties, in every row
          requantise<false>(requantiser_, sums, pattern_, n, channels_, out, mark_, valid_of, [&] {
            for (int64_t j = 0; j < n; ++j) {
              const uint8_t* mj = mark_ + j * channels_;
              if (!any_marked(mj, channels_)) continue;
              ort_channel_outputs_2d(xu, rc_, channels_, oh, begin + j, q_, g_.kernel_size, acc_);
              requantiser_.settle_position(sums + j * channels_, channels_, valid_of(j), acc_, mj, out + j * channels_);
            }
          });
          return true;
        }
      }
      requantise(requantiser_, sums, pattern_, n, channels_, out, mark_, valid_of,
                 [&] { ort_tie_outputs_2d(xu, rc_, channels_, oh, begin, n, q_, g_.kernel_size, mark_, out, acc_); });
      return true;
    };
    stream_window_sums(rc_, channels_, sums_, tags_, load, finish);
  }

  const PoolGeometry& g_;
  const QLinearParams& q_;
  const int64_t channels_;
  const RowsAndColumns rc_;
  const Requantiser<Q, I> requantiser_;
  const int64_t strip_;       // output columns whose sums are built at a time
  const int64_t row_length_;  // values of one input row
  ScratchBuffer memory_;
  int64_t* tags_ = nullptr;  // stream_window_sums' ring tags
  float* acc_ = nullptr;     // ort_tie_outputs_2d's scratch
  I* sums_ = nullptr;        // stream_window_sums' scratch
  uint8_t* mark_ = nullptr;  // marks of a row (see Requantiser::run)
  RequantisePattern<Q, I> pattern_;
};

// Whether qlinear_pool takes the summed-area path: NCHW 2-D planes with short output rows and no dilation.
inline bool summed_area_planes(const PoolGeometry& g, int64_t channels) {
  return channels == 1 && g.axes.size() == 2 && g.axes[1].out < kDirectColumns && g.axes[0].dilation == 1 &&
         g.axes[1].dilation == 1;
}

// Output values qlinear_pool requantises per pass: many times the vector loop's step, while the sums, scales and
// marks of one pass (about 15 bytes per value) stay in L1.
constexpr int64_t kRequantiseBlock = 4096;

// Whole-unit pools (any rank; NCHW planes that fit in cache, NHWC images of rank 3): window sums of a step of
// units by the separable passes (or summed areas for small 2-D planes), then requantised in blocks of output rows.
// Built once per call: the sizes the geometry gives, the scratch layout, the requantisation patterns.
template <class Q, class I>
class QLinearPlan {
 public:
  using Scale = typename Requantiser<Q, I>::Scale;

  QLinearPlan(const PoolGeometry& g, const QLinearParams& q, int64_t units, int64_t channels)
      : g_(g),
        q_(q),
        channels_(channels),
        rank_(g.axes.size()),
        last_(g.axes[rank_ - 1]),
        out_last_(last_.out),
        row_size_(out_last_ * channels),
        rows_(g.out_size / out_last_),
        // NCHW planes are widened to I first: a loop over short rows of bytes is too short for the vectorised step.
        // 2-D planes with short output rows take window-by-window sums instead, several planes per step, so that
        // the requantisation still runs over long stretches (e.g. 2x2 windows over 7x7 planes).
        direct_(summed_area_planes(g, channels)),
        flat_(channels == 1 && !direct_ && flat_plane_sums_apply(g)),
        step_units_(direct_ ? max_of<int64_t>(1, min_of<int64_t>(units, kRequantiseBlock / g.out_size)) : 1),
        // Output rows whose windows have the same element counts (all but the edge rows) are requantised as one
        // flat block of up to ~kRequantiseBlock values: one row alone is often shorter than the vectorised loop's
        // step. (The direct path's whole step is one such block, its pattern built once in the constructor.)
        block_rows_(direct_ ? step_units_ * rows_
                            : max_of<int64_t>(1, min_of<int64_t>(step_units_ * rows_, kRequantiseBlock / row_size_))),
        requantiser_(q, g.kernel_size),
        rc_(rank_ <= 2 ? rows_and_columns(g) : RowsAndColumns{}),
        memory_(layout(nullptr)) {
    layout(&memory_);
    for (int64_t r = 0; r < rows_; ++r) row_lead_valid_[r] = lead_valid_count(g, r);
    if (direct_) {  // small planes: the pattern of one plane, edge rows included, repeated for a whole step
      for (int64_t r = 0; r < rows_; ++r) bulk_.fill_row(requantiser_, last_, row_lead_valid_[r], 0, out_last_, r);
      for (int64_t k = 1; k < step_units_; ++k) {
        std::memcpy(bulk_.zero_sum + k * g.out_size, bulk_.zero_sum, sizeof(I) * static_cast<size_t>(g.out_size));
        std::memcpy(bulk_.scale + k * g.out_size, bulk_.scale, sizeof(Scale) * static_cast<size_t>(g.out_size));
      }
    }
  }

  void run(const Q* x, Q* y, int64_t units) {
    for (int64_t u = 0; u < units; u += step_units_) {
      const int64_t n_units = min_of(step_units_, units - u);
      const Q* xu = x + u * g_.in_size * channels_;
      Q* yu = y + u * g_.out_size * channels_;
      const I* sums = window_sums_of(xu, n_units);
      const int64_t unit_rows = n_units * rows_;  // the rows of consecutive units follow one another
      if (direct_) {
        requantise_rows(xu, yu, sums, 0, unit_rows, bulk_);
        continue;
      }
      for (int64_t row = 0; row < unit_rows;) {  // blocks of rows with the same in-bounds count
        const int64_t lead_valid = row_lead_valid_[row % rows_];
        int64_t n_rows = 1;
        while (n_rows < block_rows_ && row + n_rows < unit_rows &&
               row_lead_valid_[(row + n_rows) % rows_] == lead_valid) {
          ++n_rows;
        }
        // two patterns, so the interior rows' block is built once per call and the edge rows use the other
        RequantisePattern<Q, I>& pattern = n_rows > 1 ? bulk_ : edge_;
        pattern.ensure(requantiser_, last_, lead_valid, lead_valid, 0, out_last_, n_rows);
        requantise_rows(xu, yu, sums, row, n_rows, pattern);
        row += n_rows;
      }
    }
  }

 private:
  // Lays out the scratch; with `memory`, also points the arrays into it. Returns the bytes it needs.
  size_t layout(ScratchBuffer* memory) {
    const int64_t block_positions = block_rows_ * out_last_;
    const int64_t sums_scratch = g_.largest_intermediate * channels_;  // checked by the op
    const int64_t widened = channels_ == 1 && !direct_ && !flat_ ? g_.in_size : 0;
    const int64_t direct_sums =
        direct_ ? step_units_ * g_.out_size + (last_.in + 1) + (g_.axes[0].in + 1) * out_last_ : 0;
    ScratchLayout l;
    const size_t index_at = l.add<int64_t>(static_cast<int64_t>(kVisitScratch * rank_)),
                 lead_at = l.add<int64_t>(rows_), scales_at = l.add<Scale>(block_positions + out_last_),
                 acc_at = l.add<float>(max_of(channels_, out_last_)), plane_at = l.add<I>(widened),
                 step_sums_at = l.add<I>(direct_sums), buf_a_at = l.add<I>(sums_scratch),
                 buf_b_at = l.add<I>(sums_scratch), zero_sums_at = l.add<I>(block_positions + out_last_),
                 mark_at = l.add<uint8_t>(block_rows_ * row_size_);
    if (memory) {
      index_ = ScratchLayout::at<int64_t>(*memory, index_at);
      row_lead_valid_ = ScratchLayout::at<int64_t>(*memory, lead_at);
      acc_ = ScratchLayout::at<float>(*memory, acc_at);
      plane_ = ScratchLayout::at<I>(*memory, plane_at);
      step_sums_ = ScratchLayout::at<I>(*memory, step_sums_at);
      buf_a_ = ScratchLayout::at<I>(*memory, buf_a_at);
      buf_b_ = ScratchLayout::at<I>(*memory, buf_b_at);
      mark_ = ScratchLayout::at<uint8_t>(*memory, mark_at);
      Scale* scales = ScratchLayout::at<Scale>(*memory, scales_at);
      I* zero_sums = ScratchLayout::at<I>(*memory, zero_sums_at);
      bulk_.zero_sum = zero_sums;
      bulk_.scale = scales;
      edge_.zero_sum = zero_sums + block_positions;
      edge_.scale = scales + block_positions;
    }
    return l.bytes;
  }

  // The window sums of n_units units from xu: [unit][output position][channel].
  const I* window_sums_of(const Q* xu, int64_t n_units) {
    if (direct_) {
      I* direct_scratch = step_sums_ + step_units_ * g_.out_size;
      for (int64_t k = 0; k < n_units; ++k) {
        direct_window_sums_2d(xu + k * g_.in_size, step_sums_ + k * g_.out_size, g_, direct_scratch);
      }
      return step_sums_;
    }
    if (channels_ == 1) {
      if (flat_) {
        flat_plane_sums(xu, buf_a_, buf_b_, g_);
        return buf_b_;
      }
      for (int64_t i = 0; i < g_.in_size; ++i) plane_[i] = static_cast<I>(xu[i]);
      return window_sums(static_cast<const I*>(plane_), buf_a_, buf_b_, g_, 1);
    }
    return window_sums(xu, buf_a_, buf_b_, g_, channels_);
  }

  // Requantises output rows [row, row + n_rows) of this step with `pattern`'s zero_sum and scale.
  void requantise_rows(const Q* xu, Q* yu, const I* sums, int64_t row, int64_t n_rows,
                       const RequantisePattern<Q, I>& pattern) {
    const I* s = sums + row * row_size_;
    Q* yb = yu + row * row_size_;
    auto valid_of = [&](int64_t i) {
      return row_lead_valid_[(row + i / out_last_) % rows_] * last_.valid_count(i % out_last_);
    };
    if constexpr (Requantiser<Q, I>::kFloat) {
      if (channels_ == 1 && rank_ <= 2) {  // NCHW planes: settled and tied in one pass, row by row
        requantise<false>(requantiser_, s, pattern, n_rows * out_last_, 1, yb, mark_, valid_of,
                          [&] { settle_plane_rows(xu, yb, s, row, n_rows); });
        return;
      }
    }
    requantise(requantiser_, s, pattern, n_rows * out_last_, channels_, yb, mark_, valid_of,
               [&] { ort_ties(xu, yb, row, n_rows); });
  }

  // The marked elements of output rows [row, row + n_rows) of 1-D/2-D planes: the exact value where it decides,
  // ORT's float value where it lies on a tie (as settle() then ort_ties(), without a division per element: with
  // equal scales a sixth of the edge windows are ties, in every row).
  void settle_plane_rows(const Q* xu, Q* yb, const I* sums, int64_t row, int64_t n_rows) {
    for (int64_t i = 0; i < n_rows; ++i) {
      const uint8_t* mr = mark_ + i * out_last_;
      if (!any_marked(mr, out_last_)) continue;
      const int64_t r = row + i, plane_row = r % rows_;
      const Q* x_plane = xu + (r / rows_) * g_.in_size;
      const int64_t lead_valid = row_lead_valid_[plane_row];
      const I* sr = sums + i * out_last_;
      Q* yr = yb + i * out_last_;
      for_each_marked(mr, out_last_, [&](int64_t j) {
        const bool tie =
            requantiser_.marks_are_ties || near_tie(requantiser_.exact(sr[j], lead_valid * last_.valid_count(j)));
        yr[j] =
            to_quantized<Q>(tie ? clamp_to<Q>(ort_float_value_2d(x_plane, rc_, 1, 0, plane_row, j, q_, g_.kernel_size))
                                : requantiser_.exact(sr[j], lead_valid * last_.valid_count(j)));
      });
    }
  }

  // ORT's float evaluation of the elements still marked in output rows [row, row + n_rows) of this step.
  void ort_ties(const Q* xu, Q* yb, int64_t row, int64_t n_rows) {
    for (int64_t i = 0; i < n_rows; ++i) {
      const int64_t r = row + i;  // the step's row: its unit, and the unit's row
      const Q* x_unit = xu + (r / rows_) * g_.in_size * channels_;
      uint8_t* mr = mark_ + i * row_size_;
      Q* yr = yb + i * row_size_;
      if (rank_ <= 2) {
        if (any_marked(mr, row_size_)) {
          ort_tie_outputs_2d(x_unit, rc_, channels_, r % rows_, 0, out_last_, q_, g_.kernel_size, mr, yr, acc_);
        }
        continue;
      }
      for_each_marked(mr, row_size_, [&](int64_t e) {
        const int64_t out_index = (r % rows_) * out_last_ + e / channels_;
        const double value = ort_float_value(x_unit, g_, channels_, e % channels_, out_index, q_, index_);
        yr[e] = to_quantized<Q>(clamp_to<Q>(value));
      });
    }
  }

  const PoolGeometry& g_;
  const QLinearParams& q_;
  const int64_t channels_;
  const size_t rank_;
  const AxisGeometry& last_;
  const int64_t out_last_;
  const int64_t row_size_;    // values of one output row
  const int64_t rows_;        // output rows of one unit
  const bool direct_;         // summed-area sums (summed_area_planes)
  const bool flat_;           // flat passes over each plane (flat_plane_sums)
  const int64_t step_units_;  // units whose sums are taken per step
  const int64_t block_rows_;  // output rows requantised per pass, at most
  const Requantiser<Q, I> requantiser_;
  const RowsAndColumns rc_;  // rank <= 2: for ort_tie_outputs_2d
  ScratchBuffer memory_;
  int64_t* index_ = nullptr;           // visit_window's scratch
  int64_t* row_lead_valid_ = nullptr;  // per output row of a unit: in-bounds count over the leading axes
  float* acc_ = nullptr;               // ort_tie_outputs_2d's scratch
  I* plane_ = nullptr;                 // an NCHW plane widened to I
  I* step_sums_ = nullptr;             // the direct path's sums of a step, then its scratch
  I* buf_a_ = nullptr;                 // the separable passes' two buffers
  I* buf_b_ = nullptr;
  uint8_t* mark_ = nullptr;  // marks of a block (see Requantiser::run)
  RequantisePattern<Q, I> bulk_, edge_;
};

template <class Q, class I>
void qlinear_streamed(const Q* x, Q* y, int64_t units, int64_t channels, const PoolGeometry& g,
                      const QLinearParams& q) {
  QLinearStreamPlan<Q, I>(g, q, channels).run(x, y, units);
}

// I: integer type of the window sums (see Requantiser for the arithmetic of each).
template <class Q, class I>
void qlinear_pool(const Q* x, Q* y, int64_t units, int64_t channels, const PoolGeometry& g, const QLinearParams& q) {
  QLinearPlan<Q, I>(g, q, units, channels).run(x, y, units);
}

// Window sums of up to 2^23 bytes fit int32; larger kernels take int64. Requantisation is in double: a float
// product misplaces values within ~1e-7 of a rounding tie, which real scales hit often.
// Elements of an NCHW plane up to which it is pooled whole (4 bytes of scratch per element: 256 KiB, in L2).
constexpr int64_t kWholePlaneLimit = 1 << 16;

#if defined(__AVX2__)
#include "kernels/qlinear/plane3x3.h"  // (inside the per-ISA namespace, as this file)

// (after qlinear_plane3x3.h, whose kPlaneLanes and any_lane it uses; inside the per-ISA namespace too)
#include "kernels/qlinear/nhwc3x3.h"
#endif

template <class Q>
void qlinear_dispatch(const void* x, void* y, int64_t units, int64_t channels, const PoolGeometry& g,
                      const QLinearParams& q) {
#if defined(__AVX2__)
  if (Plane3x3Pool<Q>::applies(g, channels)) {  // 3x3 stride 1 pads 1 NCHW planes: one pass per plane
    Plane3x3Pool<Q>(g, q).run(static_cast<const Q*>(x), static_cast<Q*>(y), units);
    return;
  }
  if (Nhwc3x3Pool<Q>::applies(g, channels)) {  // the same windows over NHWC images: one pass per image row
    Nhwc3x3Pool<Q>(g, q, channels, units).run(static_cast<const Q*>(x), static_cast<Q*>(y), units);
    return;
  }
#endif
  // NCHW planes that fit in cache take qlinear_pool's whole-plane passes (fewer, longer loops than short rows;
  // scratch bounded by kWholePlaneLimit), small ones its summed-area path; larger planes and NHWC images are
  // streamed.
  const bool streamed =
      g.axes.size() <= 2 && !summed_area_planes(g, channels) && !(channels == 1 && g.in_size <= kWholePlaneLimit);
  auto run = [&](auto sum_type) {  // the integer type of the window sums
    using I = decltype(sum_type);
    if (streamed) {
      qlinear_streamed<Q, I>(static_cast<const Q*>(x), static_cast<Q*>(y), units, channels, g, q);
    } else {
      qlinear_pool<Q, I>(static_cast<const Q*>(x), static_cast<Q*>(y), units, channels, g, q);
    }
  };
  if (g.kernel_size <= kShortSumKernel) {
    run(int16_t{});
  } else if (g.kernel_size <= (1 << 23)) {
    run(int32_t{});
  } else {
    run(int64_t{});
  }
}

template <class Q>
void qlinear_nchw(const void* x, void* y, int64_t planes, int64_t, const PoolGeometry& g, const QLinearParams& q) {
  qlinear_dispatch<Q>(x, y, planes, 1, g, q);
}

template <class Q>
void qlinear_nhwc(const void* x, void* y, int64_t images, int64_t channels, const PoolGeometry& g,
                  const QLinearParams& q) {
  qlinear_dispatch<Q>(x, y, images, channels, g, q);
}
