// QLinearAveragePool's rounding rule, written once: the exact value (integer window sums, requantised in double)
// decides the rounding, except within kTieBand of a tie, where ONNX Runtime's own float evaluation decides; the
// vectorised float pass (RequantiseLanes) that finds the few values needing either; the Requantiser that applies
// the rule to runs of window sums.
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

#include "kernels/common/per_isa.h"
#include "kernels/common/simd.h"
#include "kernels/common/window_geometry.h"
#include "kernels/common/windows.h"
#include "kernels/kernels.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// The requantisation's constants.
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

// The rounding rule for one value: the exact value (clamped) sets y, except within kTieBand of a tie, where ORT's
// float evaluation must (returns false).
template <class Q>
inline bool exact_decides(double exact, Q& y) {
  if (near_tie(exact)) return false;
  y = to_quantized<Q>(exact);
  return true;
}

// ORT's output, computed as ONNX Runtime's own kernel does: dequantise each element in float, add them in
// row-major window order, divide by the count, divide by y_scale, add y_zero_point; clamped and rounded. Used only
// for values within rounding noise of a tie, where the exact value cannot decide and agreeing with ORT is the
// useful answer.
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

// The vectors of the requantisation's float pass, written once on GCC's vector extensions for every path (the
// separable passes' Requantiser::span and the one-pass 3x3 kernels), with the few conversions GCC's generic code
// does lane by lane on x86-64 (bytes widened or narrowed) done by the instruction that does them at once. The
// AVX-512 build uses the AVX2 width: the same, tested, code.
template <class Q>
struct RequantiseLanes {
#if defined(__AVX2__)
  static constexpr int kLength = 8;
#else
  static constexpr int kLength = 4;
#endif
  typedef int32_t Ints __attribute__((vector_size(kLength * 4)));
  typedef float Floats __attribute__((vector_size(kLength * 4)));
  typedef int16_t Shorts __attribute__((vector_size(kLength * 4)));  // twice the lanes, as wide as Ints
  typedef Q Bytes __attribute__((vector_size(kLength)));
  typedef Q WideBytes __attribute__((vector_size(kLength * 2)));
  // unaligned views, for loads and stores of whole vectors
  typedef Floats FloatsAt __attribute__((aligned(1), may_alias));
  typedef Shorts ShortsAt __attribute__((aligned(1), may_alias));

  static Floats floats_at(const float* p) { return *reinterpret_cast<const FloatsAt*>(p); }
  static Shorts shorts_at(const int16_t* p) { return *reinterpret_cast<const ShortsAt*>(p); }
  static void store(int16_t* p, Shorts v) { *reinterpret_cast<ShortsAt*>(p) = v; }
  static Ints iota() {
    Ints v;
    for (int k = 0; k < kLength; ++k) v[k] = k;
    return v;
  }
  static Floats select(Ints mask, Floats if_set, Floats if_clear) {
    return Floats((mask & Ints(if_set)) | (~mask & Ints(if_clear)));
  }
  static Ints select(Ints mask, Ints if_set, Ints if_clear) { return (mask & if_set) | (~mask & if_clear); }

  // Whether any lane of a mask (lanes 0 or all ones) is set.
  static bool any(Ints m) {
#if defined(__AVX2__)
    return !_mm256_testz_si256(__m256i(m), __m256i(m));
#else
    uint64_t words[sizeof m / 8];
    std::memcpy(words, &m, sizeof m);
    uint64_t any = 0;
    for (uint64_t w : words) any |= w;
    return any != 0;
#endif
  }

  // kLength elements from p as Ints, and 2 x kLength as Shorts.
  static Ints widened(const Q* p) {
#if defined(__AVX2__)
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return Ints(std::is_signed_v<Q> ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
#else
    Bytes b;
    std::memcpy(&b, p, sizeof b);
    return __builtin_convertvector(b, Ints);
#endif
  }
  static Shorts widened_shorts(const Q* p) {
#if defined(__AVX2__)
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return Shorts(std::is_signed_v<Q> ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b));
#else
    WideBytes b;
    std::memcpy(&b, p, sizeof b);
    return __builtin_convertvector(b, Shorts);
#endif
  }
  // The lower and upper kLength lanes of s, sign-extended.
  static Ints low_half(Shorts s) {
#if defined(__AVX2__)
    return Ints(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(__m256i(s))));
#else
    return __builtin_convertvector(half_of(s, 0), Ints);
#endif
  }
  static Ints high_half(Shorts s) {
#if defined(__AVX2__)
    return Ints(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(__m256i(s), 1)));
#else
    return __builtin_convertvector(half_of(s, 1), Ints);
#endif
  }
  typedef int16_t HalfShorts __attribute__((vector_size(kLength * 2)));
  static HalfShorts half_of(Shorts s, int h) {
    HalfShorts out;
    std::memcpy(&out, reinterpret_cast<const char*>(&s) + h * sizeof out, sizeof out);
    return out;
  }
  static HalfShorts half_shorts_at(const int16_t* p) {
    HalfShorts s;
    std::memcpy(&s, p, sizeof s);
    return s;
  }
  static Ints ints_of(HalfShorts s) {
#if defined(__AVX2__)
    return Ints(_mm256_cvtepi16_epi32(__m128i(s)));
#else
    return __builtin_convertvector(s, Ints);
#endif
  }

  // value clamped to Q's range (as clamp_to; the value is never NaN), by maxps / minps where there are (GCC's
  // selects for the generic form compare and blend)
  static Floats clamped(Floats value) {
    const Floats qmin = Floats{} + static_cast<float>(std::numeric_limits<Q>::min());
    const Floats qmax = Floats{} + static_cast<float>(std::numeric_limits<Q>::max());
#if defined(__AVX2__)
    return _mm256_min_ps(_mm256_max_ps(value, qmin), qmax);
#elif defined(__SSE2__)
    return __builtin_ia32_minps(__builtin_ia32_maxps(value, qmin), qmax);
#else
    value = value > qmin ? value : qmin;
    return value < qmax ? value : qmax;
#endif
  }
  // A clamped value rounded half to even, as whole Ints (the conversion rounds in the mode the magic-number
  // addition of round_half_even rounds in).
  static Ints rounded(Floats clamped_value) {
#if defined(__AVX2__)
    return Ints(_mm256_cvtps_epi32(__m256(clamped_value)));
#elif defined(__SSE2__)
    return __builtin_ia32_cvtps2dq(clamped_value);
#else
    return __builtin_convertvector((clamped_value + kRoundMagicFloat) - kRoundMagicFloat, Ints);
#endif
  }

  // The float pass of Requantiser::element on each lane: difference x scale + y_zero, clamped and rounded, and
  // marked (all ones) where it lies within kMarkBand of a tie, for the caller to settle.
  static Ints requantised(Ints difference, Floats scale, Floats y_zero, Ints& marked) {
    const Floats value = clamped(__builtin_convertvector(difference, Floats) * scale + y_zero);
    const Ints whole = rounded(value);
    const Floats off = value - __builtin_convertvector(whole, Floats);
    marked = Floats(Ints(off) & 0x7fffffff) > (Floats{} + kMarkBand);
    return whole;
  }

  // ORT's output for windows whose dequantised elements add up to acc (as ort_requantised, then rounded).
  static Ints ort_rounded(Floats acc, Floats count, Floats y_scale, float y_zero_point) {
    return rounded(clamped(acc / count / y_scale + y_zero_point));
  }

  // Whole values within Q's range (or marks 0 / 1) narrowed to bytes: one vector, or four.
  static void narrow_one(Ints a, Q* out) {
#if defined(__AVX2__)
    const __m128i halves = _mm_packs_epi32(_mm256_castsi256_si128(__m256i(a)), _mm256_extracti128_si256(__m256i(a), 1));
    const __m128i bytes = std::is_signed_v<Q> ? _mm_packs_epi16(halves, halves) : _mm_packus_epi16(halves, halves);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), bytes);
#else
    const Bytes b = __builtin_convertvector(a, Bytes);
    std::memcpy(out, &b, sizeof b);
#endif
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
    typedef B Narrow __attribute__((vector_size(kLength)));
    const Narrow parts[4] = {__builtin_convertvector(a, Narrow), __builtin_convertvector(b, Narrow),
                             __builtin_convertvector(c, Narrow), __builtin_convertvector(d, Narrow)};
    std::memcpy(out, parts, sizeof parts);
#endif
  }
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
// Whether each value of a stretch has its own zero_sum and scale, or the stretch shares one pair.
enum class Pattern { PerValue, Uniform };
// Whether the float pass marks the values near a tie, or skips the marks (none can occur).
enum class Marking { Gather, Skip };

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

  // The exact value (double, clamped) of a window over `valid` input elements whose sum less its zero sum is
  // `difference`.
  double exact_of_difference(int64_t difference, int64_t valid) const {
    return clamp_to<Q>(static_cast<double>(difference) * window_scale(valid) + y_zero);
  }

  // The rounding rule for a value the float pass marked, the one place every path settles one: the exact value
  // where it decides, else ORT's output (ort(), only then evaluated). With marks_are_ties every mark is a tie.
  template <class Ort>
  int32_t settled(int64_t difference, int64_t valid, Ort&& ort) const {
    Q y;
    return !marks_are_ties && exact_decides(exact_of_difference(difference, valid), y) ? y : ort();
  }

  // n positions of `channels` interleaved values each; marks (one byte per value, 0 or 1) the values the caller
  // must settle, and returns whether there are any. int16 sums: span() over stretches of values sharing
  // zero_sum and scale; wider sums: run_wide().
  bool run(const I* sums, const I* zero_sum, const Scale* scale, int64_t n, int64_t channels, Q* y,
           uint8_t* mark) const {
    if constexpr (kFloat) {
      if (channels == 1) {
        if (marks_are_ties && count_include_pad && kernel_size % 2 == 1) {  // one odd count: no ties at all
          span<Pattern::PerValue, Marking::Skip>(sums, zero_sum, scale, I(0), Scale(0), n, y, mark);
          return false;
        }
        return span<Pattern::PerValue, Marking::Gather>(sums, zero_sum, scale, I(0), Scale(0), n, y, mark);
      }
      // positions sharing zero_sum and scale (a row's interior windows) as one stretch
      bool any = false;
      for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && zero_sum[j] == zero_sum[i] && scale[j] == scale[i]) ++j;
        const int64_t at = i * channels, length = (j - i) * channels;
        if (tie_free(scale[i])) {
          span<Pattern::Uniform, Marking::Skip>(sums + at, nullptr, nullptr, zero_sum[i], scale[i], length, y + at,
                                                mark + at);
        } else {
          any |= span<Pattern::Uniform, Marking::Gather>(sums + at, nullptr, nullptr, zero_sum[i], scale[i], length,
                                                         y + at, mark + at);
        }
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
    typedef int16_t Shorts __attribute__((vector_size(kLength * 2)));
    constexpr bool kPerValue = kPattern == Pattern::PerValue;
    const Floats zero_point = Floats{} + static_cast<float>(y_zero);
    Ints any{};
    auto block = [&](const I* s, const I* z, const Scale* sc, Q* out, uint8_t* m) {
      Ints rounded[4], marked[4];
      for (int v = 0; v < 4; ++v) {
        Shorts sv;
        std::memcpy(&sv, s + v * kLength, sizeof sv);
        Ints difference = __builtin_convertvector(sv, Ints) - static_cast<int32_t>(zero_sum_all);
        Floats scale_v = Floats{} + scale_all;
        if constexpr (kPerValue) {
          Shorts zv;
          std::memcpy(&zv, z + v * kLength, sizeof zv);
          difference -= __builtin_convertvector(zv, Ints);
          std::memcpy(&scale_v, sc + v * kLength, sizeof scale_v);
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
  auto one = [&](int64_t i, int64_t c, int64_t valid) {
    const int64_t e = i * channels + c;
    y[e] = static_cast<Q>(r.settled(static_cast<int64_t>(sums[e]) - r.x_zero_point * valid, valid,
                                    [&] { return ort(i, c); }));
  };
  if (channels == 1) {
    for_each_marked(mark, n, [&](int64_t i) { one(i, 0, valid_of(i)); });
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!any_marked(mark + i * channels, channels)) continue;
    const int64_t valid = valid_of(i);
    for_each_marked(mark + i * channels, channels, [&](int64_t c) { one(i, c, valid); });
  }
}

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
