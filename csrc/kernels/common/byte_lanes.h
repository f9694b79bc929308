// Lanes of bytes (int8 or uint8) widened to int16 and int32 and narrowed back, on GCC's vector extensions, with the
// conversions GCC's generic code does lane by lane on x86-64 done by the instruction that does them at once. 8
// lanes of int32 with AVX2 (the AVX-512 build too: the same, tested, code), 4 otherwise (SSE2, NEON); the AVX-512
// build adds twice as wide vectors (Wide*) for the loops that step 32 values at a time.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/common/per_isa.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

template <class Q>
struct ByteLanes {
#if defined(__AVX2__)
  static constexpr int kLength = 8;
#else
  static constexpr int kLength = 4;
#endif
  typedef int32_t Ints __attribute__((vector_size(kLength * 4)));
  typedef float Floats __attribute__((vector_size(kLength * 4)));
  typedef int16_t Shorts __attribute__((vector_size(kLength * 4)));      // twice the lanes, as wide as Ints
  typedef int32_t HalfInts __attribute__((vector_size(kLength * 2)));    // half of Ints' lanes
  typedef double HalfDoubles __attribute__((vector_size(kLength * 4)));  // as many, as wide as Ints
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
#elif defined(__SSE2__)  // GCC's generic conversion loads and shuffles each half twice
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return Shorts(std::is_signed_v<Q> ? _mm_srai_epi16(_mm_unpacklo_epi8(b, b), 8)
                                      : _mm_unpacklo_epi8(b, _mm_setzero_si128()));
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

  // The high halves of the unsigned products of the lanes of a by m.
  static Shorts high_product(Shorts a, uint16_t m) {
#if defined(__AVX2__)
    return Shorts(_mm256_mulhi_epu16(__m256i(a), _mm256_set1_epi16(static_cast<int16_t>(m))));
#else
    typedef uint16_t UShorts __attribute__((vector_size(kLength * 4)));
    typedef uint32_t Wide __attribute__((vector_size(kLength * 8)));
    return __builtin_convertvector((__builtin_convertvector(UShorts(a), Wide) * m) >> 16, Shorts);
#endif
  }
  // Two vectors of Shorts narrowed to bytes, saturated to Q's range.
  static void narrow_shorts(Shorts a, Shorts b, Q* out) {
#if defined(__AVX2__)
    const __m256i ab =
        std::is_signed_v<Q> ? _mm256_packs_epi16(__m256i(a), __m256i(b)) : _mm256_packus_epi16(__m256i(a), __m256i(b));
    const __m256i ordered = _mm256_permute4x64_epi64(ab, 0xd8);  // per 128-bit half: a, b
    std::memcpy(out, &ordered, sizeof ordered);
#else
    const Shorts lo = Shorts{} + std::numeric_limits<Q>::min(), hi = Shorts{} + std::numeric_limits<Q>::max();
    a = a < lo ? lo : a > hi ? hi : a;
    b = b < lo ? lo : b > hi ? hi : b;
    const WideBytes parts[2] = {__builtin_convertvector(a, WideBytes), __builtin_convertvector(b, WideBytes)};
    std::memcpy(out, parts, sizeof parts);
#endif
  }

#if defined(__AVX512BW__)
  // 16 lanes of int32 and float: a vector of Shorts widened at once, and narrowed back (whole values within Q's
  // range) two at a time; the masked forms, as GCC 12's unmasked ones warn of their undefined source
  typedef int32_t WideInts __attribute__((vector_size(64)));
  typedef float WideFloats __attribute__((vector_size(64)));
  static WideFloats wide_floats_at(const float* p) { return _mm512_loadu_ps(p); }
  static void narrow_wide(WideInts a, WideInts b, Q* out) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_maskz_cvtepi32_epi8(~0, __m512i(a)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_maskz_cvtepi32_epi8(~0, __m512i(b)));
  }
  static bool any(WideInts m) { return _mm512_test_epi32_mask(__m512i(m), __m512i(m)) != 0; }
  // Whole values beyond Q's range narrowed to bytes saturated, 16 + 16 of them (uint8: negatives to 0 first, as
  // the unsigned narrowing reads its lanes unsigned)
  static void narrow_wide_saturated(WideInts a, WideInts b, Q* out) {
    if constexpr (std::is_signed_v<Q>) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_maskz_cvtsepi32_epi8(~0, __m512i(a)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_maskz_cvtsepi32_epi8(~0, __m512i(b)));
    } else {
      const __m512i zero = _mm512_setzero_si512();
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                       _mm512_maskz_cvtusepi32_epi8(~0, _mm512_maskz_max_epi32(~0, __m512i(a), zero)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16),
                       _mm512_maskz_cvtusepi32_epi8(~0, _mm512_maskz_max_epi32(~0, __m512i(b), zero)));
    }
  }

  // 32 lanes of int16: twice the Shorts at one instruction each where a loop's step is 32 values
  typedef int16_t WideShorts __attribute__((vector_size(64)));
  typedef WideShorts WideShortsAt __attribute__((aligned(1), may_alias));
  static constexpr int kWideShorts = 32;
  static WideShorts wide_shorts_at(const int16_t* p) { return *reinterpret_cast<const WideShortsAt*>(p); }
  static void store(int16_t* p, WideShorts v) { *reinterpret_cast<WideShortsAt*>(p) = v; }
  static WideShorts widened_wide_shorts(const Q* p) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return WideShorts(std::is_signed_v<Q> ? _mm512_maskz_cvtepi8_epi16(~0, b) : _mm512_maskz_cvtepu8_epi16(~0, b));
  }
  // The lower and upper 16 lanes of s, sign-extended.
  static WideInts low_wide_ints(WideShorts s) {
    return WideInts(_mm512_maskz_cvtepi16_epi32(~0, _mm512_maskz_extracti64x4_epi64(~0, __m512i(s), 0)));
  }
  static WideInts high_wide_ints(WideShorts s) {
    return WideInts(_mm512_maskz_cvtepi16_epi32(~0, _mm512_maskz_extracti64x4_epi64(~0, __m512i(s), 1)));
  }
  // The high halves of the unsigned products of the lanes of a by m.
  static WideShorts high_product(WideShorts a, uint16_t m) {
    return WideShorts(_mm512_mulhi_epu16(__m512i(a), _mm512_set1_epi16(static_cast<int16_t>(m))));
  }
  // 32 lanes narrowed to bytes, saturated to Q's range.
  static void narrow_shorts(WideShorts v, Q* out) {
    const __m256i bytes = std::is_signed_v<Q> ? _mm512_maskz_cvtsepi16_epi8(~0, __m512i(v))
                                              : _mm512_maskz_cvtusepi16_epi8(
                                                    ~0, _mm512_maskz_max_epi16(~0, __m512i(v), _mm512_setzero_si512()));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
  }
#endif

  // value clamped to Q's range (never NaN), by maxps / minps where there are (GCC's selects blend);
  // F: Floats, or WideFloats where there are
  template <class F>
  static F clamped(F value) {
    const F qmin = F{} + static_cast<float>(std::numeric_limits<Q>::min());
    const F qmax = F{} + static_cast<float>(std::numeric_limits<Q>::max());
#if defined(__AVX512F__)
    if constexpr (sizeof(F) == 64)
      return _mm512_mask_min_ps(value, ~0, _mm512_mask_max_ps(value, ~0, value, qmin), qmax);
#endif
#if defined(__AVX2__)
    if constexpr (sizeof(F) == 32) return _mm256_min_ps(_mm256_max_ps(value, qmin), qmax);
#elif defined(__SSE2__)
    return __builtin_ia32_minps(__builtin_ia32_maxps(value, qmin), qmax);
#else
    value = value > qmin ? value : qmin;
    return value < qmax ? value : qmax;
#endif
  }
  // A clamped value rounded half to even, as whole I (the conversion rounds in the mode the addition of 1.5 x 2^23,
  // as below, rounds in).
  template <class I, class F>
  static I rounded(F clamped_value) {
#if defined(__AVX512F__)
    if constexpr (sizeof(F) == 64) return I(_mm512_mask_cvtps_epi32(__m512i(clamped_value), ~0, clamped_value));
#endif
#if defined(__AVX2__)
    if constexpr (sizeof(F) == 32) return I(_mm256_cvtps_epi32(__m256(clamped_value)));
#elif defined(__SSE2__)
    return __builtin_ia32_cvtps2dq(clamped_value);
#else
    return __builtin_convertvector((clamped_value + 0x1.8p23f) - 0x1.8p23f, I);
#endif
  }

  // Whole values within Q's range (or 0 / 1) narrowed to bytes: one vector, or four.
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
  // The sum of n values from p. On x86 by sums of absolute differences from 0 (psadbw: 8 bytes into one 64-bit
  // lane, no widening and no overflow), int8 values biased by 128 into bytes first and the bias taken off at the
  // end; elsewhere in blocks of 2^16 values, whose sums fit 32 bits.
  static int64_t sum(const Q* p, int64_t n) {
    constexpr int kBias = std::is_signed_v<Q> ? 128 : 0;
    const uint8_t* b = reinterpret_cast<const uint8_t*>(p);
    int64_t i = 0, total = 0;
#if defined(__AVX512BW__)
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(kBias)), zero = _mm512_setzero_si512();
    __m512i acc = zero;
    for (; i + 64 <= n; i += 64) {
      acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512(b + i), bias), zero));
    }
    if (i < n) {  // the last bytes by a masked load, the lanes past n zeroed after the bias
      const __mmask64 rest = ~0ULL >> (64 - (n - i));
      const __m512i tail = _mm512_maskz_mov_epi8(rest, _mm512_xor_si512(_mm512_maskz_loadu_epi8(rest, b + i), bias));
      acc = _mm512_add_epi64(acc, _mm512_sad_epu8(tail, zero));
      i = n;
    }
    int64_t lanes[8];  // stored and added (GCC 12's reduction intrinsic warns of an undefined source)
    _mm512_storeu_si512(lanes, acc);
    for (int64_t lane : lanes) total += lane;
#elif defined(__SSE2__)
    __m128i acc = _mm_setzero_si128();
    const __m128i bias = _mm_set1_epi8(static_cast<char>(kBias)), zero = _mm_setzero_si128();
#if defined(__AVX2__)
    const __m256i bias2 = _mm256_set1_epi8(static_cast<char>(kBias)), zero2 = _mm256_setzero_si256();
    __m256i acc2 = zero2;
    for (; i + 32 <= n; i += 32) {
      const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)), bias2);
      acc2 = _mm256_add_epi64(acc2, _mm256_sad_epu8(v, zero2));
    }
    acc = _mm_add_epi64(_mm256_castsi256_si128(acc2), _mm256_extracti128_si256(acc2, 1));
#endif
    for (; i + 16 <= n; i += 16) {
      const __m128i v = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)), bias);
      acc = _mm_add_epi64(acc, _mm_sad_epu8(v, zero));
    }
    if (i + 8 <= n) {  // the upper 8 bytes of the load zero, the bias only on the lower
      const __m128i v = _mm_xor_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + i)), bias);
      acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_move_epi64(v), zero));
      i += 8;
    }
    total = _mm_cvtsi128_si64(acc) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc));
#endif
    while (i < n) {
      const int64_t end = i + ((n - i) < (1 << 16) ? (n - i) : (1 << 16));
      uint32_t block = 0;
      for (; i < end; ++i) block += static_cast<uint32_t>(b[i] ^ kBias);
      total += block;
    }
    return total - int64_t{kBias} * n;
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

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
