// The kernels, written once as templates over element type and reduction. Included by kernels_<isa>.cc with
// ONNX_POOLS_ISA naming the namespace; each of those files is compiled with its own instruction-set flags.
// Everything here has internal linkage (see dtypes.h) and allocates only through ScratchBuffer.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "dtypes.h"
#include "kernels.h"

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#define ONNX_POOLS_STR2(x) #x
#define ONNX_POOLS_STR(x) ONNX_POOLS_STR2(x)

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

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

// ---- |x|^p and its inverse ------------------------------------------------------------------------------

template <int P>
struct IntegerPower {
  template <class A>
  A operator()(A v) const {
    const A a = v < 0 ? -v : v;  // NaN passes through
    A r = a;
    for (int k = 1; k < P; ++k) r *= a;
    return r;
  }
};

struct RealPower {
  double p;
  template <class A>
  A operator()(A v) const {
    return static_cast<A>(std::pow(std::fabs(v), static_cast<A>(p)));
  }
};

// Calls fn with the |x|^p functor matching lp (whole p from 1 to 4 get unrolled fast paths).
template <class Fn>
void with_power(const LpNorm& lp, Fn&& fn) {
  switch (lp.integer_p) {
    case 1: return fn(IntegerPower<1>{});
    case 2: return fn(IntegerPower<2>{});
    case 3: return fn(IntegerPower<3>{});
    case 4: return fn(IntegerPower<4>{});
    default: return fn(RealPower{lp.p});
  }
}

inline double lp_root(double sum, const LpNorm& lp) {
  switch (lp.integer_p) {
    case 1: return sum;
    case 2: return std::sqrt(sum);
    case 3: return std::cbrt(sum);
    default: return std::pow(sum, 1.0 / lp.p);
  }
}

// Cube root of a float window sum, division-free so the compiler vectorises it (std::cbrt is a scalar call): a
// bit-level guess of v^(-1/3) within ~10%, Newton steps for the inverse root in double (each squares the error;
// five reach double rounding), then cbrt(v) = v * r^2. Meaningful for positive normal v; others are recomputed.
inline float cube_root(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits = 0x54a21d2au - bits / 3;  // exponent * (-1/3), re-biased
  float guess;
  std::memcpy(&guess, &bits, sizeof guess);
  const double d = v;
  double r = guess;
  for (int step = 0; step < 5; ++step) r = r * (4.0 - d * r * r * r) * (1.0 / 3.0);
  return static_cast<float>(d * r * r);
}
inline double cube_root(double v) { return std::cbrt(v); }

// A sum of |x|^p is trusted when it neither overflowed nor sank to where underflowed terms could matter;
// otherwise the window is recomputed scaled by its largest magnitude, in double.
template <class A>
inline bool lp_sum_trusted(double sum) {
  constexpr double tiny = std::is_same_v<A, float> ? 0x1p-80 : 0x1p-900;
  return sum >= tiny && sum <= std::numeric_limits<double>::max();
}
// The same test on a window sum still in the accumulator type (compared in that type, so loops vectorise).
template <class A>
inline bool window_sum_trusted(A sum) {
  constexpr A tiny = static_cast<A>(std::is_same_v<A, float> ? 0x1p-80 : 0x1p-900);
  return (sum >= tiny) & (sum <= std::numeric_limits<A>::max());  // no branch: NaN fails both
}

// 2^e as two factors of the accumulator type (one alone cannot reach a float's subnormals): v * first * second
// is exact while the products stay normal.
template <class A>
struct PowerOfTwo {
  A first, second;
  explicit PowerOfTwo(int e) {
    constexpr int limit = std::numeric_limits<A>::max_exponent - 1;
    const int step = e > limit ? limit : (e < -limit ? -limit : e);
    first = static_cast<A>(std::ldexp(1.0, step));
    second = static_cast<A>(std::ldexp(1.0, e - step));
  }
};

// Multiplies n values by 2^e.
template <class A>
void scale_by_power_of_two(A* v, int64_t n, int e) {
  const PowerOfTwo<A> f(e);
  for (int64_t i = 0; i < n; ++i) v[i] = v[i] * f.first * f.second;
}

// The largest |x| of n elements (NaN ignored), as the accumulator type. Kept in lanes so it compiles to vector
// compares: a scalar compare of a subnormal takes a microcode assist on some x86 cores (about 30x slower here),
// and this runs exactly when the data is subnormal.
template <class T>
AccOf<T> largest_magnitude(const T* x, int64_t n) {
  using A = AccOf<T>;
  A buffer[kBlock];
  A lanes[kLanes] = {};
  for (int64_t off = 0; off < n; off += kBlock) {
    const int64_t count = min_of(kBlock, n - off);
    const A* a = acc_view(x + off, buffer, count);
    int64_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const A v = std::fabs(a[i + l]);
        lanes[l] = v > lanes[l] ? v : lanes[l];  // NaN compares false: ignored
      }
    }
    for (int l = 0; i + l < count; ++l) {
      const A v = std::fabs(a[i + l]);
      lanes[l] = v > lanes[l] ? v : lanes[l];
    }
  }
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] = lanes[l + width] > lanes[l] ? lanes[l + width] : lanes[l];
  }
  return lanes[0];
}

// The exponent e that brings m to [1, 2) as m * 2^e, or 0 when m is 0, inf or NaN.
template <class A>
int normalising_exponent(A m) {
  return (m > 0 && std::isfinite(m)) ? -std::ilogb(m) : 0;
}

// max|x| * (sum (|x|/max|x|)^p)^(1/p) over the elements visit() produces: safe from overflow and underflow.
template <class Visit>
double lp_scaled(Visit&& visit, const LpNorm& lp) {
  double largest = 0;
  bool nan = false;
  visit([&](double v) {
    const double a = std::fabs(v);
    if (a != a) nan = true;
    else if (a > largest) largest = a;
  });
  if (nan) return std::numeric_limits<double>::quiet_NaN();
  if (largest == 0 || std::isinf(largest)) return largest;
  double sum = 0;
  with_power(lp, [&](auto power) { visit([&](double v) { sum += power(v / largest); }); });
  return largest * lp_root(sum, lp);
}

// A small fractional p (possible with version 1's FLOAT p) magnifies the rounding of each |x|^p by 1/p in the
// root, so every window takes the scaled double path: exact for one-element windows whatever p, and within
// double rounding times 1/p otherwise.
inline bool needs_scaled_lp(const LpNorm& lp) { return lp.integer_p == 0 && lp.p < 0.25; }

// ---- global pools -----------------------------------------------------------------------------------------

// Partial sums folded pairwise (cheap, and as accurate as a sequential fold), then widened to double.
template <class A>
double fold_lanes(A* lanes) {
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return static_cast<double>(lanes[0]);
}

template <class A, class Map>
double mapped_sum_block(const A* a, int64_t n, Map map) {
  if (n < 2 * kLanes) {  // short channels: a lane array would cost more to fold than to fill
    A s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      s0 += map(a[i]);
      s1 += map(a[i + 1]);
      s2 += map(a[i + 2]);
      s3 += map(a[i + 3]);
      s4 += map(a[i + 4]);
      s5 += map(a[i + 5]);
      s6 += map(a[i + 6]);
      s7 += map(a[i + 7]);
    }
    A tail = 0;
    for (; i < n; ++i) tail += map(a[i]);
    return static_cast<double>(((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + tail);
  }
  A lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += map(a[i + l]);
  }
  for (int l = 0; i + l < n; ++l) lanes[l] += map(a[i + l]);  // the tail, spread over the lanes
  return fold_lanes(lanes);
}

struct Identity {
  template <class A>
  A operator()(A v) const { return v; }
};

template <class A>
double sum_block(const A* a, int64_t n) { return mapped_sum_block(a, n, Identity{}); }

template <class A, class Power>
double power_sum_block(const A* a, int64_t n, Power power) { return mapped_sum_block(a, n, power); }

// NaN is sticky: once a lane holds NaN no comparison replaces it, as numpy's max propagates NaN.
template <class A>
inline A max_step(A m, A v) { return (v > m || v != v) ? v : m; }

// 64-byte vectors of the accumulator type (GCC vector extensions: one zmm register with AVX-512, split into
// narrower registers by the other builds). Used where the compiler will not vectorise a NaN-aware max by itself.
template <class A>
struct Vector64;
template <>
struct Vector64<float> {
  typedef float Value __attribute__((vector_size(64)));
  typedef int32_t Mask __attribute__((vector_size(64)));
  static constexpr int kLength = 16;
};
template <>
struct Vector64<double> {
  typedef double Value __attribute__((vector_size(64)));
  typedef int64_t Mask __attribute__((vector_size(64)));
  static constexpr int kLength = 8;
};

// Short channels (one to a few vectors, e.g. 7x7): per channel, the fixed cost of folding lanes decides, and only
// intrinsics give a cheap fold. The last load overlaps the previous one instead of a scalar tail (max is
// idempotent). Returns false when this build has no such path for A or n is outside its range.
// (GCC 12's own _mm512_reduce_max_* trips -Wmaybe-uninitialized inside its header.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <class A>
inline bool max_short(const A* a, int64_t n, A& result) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<A, float>) {
    if (n < 16 || n > 128) return false;
    __m512 m = _mm512_loadu_ps(a);
    __mmask16 nan = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q);
    for (int64_t i = 16; i < n; i += 16) {
      const __m512 v = _mm512_loadu_ps(a + (i + 16 <= n ? i : n - 16));
      nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      m = _mm512_max_ps(m, v);
    }
    if (nan) return false;
    result = _mm512_reduce_max_ps(m);
    return true;
  } else {
    if (n < 8 || n > 64) return false;
    __m512d m = _mm512_loadu_pd(a);
    __mmask8 nan = _mm512_cmp_pd_mask(m, m, _CMP_UNORD_Q);
    for (int64_t i = 8; i < n; i += 8) {
      const __m512d v = _mm512_loadu_pd(a + (i + 8 <= n ? i : n - 8));
      nan |= _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q);
      m = _mm512_max_pd(m, v);
    }
    if (nan) return false;
    result = _mm512_reduce_max_pd(m);
    return true;
  }
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<A, float>) {
    if (n < 8 || n > 64) return false;
    __m256 m = _mm256_loadu_ps(a);
    __m256 nan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
    for (int64_t i = 8; i < n; i += 8) {
      const __m256 v = _mm256_loadu_ps(a + (i + 8 <= n ? i : n - 8));
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m = _mm256_max_ps(m, v);
    }
    if (_mm256_movemask_ps(nan)) return false;
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    result = _mm_cvtss_f32(h);
    return true;
  } else {
    (void)a;
    (void)n;
    (void)result;
    return false;
  }
#else
  (void)a;
  (void)n;
  (void)result;
  return false;
#endif
}
#pragma GCC diagnostic pop

// max(running, a[0..n)), NaN if any is NaN. Four vectors of running maxima plus a "saw NaN" mask: a plain compare
// and select per element, where a sticky-NaN select would chain three.
template <class A>
A max_block(const A* a, int64_t n, A running) {
  using V = typename Vector64<A>::Value;
  using M = typename Vector64<A>::Mask;
  constexpr int N = Vector64<A>::kLength;
  if (running != running) return running;
  A short_max;
  if (max_short(a, n, short_max)) return running < short_max ? short_max : running;  // no NaN in either
  int64_t i = 0;
  if (n >= N) {
    const V start = V{} + running;
    V m[4] = {start, start, start, start};
    M nan = {};
    for (; i + 4 * N <= n; i += 4 * N) {
      for (int k = 0; k < 4; ++k) {
        V v;
        std::memcpy(&v, a + i + k * N, sizeof v);
        m[k] = v > m[k] ? v : m[k];
        nan |= v != v;
      }
    }
    for (; i + N <= n; i += N) {
      V v;
      std::memcpy(&v, a + i, sizeof v);
      m[0] = v > m[0] ? v : m[0];
      nan |= v != v;
    }
    bool any_nan = false;
    for (int l = 0; l < N; ++l) any_nan |= nan[l] != 0;
    if (any_nan) {  // rare: the first NaN, as the sequential definition gives
      for (int64_t j = 0; j < i; ++j)
        if (a[j] != a[j]) return a[j];
    }
    for (int k = 1; k < 4; ++k) m[0] = m[k] > m[0] ? m[k] : m[0];
    for (int l = 0; l < N; ++l) running = running < m[0][l] ? m[0][l] : running;  // no NaN left: a plain max
  }
  for (; i < n; ++i) running = max_step(running, a[i]);
  return running;
}

template <class T, Reduction R>
void global_pool(const void* xv, void* yv, int64_t channels, int64_t size, const LpNorm& lp) {
  using A = AccOf<T>;
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  A buffer[kBlock];
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * size;
    double result = 0;
    if constexpr (R == Reduction::Average) {
      double total = 0;
      for (int64_t off = 0; off < size; off += kBlock) {
        const int64_t n = min_of(kBlock, size - off);
        total += sum_block(acc_view(xc + off, buffer, n), n);
      }
      if (!std::isfinite(total)) {  // float lanes can overflow though the mean is finite: redo in double
        total = 0;
        for (int64_t i = 0; i < size; ++i) total += static_cast<double>(to_acc<A>(xc[i]));
      }
      result = total / static_cast<double>(size);
    } else if constexpr (R == Reduction::Max) {
      A running = -std::numeric_limits<A>::infinity();
      for (int64_t off = 0; off < size; off += kBlock) {
        const int64_t n = min_of(kBlock, size - off);
        running = max_block(acc_view(xc + off, buffer, n), n, running);
      }
      result = running;
    } else {
      auto exact = [&] {
        return lp_scaled([&](auto&& f) { for (int64_t i = 0; i < size; ++i) f(static_cast<double>(to_acc<A>(xc[i]))); }, lp);
      };
      // sum over [begin, end) of |x * 2^e|^p, the scaling inside the same loop
      auto power_total = [&](int e, int64_t begin, int64_t end) {
        double total = 0;
        const PowerOfTwo<A> f(e);
        with_power(lp, [&](auto power) {
          for (int64_t off = begin; off < end; off += kBlock) {
            const int64_t n = min_of(kBlock, end - off);
            const A* a = acc_view(xc + off, buffer, n);
            if (e == 0) total += power_sum_block(a, n, power);
            else if (f.second == 1) total += mapped_sum_block(a, n, [&](A v) { return power(v * f.first); });
            else total += mapped_sum_block(a, n, [&](A v) { return power(v * f.first * f.second); });
          }
        });
        return total;
      };
      if (needs_scaled_lp(lp)) {
        result = exact();
      } else {
        // The first elements tell whether the channel is subnormal or huge; if so it is summed scaled by 2^e, with e
        // from the first block's largest magnitude, in one pass. (The probe is short, so data that needs scaling
        // is not summed twice.) Only if that still leaves the total untrusted (the magnitudes vary across the
        // channel) is e taken from the whole channel, and last the exact path.
        const int64_t first = min_of(int64_t{kLanes}, size);
        int e = 0;
        double total = power_total(0, 0, first);
        if (lp_sum_trusted<A>(total)) {
          total += power_total(0, first, size);
        } else {
          e = normalising_exponent(largest_magnitude(xc, min_of(kBlock, size)));
          total = power_total(e, 0, size);
        }
        if (!lp_sum_trusted<A>(total)) {
          const int channel_e = normalising_exponent(largest_magnitude(xc, size));
          if (channel_e != e) {
            e = channel_e;
            total = power_total(e, 0, size);
          }
        }
        result = lp_sum_trusted<A>(total) ? std::ldexp(lp_root(total, lp), -e) : exact();
      }
    }
    y[c] = from_acc<T>(result);
  }
}

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

template <class T>
void lp_pool(const void* xv, void* yv, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  using A = AccOf<T>;
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  const int64_t scratch = max_of(g.largest_intermediate, g.in_size);
  ScratchBuffer memory(sizeof(A) * static_cast<size_t>(3 * scratch) + sizeof(int64_t) * kVisitScratch * g.axes.size());
  int64_t* index = memory.as<int64_t>();  // 8-byte values first, so every array is aligned for its type
  A* powers = reinterpret_cast<A*>(index + kVisitScratch * g.axes.size());
  A* buf_a = powers + scratch;
  A* buf_b = buf_a + scratch;
  const bool all_exact = needs_scaled_lp(lp);
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = x + p * g.in_size;
    T* yp = y + p * g.out_size;
    // The scaled double form of one window: for windows the fast sums cannot be trusted with (or all of them).
    auto exact = [&](int64_t i) {
      return static_cast<A>(lp_scaled([&](auto&& f) {
        visit_window(g, i, index, [&](int64_t offset) { f(static_cast<double>(to_acc<A>(xp[offset]))); });
      }, lp));
    };
    if (all_exact) {
      for (int64_t i = 0; i < g.out_size; ++i) buf_a[i] = exact(i);
      store_block(static_cast<const A*>(buf_a), yp, g.out_size);
      continue;
    }
    // The plane is multiplied by 2^e (exact) before the powers and the roots by 2^-e after: e = 0 first, and when
    // many windows come out untrusted (subnormal or huge inputs), once more with e normalising the plane's largest
    // magnitude, so such planes stay on the fast path.
    int e = 0;
    {  // a probe of the plane's first elements: if their powers already underflow or overflow, scale from the start
      const int64_t n = min_of(kBlock, g.in_size);
      const A* probe = acc_view(xp, buf_a, n);
      double probe_sum = 0;
      with_power(lp, [&](auto power) { probe_sum = power_sum_block(probe, n, power); });
      if (!lp_sum_trusted<A>(probe_sum)) e = normalising_exponent(largest_magnitude(xp, g.in_size));
    }
    A* sums;
    int64_t untrusted;
    for (int attempt = 0;; ++attempt) {
      load_block(xp, powers, g.in_size);
      if (e != 0) scale_by_power_of_two(powers, g.in_size, e);
      with_power(lp, [&](auto power) {
        for (int64_t i = 0; i < g.in_size; ++i) powers[i] = power(powers[i]);
      });
      sums = window_sums(static_cast<const A*>(powers), buf_a, buf_b, g, 1);
      untrusted = 0;
      for (int64_t i = 0; i < g.out_size; ++i) untrusted += !window_sum_trusted(sums[i]);
      if (attempt > 0 || untrusted * 16 <= g.out_size) break;
      const int plane_e = normalising_exponent(largest_magnitude(xp, g.in_size));
      if (plane_e == e) break;
      e = plane_e;
    }
    // Roots in place, then the rare untrusted windows again, scaled.
    A* roots = sums == buf_a ? buf_b : buf_a;
    if (lp.integer_p == 1) {
      for (int64_t i = 0; i < g.out_size; ++i) roots[i] = sums[i];
    } else if (lp.integer_p == 2) {
      for (int64_t i = 0; i < g.out_size; ++i) roots[i] = std::sqrt(sums[i]);
    } else if (lp.integer_p == 3) {
      for (int64_t i = 0; i < g.out_size; ++i) roots[i] = cube_root(sums[i]);
    } else if (lp.integer_p == 4) {
      for (int64_t i = 0; i < g.out_size; ++i) roots[i] = std::sqrt(std::sqrt(sums[i]));
    } else {
      for (int64_t i = 0; i < g.out_size; ++i) roots[i] = static_cast<A>(lp_root(sums[i], lp));
    }
    if (e != 0) scale_by_power_of_two(roots, g.out_size, -e);
    if (untrusted > 0) {
      for (int64_t i = 0; i < g.out_size; ++i) {
        if (!window_sum_trusted(sums[i])) roots[i] = exact(i);
      }
    }
    store_block(roots, yp, g.out_size);
  }
}

// ---- QLinearAveragePool ---------------------------------------------------------------------------------

inline double round_half_even(double v) {  // |v| < 2^51
  constexpr double magic = 6755399441055744.0;  // 1.5 * 2^52
  return (v + magic) - magic;
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
    const float element = q.x_scale * static_cast<float>(static_cast<int32_t>(x[offset * channels + c]) - q.x_zero_point);
    sum += element;
    ++valid;
  });
  const int64_t count = q.count_include_pad ? g.kernel_size : valid;
  sum /= static_cast<float>(count);
  return static_cast<double>(sum / q.y_scale + static_cast<float>(q.y_zero_point));
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
inline bool near_tie(double clamped) { return std::fabs(clamped - round_half_even(clamped)) > 0.5 - 1e-4; }

template <class Q>
inline Q to_quantized(double clamped) { return static_cast<Q>(static_cast<int32_t>(round_half_even(clamped))); }

// Elements in bounds of a window of output row `row` (all axes but the last), as a product over those axes.
inline int64_t lead_valid_count(const PoolGeometry& g, int64_t row) {
  int64_t valid = 1;
  for (int64_t a = static_cast<int64_t>(g.axes.size()) - 2; a >= 0; --a) {
    valid *= g.axes[a].valid_count(row % g.axes[a].out);
    row /= g.axes[a].out;
  }
  return valid;
}

// I: integer type of the window sums; requantisation is in double.
template <class Q, class I>
void qlinear_pool(const Q* x, Q* y, int64_t units, int64_t channels, const PoolGeometry& g, const QLinearParams& q) {
  const size_t rank = g.axes.size();
  const int64_t scratch = g.largest_intermediate * channels;  // checked by the op
  const AxisGeometry& last = g.axes[rank - 1];
  const int64_t out_last = last.out;
  const int64_t row_size = out_last * channels;
  const int64_t rows = g.out_size / out_last;  // output rows of one unit
  // NCHW planes are widened to I first: a loop over short rows of bytes is too short for the vectorised step.
  // 2-D planes with short output rows take window-by-window sums instead, several planes per step, so that the
  // requantisation below still runs over long stretches (e.g. 2x2 windows over 7x7 planes).
  const bool direct = channels == 1 && rank == 2 && out_last < kDirectColumns && g.axes[0].dilation == 1 &&
                      last.dilation == 1;
  const int64_t widened = channels == 1 && !direct ? g.in_size : 0;
  const int64_t step_units = direct ? max_of<int64_t>(1, min_of<int64_t>(units, 4096 / g.out_size)) : 1;
  const int64_t direct_sums = direct ? step_units * g.out_size + (last.in + 1) + (g.axes[0].in + 1) * out_last : 0;
  const int64_t step_rows = step_units * rows;
  // Output rows whose windows have the same element counts (all but the edge rows) are requantised as one flat
  // block of up to ~4096 values: one row alone is often shorter than the vectorised loop's step.
  // (The direct path's whole step is one such block, its pattern built once below.)
  const int64_t block_rows = direct ? step_rows : max_of<int64_t>(1, min_of<int64_t>(step_rows, 4096 / row_size));
  const int64_t block_positions = block_rows * out_last;
  ScratchBuffer memory(sizeof(I) * static_cast<size_t>(2 * scratch + widened + direct_sums) +
                       (sizeof(I) + sizeof(double)) * static_cast<size_t>(block_positions + out_last) +
                       sizeof(int64_t) * (kVisitScratch * rank + static_cast<size_t>(rows)));
  // 8-byte values first (scales, then indices), then the integer arrays, so every array is aligned for its type.
  double* scales = memory.as<double>();
  int64_t* index = reinterpret_cast<int64_t*>(scales + block_positions + out_last);
  int64_t* row_lead_valid = index + kVisitScratch * rank;  // per output row of a unit: in-bounds count over the leading axes
  I* plane = reinterpret_cast<I*>(row_lead_valid + rows);
  I* step_sums = plane + widened;
  I* buf_a = step_sums + direct_sums;
  I* buf_b = buf_a + scratch;
  // Per output position of a block: x_zero_point * elements in the window, and x_scale / (y_scale * count). Two
  // of them, so the interior rows' block is built once per call and the edge rows, one at a time, use the other.
  struct Pattern {
    I* zero_sum;
    double* scale;
    int64_t lead_valid = -1;  // the leading axes' in-bounds count it was made for
    int64_t rows = 0;         // rows filled
  } bulk, edge;
  bulk.zero_sum = buf_b + scratch;
  edge.zero_sum = bulk.zero_sum + block_positions;
  bulk.scale = scales;
  edge.scale = bulk.scale + block_positions;
  for (int64_t r = 0; r < rows; ++r) row_lead_valid[r] = lead_valid_count(g, r);
  const double y_zero = static_cast<double>(q.y_zero_point);
  const double ratio = static_cast<double>(q.x_scale) / static_cast<double>(q.y_scale);
  auto fill_row = [&](I* zero_sum, double* scale, int64_t lead_valid) {
    for (int64_t j = 0; j < out_last; ++j) {
      const int64_t valid = lead_valid * last.valid_count(j);
      const int64_t count = q.count_include_pad ? g.kernel_size : valid;
      zero_sum[j] = static_cast<I>(q.x_zero_point * valid);
      scale[j] = count == 0 ? 0.0 : ratio / static_cast<double>(count);
    }
  };
  if (direct) {  // small planes: the pattern of one plane, edge rows included, repeated for a whole step
    for (int64_t r = 0; r < rows; ++r) fill_row(bulk.zero_sum + r * out_last, bulk.scale + r * out_last, row_lead_valid[r]);
    for (int64_t k = 1; k < step_units; ++k) {
      std::memcpy(bulk.zero_sum + k * g.out_size, bulk.zero_sum, sizeof(I) * static_cast<size_t>(g.out_size));
      std::memcpy(bulk.scale + k * g.out_size, bulk.scale, sizeof(double) * static_cast<size_t>(g.out_size));
    }
  }
  auto pattern_for = [&](int64_t lead_valid, int64_t n_rows) -> const Pattern& {
    Pattern& p = n_rows > 1 ? bulk : edge;
    if (p.lead_valid != lead_valid) {
      fill_row(p.zero_sum, p.scale, lead_valid);
      p.lead_valid = lead_valid;
      p.rows = 1;
    }
    for (; p.rows < n_rows; ++p.rows) {
      std::memcpy(p.zero_sum + p.rows * out_last, p.zero_sum, sizeof(I) * static_cast<size_t>(out_last));
      std::memcpy(p.scale + p.rows * out_last, p.scale, sizeof(double) * static_cast<size_t>(out_last));
    }
    return p;
  };

  for (int64_t u = 0; u < units; u += step_units) {
    const int64_t n_units = min_of(step_units, units - u);
    const Q* xu = x + u * g.in_size * channels;
    Q* yu = y + u * g.out_size * channels;
    const I* sums;
    if (direct) {
      for (int64_t k = 0; k < n_units; ++k) {
        direct_window_sums_2d(xu + k * g.in_size, step_sums + k * g.out_size, g, step_sums + step_units * g.out_size);
      }
      sums = step_sums;
    } else if (channels == 1) {
      for (int64_t i = 0; i < g.in_size; ++i) plane[i] = static_cast<I>(xu[i]);
      sums = window_sums(static_cast<const I*>(plane), buf_a, buf_b, g, 1);
    } else {
      sums = window_sums(xu, buf_a, buf_b, g, channels);
    }
    // Requantises output rows [row, row + n_rows) of this step, zero_sum and scale per output position.
    auto requantise = [&](int64_t row, int64_t n_rows, const I* zero_sum, const double* scale) {
      const int64_t positions = n_rows * out_last;
      const I* s = sums + row * row_size;
      Q* yb = yu + row * row_size;
      // y = round((sum - zero_sum) * x_scale / (count * y_scale) + y_zero_point), counting near-ties on the way.
      int64_t ties = 0;
      if (channels == 1) {
        for (int64_t i = 0; i < positions; ++i) {
          const double v = clamp_to<Q>(static_cast<double>(s[i] - zero_sum[i]) * scale[i] + y_zero);
          ties += near_tie(v);
          yb[i] = to_quantized<Q>(v);
        }
      } else {
        for (int64_t i = 0; i < positions; ++i) {
          const I zs = zero_sum[i];
          const double sc = scale[i];
          const I* si = s + i * channels;
          Q* yi = yb + i * channels;
          for (int64_t c = 0; c < channels; ++c) {
            const double v = clamp_to<Q>(static_cast<double>(si[c] - zs) * sc + y_zero);
            ties += near_tie(v);
            yi[c] = to_quantized<Q>(v);
          }
        }
      }
      if (ties > 0) {
        for (int64_t e = 0; e < positions * channels; ++e) {
          const int64_t i = e / channels;
          const double v = clamp_to<Q>(static_cast<double>(s[e] - zero_sum[i]) * scale[i] + y_zero);
          if (near_tie(v)) {
            const int64_t r = row + i / out_last;  // the unit's row, and the unit
            const Q* x_unit = xu + (r / rows) * g.in_size * channels;
            const int64_t out_index = (r % rows) * out_last + i % out_last;
            const double ort_value = ort_float_value(x_unit, g, channels, e % channels, out_index, q, index);
            yb[e] = to_quantized<Q>(clamp_to<Q>(ort_value));
          }
        }
      }
    };
    const int64_t unit_rows = n_units * rows;  // the rows of consecutive units follow one another
    if (direct) {
      requantise(0, unit_rows, bulk.zero_sum, bulk.scale);
      continue;
    }
    for (int64_t row = 0; row < unit_rows;) {
      const int64_t lead_valid = row_lead_valid[row % rows];
      int64_t n_rows = 1;
      while (n_rows < block_rows && row + n_rows < unit_rows && row_lead_valid[(row + n_rows) % rows] == lead_valid) {
        ++n_rows;
      }
      const Pattern& pattern = pattern_for(lead_valid, n_rows);
      requantise(row, n_rows, pattern.zero_sum, pattern.scale);
      row += n_rows;
    }
  }
}

// Window sums of up to 2^23 bytes fit int32; larger kernels take int64. Requantisation is in double: a float
// product misplaces values within ~1e-7 of a rounding tie, which real scales hit often.
template <class Q>
void qlinear_dispatch(const void* x, void* y, int64_t units, int64_t channels, const PoolGeometry& g,
                      const QLinearParams& q) {
  if (g.kernel_size <= (1 << 23)) {
    qlinear_pool<Q, int32_t>(static_cast<const Q*>(x), static_cast<Q*>(y), units, channels, g, q);
  } else {
    qlinear_pool<Q, int64_t>(static_cast<const Q*>(x), static_cast<Q*>(y), units, channels, g, q);
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

template <class T>
void fill_float_type(KernelTable& k, FloatType type) {
  const int t = static_cast<int>(type);
  k.global_pool[static_cast<int>(Reduction::Average)][t] = &global_pool<T, Reduction::Average>;
  k.global_pool[static_cast<int>(Reduction::Max)][t] = &global_pool<T, Reduction::Max>;
  k.global_pool[static_cast<int>(Reduction::Lp)][t] = &global_pool<T, Reduction::Lp>;
  k.lp_pool[t] = &lp_pool<T>;
}

}  // namespace

const KernelTable& table() {
  static const KernelTable instance = [] {
    KernelTable k{};
    k.isa = ONNX_POOLS_STR(ONNX_POOLS_ISA);
    fill_float_type<float>(k, FloatType::Float);
    fill_float_type<double>(k, FloatType::Double);
    fill_float_type<Float16>(k, FloatType::Float16);
    fill_float_type<BFloat16>(k, FloatType::BFloat16);
    k.qlinear_nchw[static_cast<int>(QuantType::UInt8)] = &qlinear_nchw<uint8_t>;
    k.qlinear_nchw[static_cast<int>(QuantType::Int8)] = &qlinear_nchw<int8_t>;
    k.qlinear_nhwc[static_cast<int>(QuantType::UInt8)] = &qlinear_nhwc<uint8_t>;
    k.qlinear_nhwc[static_cast<int>(QuantType::Int8)] = &qlinear_nhwc<int8_t>;
    return k;
  }();
  return instance;
}

}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
