// SIMD layer: block conversion between elements and accumulators, vector helpers.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__SSE2__) || defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(ONNX_POOLS_NEON_INTRINSICS)
#include "kernels/common/simd_neon.h"  // the neon set's intrinsics (float16 conversion)
#endif

#include "kernels/common/dtypes.h"
#include "kernels/common/element_types.h"
#include "kernels/common/per_isa.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

constexpr int64_t kBlock = 1024;  // elements converted to the accumulator type at a time

// The widest vector of this build's instruction set: 64 bytes with AVX-512, 32 with AVX2, 16 otherwise (SSE2 is
// baseline on x86-64, NEON on aarch64). Never wider: GCC splits vector types wider than the hardware's into
// scalars for some operations (a NaN-aware max became vucomiss/cmov on AVX2).
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif

// Native vectors of A (float, double, or an integer type), loaded and stored unaligned; or narrower ones, of Bytes.
template <class A, int Bytes = kVectorBytes>
struct Simd {
  static constexpr int kLength = Bytes / static_cast<int>(sizeof(A));
  typedef A Value __attribute__((vector_size(Bytes)));
  using MaskElement = std::conditional_t<
      sizeof(A) == 8, int64_t,
      std::conditional_t<sizeof(A) == 4, int32_t, std::conditional_t<sizeof(A) == 2, int16_t, int8_t>>>;
  typedef MaskElement Mask __attribute__((vector_size(Bytes)));  // all-ones where a comparison holds
  static Value load(const A* p) {
    Value v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(A* p, Value v) { std::memcpy(p, &v, sizeof v); }
  static Value splat(A a) { return Value{} + a; }
};

// A vector of Bytes / sizeof(A) lanes of A, any power-of-two width up to the native one.
template <class A, int Bytes>
struct VectorOf {
  typedef A Type __attribute__((vector_size(Bytes)));
};

// op over the lanes of v, folded in halves in registers: lane l of the lower half with lane l of the upper one,
// then again, down to one lane (op takes two vectors, or two scalars for the last step). The same operations in the
// same order as folding a stored copy of the lanes with `for width = half; width >= 1; width /= 2: lane[l] =
// op(lane[l], lane[l + width])`, without the store and the scalar reloads.
template <class V, size_t... L>
[[gnu::always_inline]] inline auto lower_half(V v, std::index_sequence<L...>) {
  return __builtin_shufflevector(v, v, L...);
}
template <class V, size_t... L>
[[gnu::always_inline]] inline auto upper_half(V v, std::index_sequence<L...>) {
  return __builtin_shufflevector(v, v, (L + sizeof...(L))...);
}
// a's lanes then b's, as one vector of twice the lanes (in registers: two narrow stores read back as one wide load
// stall)
template <class V, size_t... L>
[[gnu::always_inline]] inline auto joined_halves(V a, V b, std::index_sequence<L...>) {
  return __builtin_shufflevector(a, b, L..., (L + sizeof...(L))...);
}
template <class V, size_t... L>
[[gnu::always_inline]] inline auto even_lanes(V v, std::index_sequence<L...>) {
  return __builtin_shufflevector(v, v, (2 * L)...);
}
template <class V, size_t... L>
[[gnu::always_inline]] inline auto odd_lanes(V v, std::index_sequence<L...>) {
  return __builtin_shufflevector(v, v, (2 * L + 1)...);
}
template <class A, int Bytes, class Op>
[[gnu::always_inline]] inline A fold_halves(typename VectorOf<A, Bytes>::Type v, Op op) {
  constexpr int kHalf = Bytes / 2 / static_cast<int>(sizeof(A));
  if constexpr (kHalf == 0) {
    return v[0];
  } else if constexpr (kHalf == 1) {
    return op(v[0], v[1]);
  } else {
    return fold_halves<A, Bytes / 2>(
        op(lower_half(v, std::make_index_sequence<kHalf>{}), upper_half(v, std::make_index_sequence<kHalf>{})), op);
  }
}

// Lanes [0, r) of p and zeros from lane r on (any r); reads no element from p + r on: a masked load where the
// instruction set has one for A.
template <class A>
[[gnu::always_inline]] inline typename Simd<A>::Value load_first(const A* p, int64_t r) {
  using S = Simd<A>;
  if (r >= S::kLength) return S::load(p);
  const int lanes = r > 0 ? static_cast<int>(r) : 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<A, float>) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << lanes) - 1), p);
  } else if constexpr (std::is_same_v<A, double>) {
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << lanes) - 1), p);
  }
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<A, float>) {
    return _mm256_maskload_ps(p,
                              _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  } else if constexpr (std::is_same_v<A, double>) {
    return _mm256_maskload_pd(p, _mm256_cmpgt_epi64(_mm256_set1_epi64x(lanes), _mm256_setr_epi64x(0, 1, 2, 3)));
  }
#elif defined(__SSE2__)
  // in registers: a copy through memory and a wider reload stall on store forwarding
  if constexpr (std::is_same_v<A, float>) {
    auto pair = [p] { return _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); };
    switch (lanes) {
      case 0: return typename S::Value{};
      case 1: return _mm_load_ss(p);
      case 2: return pair();
      default: return _mm_movelh_ps(pair(), _mm_load_ss(p + 2));
    }
  } else if constexpr (std::is_same_v<A, double>) {
    return lanes == 0 ? typename S::Value{} : _mm_load_sd(p);
  }
#endif
  typename S::Value v = {};
  for (int l = 0; l < lanes; ++l) v[l] = p[l];
  return v;
}

// op over the lanes of v folded in neighbouring pairs, in registers: lane 2l with lane 2l + 1, then again, so each step
// takes two neighbouring runs of lanes, the lower one first (a scan from lane 0 that keeps the first of equal values
// is then such a fold with op keeping its first argument unless the second is greater).
template <class A, int Bytes, class Op>
[[gnu::always_inline]] inline A fold_pairs(typename VectorOf<A, Bytes>::Type v, Op op) {
  constexpr int kHalf = Bytes / 2 / static_cast<int>(sizeof(A));
  if constexpr (kHalf == 0) {
    return v[0];
  } else if constexpr (kHalf == 1) {
    return op(v[0], v[1]);
  } else {
    return fold_pairs<A, Bytes / 2>(
        op(even_lanes(v, std::make_index_sequence<kHalf>{}), odd_lanes(v, std::make_index_sequence<kHalf>{})), op);
  }
}

// Independent partial sums of a reduction: 128 bytes of them whatever the vector width (2 AVX-512, 4 AVX2 or 8
// SSE/NEON registers), folded in one fixed order, so every instruction set adds the same numbers in the same
// order and rounds identically.
template <class A>
constexpr int kLanes = 128 / static_cast<int>(sizeof(A));

template <class V>
inline V min_of(V a, V b) {
  return b < a ? b : a;
}
template <class V>
inline V max_of(V a, V b) {
  return a < b ? b : a;
}
template <class V>
inline void fill(V* p, int64_t n, V v) {
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

typedef uint32_t __attribute__((may_alias)) aliased_u32;

// ---- element <-> accumulator conversion of blocks -------------------------------------------------------

// float16 <-> float without F16C (portable x86-64, aarch64): the same results as to_float / to_float16 in
// dtypes.h, written branch-free per element so that the loops vectorise.
inline void halves_to_floats(const uint16_t* src, aliased_u32* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const int32_t h = src[i];
    const int32_t magnitude = h & 0x7fff;                    // signed compares below: SSE2 has no unsigned ones
    const int32_t normal = (magnitude << 13) + (112 << 23);  // exponent re-biased from 15 to 127
    const int32_t special = (magnitude << 13) | 0x7f800000;  // inf / NaN
    const int32_t subnormal = static_cast<int32_t>(float_to_bits(static_cast<float>(magnitude) * 0x1p-24f));
    const int32_t bits = magnitude < 0x400 ? subnormal : (magnitude >= 0x7c00 ? special : normal);
    dst[i] = static_cast<uint32_t>((h & 0x8000) << 16) | static_cast<uint32_t>(bits);
  }
}

inline void floats_to_halves(const aliased_u32* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = src[i] & 0x7fffffffu;
    const uint32_t sign = (src[i] >> 16) & 0x8000u;
    const uint32_t nan = 0x7e00u | ((u >> 13) & 0x3ffu);
    // below the smallest normal half: a multiple of 2^-24, rounded to nearest even by the 2^23 trick
    const float scaled = bits_to_float(u) * 16777216.0f;
    const uint32_t subnormal = static_cast<uint32_t>(static_cast<int32_t>((scaled + 8388608.0f) - 8388608.0f));
    const uint32_t normal = (u + 0xfffu + ((u >> 13) & 1u) - (112u << 23)) >> 13;
    const uint32_t bits = u > 0x7f800000u    ? nan
                          : u >= 0x477ff000u ? 0x7c00u  // >= 65520 rounds to inf
                          : u < 0x38800000u  ? subnormal
                                             : normal;
    dst[i] = static_cast<uint16_t>(sign | bits);
  }
}

template <class T>
void load_block(const T* src, AccOf<T>* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_acc<AccOf<T>>(src[i]);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own _mm512_cvtph_ps, inside its header
template <>
void load_block<Float16>(const Float16* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
#endif
#if defined(ONNX_POOLS_NEON_INTRINSICS)
  i = neon_halves_to_floats(reinterpret_cast<const uint16_t*>(src), dst, n);
#endif
  halves_to_floats(reinterpret_cast<const uint16_t*>(src + i), reinterpret_cast<aliased_u32*>(dst + i), n - i);
}
#pragma GCC diagnostic pop

template <>
void load_block<BFloat16>(const BFloat16* src, float* dst, int64_t n) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  aliased_u32* d = reinterpret_cast<aliased_u32*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
}

template <class T>
void store_block(const AccOf<T>* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = from_acc<T>(src[i]);
}

template <>
void store_block<Float16>(const float* src, Float16* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
#endif
#if defined(ONNX_POOLS_NEON_INTRINSICS)
  i = neon_floats_to_halves(src, reinterpret_cast<uint16_t*>(dst), n);
#endif
  floats_to_halves(reinterpret_cast<const aliased_u32*>(src + i), reinterpret_cast<uint16_t*>(dst + i), n - i);
}

template <>
void store_block<BFloat16>(const float* src, BFloat16* dst, int64_t n) {
  const aliased_u32* s = reinterpret_cast<const aliased_u32*>(src);
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = s[i];
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    d[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : rounded);
  }
}

// The kLanes<A> accumulators of a reduction step, loaded straight from the elements: 16-bit floats are converted in
// registers instead of through a block copy. Every loader gives the exact values load_block gives, so a sum adds the
// same numbers in the same order either way. exact() is false when a loader's fast conversion met values it does not
// cover; the caller then redoes the block through load_block.
template <class T>
struct AccLoader {  // T is its own accumulator
  using S = Simd<T>;
  static constexpr int kVectors = kLanes<T> / S::kLength;
  void load(const T* p, typename S::Value* v) {
    for (int k = 0; k < kVectors; ++k) v[k] = S::load(p + k * S::kLength);
  }
  // r < kLanes<T> elements as load takes kLanes<T>, zeros after them
  void load_tail(const T* p, int64_t r, typename S::Value* v) {
    for (int k = 0; k < kVectors; ++k) v[k] = load_first(p + k * S::kLength, r - k * S::kLength);
  }
  bool exact() const { return true; }
};

// AccLoader<T>'s values for a float or double T in vectors of Bytes < kVectorBytes: where one stream of reads from
// memory runs faster in narrower loads (AVX-512 on an AMD EPYC Zen 4: 32-byte loads read memory faster than
// 64-byte ones). The same kLanes<T> lanes, so a sum adds the same numbers in the same order.
template <class T, int Bytes>
struct NarrowLoader {
  using S = Simd<T, Bytes>;
  static constexpr int kVectors = kLanes<T> / S::kLength;
  void load(const T* p, typename S::Value* v) {
    for (int k = 0; k < kVectors; ++k) std::memcpy(&v[k], p + k * S::kLength, sizeof v[k]);
  }
  void load_tail(const T* p, int64_t r, typename S::Value* v) {  // at the end of a block only
    T padded[kLanes<T>] = {};
    std::memcpy(padded, p, static_cast<size_t>(r) * sizeof(T));
    load(padded, v);
  }
  bool exact() const { return true; }
};

// r < kLanes elements of 16-bit floats as load takes kLanes, zeros (+0) after them
template <class Loader, class T>
void load_padded(Loader& loader, const T* p, int64_t r, Simd<float>::Value* v) {
  T padded[kLanes<float>] = {};
  std::memcpy(padded, p, static_cast<size_t>(r) * sizeof(T));
  loader.load(padded, v);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own _mm512_cvtepu16_epi32, inside its header
template <>
struct AccLoader<BFloat16> {  // the bits, moved to the top half of a float
  using S = Simd<float>;
  static constexpr int kVectors = kLanes<float> / S::kLength;
  typedef uint16_t Halves __attribute__((vector_size(kVectorBytes / 2)));
  typedef uint32_t Words __attribute__((vector_size(kVectorBytes)));
  // In one widening instruction per vector where there is one (GCC splits the generic conversion of AVX2's 8 halves
  // into two 4-lane ones and an insert); with 16-byte vectors, 8 halves interleaved with zeros, below each.
  void load(const BFloat16* p, S::Value* v) {
#if defined(__AVX512F__)
    for (int k = 0; k < kVectors; ++k) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k * S::kLength));
      v[k] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
#elif defined(__AVX2__)
    for (int k = 0; k < kVectors; ++k) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k * S::kLength));
      v[k] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
#else
    if constexpr (kVectorBytes == 16) {
      typedef uint16_t Eight __attribute__((vector_size(16)));
      const Eight zero = {};
      for (int k = 0; k < kVectors; k += 2) {
        Eight h;
        std::memcpy(&h, p + k * S::kLength, sizeof h);
        v[k] = reinterpret_cast<S::Value>(__builtin_shufflevector(zero, h, 0, 8, 1, 9, 2, 10, 3, 11));
        v[k + 1] = reinterpret_cast<S::Value>(__builtin_shufflevector(zero, h, 4, 12, 5, 13, 6, 14, 7, 15));
      }
    } else {
      for (int k = 0; k < kVectors; ++k) {
        Halves h;
        std::memcpy(&h, p + k * S::kLength, sizeof h);
        v[k] = reinterpret_cast<S::Value>(__builtin_convertvector(h, Words) << 16);
      }
    }
#endif
  }
  void load_tail(const BFloat16* p, int64_t r, S::Value* v) { load_padded(*this, p, r, v); }
  bool exact() const { return true; }
#if !defined(__AVX2__)
  // load's values of 8 halves taken as 4 words, two halves each, without a shuffle: halves 0, 2, 4, 6 (the low half
  // of each word, moved up) into even, 1, 3, 5, 7 (the high half, the low one cleared) into odd
  void load_words(const BFloat16* p, S::Value& even, S::Value& odd) {
    static_assert(kVectorBytes == 16, "4 words of two halves per vector");
    typedef uint32_t Four __attribute__((vector_size(16)));
    Four w;
    std::memcpy(&w, p, sizeof w);
    even = reinterpret_cast<S::Value>(w << 16);
    odd = reinterpret_cast<S::Value>(w & 0xffff0000u);
  }
#endif
};
#pragma GCC diagnostic pop

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own _mm512_cvtph_ps, inside its header
template <>
struct AccLoader<Float16> {
  using S = Simd<float>;
  static constexpr int kVectors = kLanes<float> / S::kLength;
  void load_tail(const Float16* p, int64_t r, S::Value* v) { load_padded(*this, p, r, v); }
#if defined(__AVX512F__)
  void load(const Float16* p, S::Value* v) {
    for (int k = 0; k < kVectors; ++k)
      v[k] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k * S::kLength)));
  }
  bool exact() const { return true; }
#elif defined(__F16C__)
  void load(const Float16* p, S::Value* v) {
    for (int k = 0; k < kVectors; ++k)
      v[k] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k * S::kLength)));
  }
  bool exact() const { return true; }
#elif defined(ONNX_POOLS_NEON_INTRINSICS)
  void load(const Float16* p, S::Value* v) {
    for (int k = 0; k < kVectors; ++k) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(p + k * S::kLength);
      const float32x4_t f = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
      std::memcpy(&v[k], &f, sizeof f);
    }
  }
  bool exact() const { return true; }
#else
  // Without a conversion instruction (SSE2, 16-byte vectors): each half's bits moved into float position are its
  // value times 2^-112, zero, normal or subnormal (a float subnormal then, which the multiply makes the half's value
  // exactly), so one multiply converts it (an eighth of halves_to_floats' work). The largest magnitude seen tells
  // whether an infinity or NaN came by; the multiply takes float subnormals as zeros where denormals-are-zero is set
  // (MXCSR): in either case exact() is false.
  static_assert(kVectorBytes == 16, "the shuffles below are written for 8 halves per vector");
  typedef uint16_t Halves __attribute__((vector_size(16)));
  typedef int16_t SignedHalves __attribute__((vector_size(16)));
  typedef int32_t Words __attribute__((vector_size(16)));
  SignedHalves largest = {};  // per lane: the largest magnitude
  void load(const Float16* p, S::Value* v) {
    for (int k = 0; k < kVectors; k += 2) {
      Halves h;
      std::memcpy(&h, p + k * S::kLength, sizeof h);
      const SignedHalves magnitude = reinterpret_cast<SignedHalves>(h & 0x7fff);
      largest = magnitude > largest ? magnitude : largest;
      const Halves zero = {};
      const Words low = reinterpret_cast<Words>(__builtin_shufflevector(zero, h, 0, 8, 1, 9, 2, 10, 3, 11));
      const Words high = reinterpret_cast<Words>(__builtin_shufflevector(zero, h, 4, 12, 5, 13, 6, 14, 7, 15));
      // the arithmetic shift puts exponent and mantissa in place and copies the sign into bits 28..31, of which
      // the mask keeps bit 31
      v[k] = reinterpret_cast<S::Value>((low >> 3) & static_cast<int32_t>(0x8fffe000u)) * 0x1p112f;
      v[k + 1] = reinterpret_cast<S::Value>((high >> 3) & static_cast<int32_t>(0x8fffe000u)) * 0x1p112f;
    }
  }
  // load's values of 8 halves taken as 4 words, two halves each, without a shuffle: halves 0, 2, 4, 6 (the low
  // half of each word) into even, 1, 3, 5, 7 into odd. The low half is first moved up; then as in load.
  void load_words(const Float16* p, S::Value& even, S::Value& odd) {
    Halves h;
    std::memcpy(&h, p, sizeof h);
    const SignedHalves magnitude = reinterpret_cast<SignedHalves>(h & 0x7fff);
    largest = magnitude > largest ? magnitude : largest;
    const Words w = reinterpret_cast<Words>(h);
    even = reinterpret_cast<S::Value>(((w << 16) >> 3) & static_cast<int32_t>(0x8fffe000u)) * 0x1p112f;
    odd = reinterpret_cast<S::Value>((w >> 3) & static_cast<int32_t>(0x8fffe000u)) * 0x1p112f;
  }
  bool exact() const {
    // whether float subnormal inputs are taken as they are, not as zeros (x86's denormals-are-zero, Arm's
    // flush-to-zero, which both apply to a comparison's inputs as to a multiply's): a subnormal compared with zero at
    // run time (volatile), in any build of this portable set. A comparison, not a multiply: x86 multiplies a
    // subnormal in a microcode assist (some 100 ns), once per block.
    volatile float subnormal = 0x1p-140f;
    bool covered = subnormal != 0.0f;
    for (int l = 0; l < 8; ++l) covered &= largest[l] < 0x7c00;
    return covered;
  }
#endif
};
#pragma GCC diagnostic pop

#if defined(__SSE2__) && !defined(__AVX512F__)
// ScaledHalves' loads (both its forms below): 8 halves' bits.
struct HalvesLoad {
  typedef int16_t Halves __attribute__((vector_size(16)));
  static Halves load(const void* p) {
    Halves h;
    std::memcpy(&h, p, sizeof h);
    return h;
  }
};
#endif

#if defined(__SSE2__) && !defined(__F16C__)
// Float16 without a conversion instruction, for sums: each half's bits moved into float position are its value times
// 2^-112, subnormal halves included (as float subnormals), with no arithmetic. A sum of such values, in any order, is
// the image of the same sum of the converted values, rounded the same: every partial sum of halves is a multiple of
// 2^-24, so one below float's normal range (2^-14, scaled) is a float subnormal, exact. One multiply by 2^112 of the
// sum then gives the float sum's bits. That needs subnormals kept: kept_subnormals() reads MXCSR (denormals-are-zero,
// flush-to-zero). Infinity and NaN have no such image: finite() says whether one came by.
struct ScaledHalves : HalvesLoad {
  typedef uint16_t UnsignedHalves __attribute__((vector_size(16)));
  using V = Simd<float, 16>::Value;
  static constexpr float kScale = 0x1p112f;
  Halves largest = {};  // the largest magnitude converted
  // halves 0..3 into low, 4..7 into high
  [[gnu::always_inline]] void convert(Halves h, V& low, V& high) {
    const Halves magnitude = h & 0x7fff;
    largest = magnitude > largest ? magnitude : largest;
    const Halves top = (h >> 3) & static_cast<int16_t>(0x8fff);  // sign, exponent, the mantissa's upper 7 bits
    const Halves bottom = reinterpret_cast<Halves>(reinterpret_cast<UnsignedHalves>(h) << 13);  // mantissa's lower 3
    low = reinterpret_cast<V>(__builtin_shufflevector(bottom, top, 0, 8, 1, 9, 2, 10, 3, 11));
    high = reinterpret_cast<V>(__builtin_shufflevector(bottom, top, 4, 12, 5, 13, 6, 14, 7, 15));
  }
  // the same values from the halves' 32-bit words: halves 0, 2, 4, 6 (the low half of each word) into even, halves
  // 1, 3, 5, 7 into odd. The arithmetic shift by 3 puts a word's high half in place (exponent and mantissa in bits
  // 13..27) and copies its sign into bits 28..31, of which the mask keeps bit 31; the low half is first moved up.
  [[gnu::always_inline]] void convert_words(Halves h, V& even, V& odd) {
    typedef int32_t Words __attribute__((vector_size(16)));
    const Halves magnitude = h & 0x7fff;
    largest = magnitude > largest ? magnitude : largest;
    const Words w = reinterpret_cast<Words>(h);
    constexpr int32_t kPlaced = static_cast<int32_t>(0x8fffe000u);
    even = reinterpret_cast<V>(((w << 16) >> 3) & kPlaced);
    odd = reinterpret_cast<V>((w >> 3) & kPlaced);
  }
  bool finite() const {
    const Halves over = largest >= 0x7c00;
    return fold_halves<int16_t, 16>(over, [](auto x, auto y) { return x | y; }) == 0;
  }
  static bool kept_subnormals() {
    constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
    return (_mm_getcsr() & (kFlushToZero | kDenormalsAreZero)) == 0;
  }
};
// AccLoader<Float16>'s interface over ScaledHalves, for sums of long channels (mapped_sum_streams): the same lanes,
// in the scaled domain, so a sum times kScale is the sum of the converted values, bits included; exact() is false
// where that does not hold (an infinity or NaN came by, or subnormals are flushed).
struct ScaledHalvesLoader {
  using S = Simd<float>;
  static_assert(S::kLength == 4, "ScaledHalves converts into 4-lane vectors");
  static constexpr int kVectors = kLanes<float> / S::kLength;
  static constexpr double kScale = ScaledHalves::kScale;
  ScaledHalves halves;
  void load(const Float16* p, S::Value* v) {
    for (int k = 0; k < kVectors; k += 2) halves.convert(ScaledHalves::load(p + k * S::kLength), v[k], v[k + 1]);
  }
  void load_tail(const Float16* p, int64_t r, S::Value* v) { load_padded(*this, p, r, v); }
  // load's values taken two halves per word (ScaledHalves::convert_words)
  void load_words(const Float16* p, S::Value& even, S::Value& odd) {
    halves.convert_words(ScaledHalves::load(p), even, odd);
  }
  bool exact() const { return halves.finite() && ScaledHalves::kept_subnormals(); }
};
#elif defined(__F16C__) && !defined(__AVX512F__)
// ScaledHalves' interface over the conversion instruction (no scale; it converts every value exactly). Not with
// AVX-512, whose float path sums converted copies in 16-lane vectors, faster than ScaledHalves' users' 4 lanes.
struct ScaledHalves : HalvesLoad {
  using V = Simd<float, 16>::Value;
  static constexpr float kScale = 1;
  [[gnu::always_inline]] void convert(Halves h, V& low, V& high) {
    const __m128i bits = reinterpret_cast<__m128i>(h);
    low = _mm_cvtph_ps(bits);
    high = _mm_cvtph_ps(_mm_unpackhi_epi64(bits, bits));
  }
  bool finite() const { return true; }
  static bool kept_subnormals() { return true; }
};
#endif

// load_block's values; SSE2's float16 through the loader's conversion in registers where it covers them (a
// multiply instead of halves_to_floats' selects).
template <class T>
void convert_block(const T* src, AccOf<T>* dst, int64_t n) {
  int64_t i = 0;
#if !defined(__F16C__) && !defined(ONNX_POOLS_NEON_INTRINSICS)
  if constexpr (std::is_same_v<T, Float16>) {
    using S = Simd<float>;
    AccLoader<T> load;
    for (; i + kLanes<float> <= n; i += kLanes<float>) {
      S::Value v[AccLoader<T>::kVectors];
      load.load(src + i, v);
      for (int k = 0; k < AccLoader<T>::kVectors; ++k) S::store(dst + i + k * S::kLength, v[k]);
    }
    if (!load.exact()) i = 0;
  }
#endif
  load_block(src + i, dst + i, n - i);
}

// The accumulator view of n elements: the elements themselves when T is its own accumulator.
template <class T>
const AccOf<T>* acc_view(const T* src, AccOf<T>* buf, int64_t n) {
  if constexpr (std::is_same_v<T, AccOf<T>>) {
    return src;
  } else {
    load_block(src, buf, n);
    return buf;
  }
}

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
