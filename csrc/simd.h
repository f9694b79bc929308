// SIMD layer: block conversion between elements and accumulators, vector helpers.
// Part of the per-ISA kernels: included by kernels_impl.h inside namespace onnx_pools::ONNX_POOLS_ISA::{anon},
// so everything here is compiled once per instruction set with that file's flags.
#pragma once

constexpr int64_t kBlock = 1024;  // elements converted to the accumulator type at a time
constexpr int kLanes = 64;        // independent partial results, so the compiler can fill vector registers

template <class V>
inline V min_of(V a, V b) { return b < a ? b : a; }
template <class V>
inline V max_of(V a, V b) { return a < b ? b : a; }
template <class V>
inline void fill(V* p, int64_t n, V v) {
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

typedef uint32_t __attribute__((may_alias)) aliased_u32;

// ---- element <-> accumulator conversion of blocks -------------------------------------------------------

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
  for (; i < n; ++i) dst[i] = to_float(src[i]);
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
  for (; i < n; ++i) dst[i] = to_float16(src[i]);
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

