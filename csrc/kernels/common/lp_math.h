// Lp numerics: |x|^p, roots, trust tests for fast sums, power-of-two scaling, the scaled exact form.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/common/dtypes.h"
#include "kernels/common/lp_norm.h"
#include "kernels/common/per_isa.h"
#include "kernels/common/simd.h"

#if defined(__FMA__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// ---- |x|^p and its inverse ------------------------------------------------------------------------------

template <int P>
struct IntegerPower {
  template <class A>  // a scalar or a native vector
  A operator()(A v) const {
    A a;
    if constexpr (P % 2 == 0) {
      a = v;  // an even power needs no |v|: v * v has the bits of |v| * |v| (rounding ignores signs), NaN alike
    } else if constexpr (std::is_floating_point_v<A>) {
      a = std::fabs(v);  // one AND when vectorised (a compare and a blend otherwise)
    } else {
      a = v < 0 ? -v : v;  // NaN passes through
    }
    A r = a;
    for (int k = 1; k < P; ++k) r *= a;
    return r;
  }
};

struct RealPower {
  double p;
  template <class A>
  A operator()(A v) const {
    if constexpr (std::is_floating_point_v<A>) {
      return static_cast<A>(std::pow(std::fabs(v), static_cast<A>(p)));
    } else {  // a native vector: std::pow has no vector form here, one lane at a time
      for (int l = 0; l < static_cast<int>(sizeof(A) / sizeof(v[0])); ++l) v[l] = (*this)(v[l]);
      return v;
    }
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

// The root matching a power functor: the inverse of |x|^p, vectorisable for whole p up to 4.
template <class A>
inline A root_for(IntegerPower<1>, A sum) {
  return sum;
}
template <class A>
inline A root_for(IntegerPower<2>, A sum) {
  return std::sqrt(sum);
}
template <class A>
inline A root_for(IntegerPower<4>, A sum) {
  return std::sqrt(std::sqrt(sum));
}

// Cube root of a float window sum, division-free so the compiler vectorises it (std::cbrt is a scalar call): a
// bit-level guess of r = v^(-1/3) within ~3%, two Newton steps for the inverse root in float (each squares the
// error: 2e-3, 1e-5), then in double, with delta = 1 - v r^3 (tiny), cbrt(v) = v r^2 (1 - delta)^(-2/3)
// = v r^2 (1 + 2/3 delta + 5/9 delta^2 + O(delta^3)), good to ~1e-15, rounded once. The steps are written
// with short dependency chains (v r and r^2 side by side): the loop is bound by their latency.
// Meaningful for positive normal v; others are recomputed.
// The loops of builds with fused multiply-adds take the faster fused_cube_root (below) instead; this form stays for
// portable x86-64 and for the few sums that one cannot vouch for.
// Checked exhaustively (every float in the trusted range [2^-80, FLT_MAX], exact integer comparison with the
// rounding midpoints): correctly rounded except for the 70 inputs of mantissa 0x1.a4c264 and exponent 3k + 1
// (e.g. 0x1.a4c264p-80 gives 0x1.7ca3dep-27; the cube root lies 2.7e-15 above the midpoint, 0x1.7ca3e0p-27
// is correct). So a cheaper root keeps today's bits iff it is correctly rounded on that range except there, where it
// must give the same value. scripts/check_cube_root.cc checks both roots below that way.
inline float cube_root(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  // exponent * (-1/3), re-biased; bits / 3 through float: off by at most 2^6 in the low bits (5e-6 relative),
  // which the Newton steps absorb, in three vector instructions instead of an integer division's multiplies
  const float third = static_cast<float>(static_cast<int32_t>(bits)) * (1.0f / 3.0f);  // |third| < 2^30
  bits = 0x54a21d2au - static_cast<uint32_t>(static_cast<int32_t>(third));
  float r;
  std::memcpy(&r, &bits, sizeof r);
  for (int step = 0; step < 2; ++step) r = (r * (1.0f / 3.0f)) * (4.0f - (v * r) * (r * r));
  const double d = v, rd = r;
  const double a = d * (rd * rd);     // v r^2, exact but for one rounding
  const double delta = 1.0 - a * rd;  // 1 - v r^3
  return static_cast<float>(a + a * (delta * ((2.0 / 3.0) + delta * (5.0 / 9.0))));
}
inline double cube_root(double v) { return std::cbrt(v); }
template <class A>
inline A root_for(IntegerPower<3>, A sum) {
  return cube_root(sum);
}
template <class A>
inline A root_for(const RealPower& power, A sum) {
  return static_cast<A>(std::pow(static_cast<double>(sum), 1.0 / power.p));
}

// ---- roots in vectorised loops: cube_root's value, faster where the build has fused multiply-adds ---------------

#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
constexpr bool kFusedCubeRoot = true;
#else
constexpr bool kFusedCubeRoot = false;  // portable x86-64: std::fma would be a library call
#endif

// cube_root(v) in float arithmetic with explicit fused multiply-adds (no conversion to double, which bounds the
// loops of cube_root), or sets unsure to 1 when it cannot vouch for that value. Same start as cube_root (|d| <= 0.105
// for d = 1 - v r^3); one step r (1 + d q(d)), q a degree-3 fit of ((1 - d)^(-1/3) - 1) / d over that range (the
// series 1/3 + 2d/9 + 14d^2/81 + ... with its coefficients adjusted: relative error below 9.3e-8 where the series cut
// there leaves 1.6e-6), gives r = v^(-1/3) to about an ulp in one step (fewer multiplies than two steps of lower
// order); y0 = v r^2 is then a few ulps off. The residual v - y0^3 is exact to ~2^-48 v (y0^2 split into
// two floats by an fma, then two fmas), and y0 + residual r^2 / 3 is rounded twice, with 1/3 widened by 2^-16
// either way (r^2 standing for 1/y0^2): far more than the error of that and of the residual, the product's rounding
// and the dropped second-order term, so when both roundings agree that float is the correctly rounded cube root.
// Checked exhaustively (scripts/check_cube_root.cc: every float in the trusted range [2^-80, FLT_MAX], scalar code
// with -mfma, the same operations a vector lane does): where not unsure (all but 4.8e-5 of them) the value is
// cube_root's, bit for bit; the 70 values where cube_root is not correctly rounded (above) are all unsure. So every
// ISA returns the same bits, and callers recompute the unsure ones with cube_root (settle_roots).
// The lanes of a float or of a native float vector as 32-bit integers and back, conversions between the two lane types
// (truncating toward zero, as static_cast), and a fused multiply-add lane by lane: fused_cube_root's operations,
// written once for scalars and vectors so that every lane does what the scalar code does.
inline uint32_t lanes_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}
inline float lanes_of_bits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
inline float lanes_to_float(uint32_t bits) { return static_cast<float>(static_cast<int32_t>(bits)); }
inline uint32_t lanes_to_bits(float v) { return static_cast<uint32_t>(static_cast<int32_t>(v)); }
inline float lanes_fma(float a, float b, float c) { return std::fma(a, b, c); }
template <class V>
using LaneBits = typename VectorOf<uint32_t, sizeof(V)>::Type;
template <class V>
using LaneInts = typename VectorOf<int32_t, sizeof(V)>::Type;
template <class V>
[[gnu::always_inline]] inline LaneBits<V> lanes_bits(V v) {
  return reinterpret_cast<LaneBits<V>>(v);
}
template <class U>
[[gnu::always_inline]] inline auto lanes_of_bits(U bits) {
  return reinterpret_cast<typename VectorOf<float, sizeof(U)>::Type>(bits);
}
template <class U>
[[gnu::always_inline]] inline auto lanes_to_float(U bits) {
  return __builtin_convertvector(reinterpret_cast<LaneInts<U>>(bits), typename VectorOf<float, sizeof(U)>::Type);
}
template <class V>
[[gnu::always_inline]] inline LaneBits<V> lanes_to_bits(V v) {
  return reinterpret_cast<LaneBits<V>>(__builtin_convertvector(v, LaneInts<V>));
}
template <class V, class B, class C>
[[gnu::always_inline]] inline V lanes_fma(V a, B b_in, C c_in) {
  auto lanes = [](auto in) __attribute__((always_inline)) {
    if constexpr (std::is_arithmetic_v<decltype(in)>) {
      return V{} + in;  // a constant in every lane (folded)
    } else {
      return in;
    }
  };
  const V b = lanes(b_in), c = lanes(c_in);
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64) return _mm512_fmadd_ps(a, b, c);
#endif
#if defined(__FMA__)
  if constexpr (sizeof(V) == 32) return _mm256_fmadd_ps(a, b, c);
  if constexpr (sizeof(V) == 16) return _mm_fmadd_ps(a, b, c);
#endif
  V r;
  for (int l = 0; l < static_cast<int>(sizeof(V) / sizeof(float)); ++l) r[l] = std::fma(a[l], b[l], c[l]);
  return r;
}

// F is float (unsure an int32_t, set to 1) or a native float vector (unsure that vector's lane mask, all-ones in the
// lanes it cannot vouch for).
template <class F, class Unsure>
[[gnu::always_inline]] inline F fused_cube_root(F v, Unsure& unsure) {
  // as in cube_root
  const F third = lanes_to_float(lanes_bits(v)) * (1.0f / 3.0f);
  F r = lanes_of_bits(0x54a21d2au - lanes_to_bits(third));
  const F d = lanes_fma(-(v * r), r * r, 1.0f);
  const F series =
      lanes_fma(lanes_fma(lanes_fma(d, 0x1.28acb6p-3f, 0x1.6561cep-3f), d, 0x1.c71c3ep-3f), d, 0x1.55542ep-2f);
  r = lanes_fma(r * d, series, r);
  const F r2 = r * r;
  const F y0 = v * r2;
  const F square = y0 * y0;
  const F square_low = lanes_fma(y0, y0, -square);                           // y0^2 = square + square_low
  const F residual = lanes_fma(-square_low, y0, lanes_fma(-square, y0, v));  // v - y0^3
  const F step = residual * r2;
  const F low = lanes_fma(step, (1.0f - 0x1p-16f) / 3.0f, y0);
  const F high = lanes_fma(step, (1.0f + 0x1p-16f) / 3.0f, y0);
  unsure |= low != high;  // NaN (from untrusted sums) is unsure too
  return low;
}

// The root of a window sum inside a vectorised loop: root_for's value, or fused_cube_root's, which may set unsure;
// a loop that got unsure != 0 calls settle_roots afterwards.
template <class Power, class A>
[[gnu::always_inline]] inline A loop_root(Power power, A sum, int32_t& unsure) {
  if constexpr (kFusedCubeRoot && std::is_same_v<Power, IntegerPower<3>> && std::is_same_v<A, float>) {
    return fused_cube_root(sum, unsure);
  } else {
    return root_for(power, sum);
  }
}

// After a loop of loop_root over n sums (sum_at(j)) that set unsure: each root fused_cube_root could not vouch for
// is recomputed with root_for and handed to set(j, root), which stores it as the loop did (scaled, converted).
template <class Power, class SumAt, class Set>
void settle_roots(Power power, int32_t unsure, int64_t n, SumAt sum_at, Set set) {
  if (unsure == 0) return;
  for (int64_t j = 0; j < n; ++j) {
    const auto sum = sum_at(j);
    int32_t this_unsure = 0;
    loop_root(power, sum, this_unsure);
    if (this_unsure != 0) set(j, root_for(power, sum));
  }
}

// The root of a double sum of |x|^p.
inline double lp_root(double sum, const LpNorm& lp) {
  double root = 0;
  with_power(lp, [&](auto power) { root = root_for(power, sum); });
  return root;
}

// The least sum trusted, for sums of terms computed in the accumulator type A.
template <class A>
constexpr A kSmallestTrustedSum = static_cast<A>(std::is_same_v<A, float> ? 0x1p-80 : 0x1p-900);
// A sum of |x|^p is trusted when it neither overflowed nor sank to where underflowed terms could matter;
// otherwise the window is recomputed scaled by its largest magnitude, in double.
template <class A>
inline bool lp_sum_trusted(double sum) {
  return sum >= static_cast<double>(kSmallestTrustedSum<A>) && sum <= std::numeric_limits<double>::max();
}
// The same test on a window sum still in the accumulator type (compared in that type, so loops vectorise).
template <class A>
inline bool window_sum_trusted(A sum) {
  return (sum >= kSmallestTrustedSum<A>)&(sum <= std::numeric_limits<A>::max());  // no branch: NaN fails both
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
// compares: a scalar compare of a subnormal takes a slow microcode assist on some x86 cores, and this runs exactly
// when the data is subnormal.
template <class T>
AccOf<T> largest_magnitude(const T* x, int64_t n) {
  using A = AccOf<T>;
  A buffer[kBlock];
  A lanes[kLanes<A>] = {};
  for (int64_t off = 0; off < n; off += kBlock) {
    const int64_t count = min_of(kBlock, n - off);
    const A* a = acc_view(x + off, buffer, count);
    int64_t i = 0;
    for (; i + kLanes<A> <= count; i += kLanes<A>) {
      for (int l = 0; l < kLanes<A>; ++l) {
        const A v = std::fabs(a[i + l]);
        lanes[l] = v > lanes[l] ? v : lanes[l];  // NaN compares false: ignored
      }
    }
    for (int l = 0; i + l < count; ++l) {
      const A v = std::fabs(a[i + l]);
      lanes[l] = v > lanes[l] ? v : lanes[l];
    }
  }
  for (int width = kLanes<A> / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] = lanes[l + width] > lanes[l] ? lanes[l + width] : lanes[l];
  }
  return lanes[0];
}

// The least magnitude a whose term power(a * 2^e) (up: 2^e) is at least twice the trusted minimum, found by bisection
// over the bits of positive finite values (power and the scaling are nondecreasing in a); +inf when there is none.
// Elements of smaller nonzero magnitude are the ones whose terms underflow: without them among a window's elements, a
// sum of exactly +0 comes only from zeros (a sum of nonnegative terms is at least each of them, rounding being
// monotone), and its root, +0, is the exact window's. The factor 2 keeps a term a few ulps off monotone above the
// minimum.
template <class A, class Power>
A smallest_safe_magnitude(Power power, const PowerOfTwo<A>& up) {
  using Bits = std::conditional_t<sizeof(A) == 8, uint64_t, uint32_t>;
  auto value = [](Bits b) {
    A v;
    std::memcpy(&v, &b, sizeof v);
    return v;
  };
  auto safe = [&](Bits b) { return power(value(b) * up.first * up.second) >= 2 * kSmallestTrustedSum<A>; };
  Bits lo = 0, hi;  // safe(hi), and nothing at or below lo is
  const A largest = std::numeric_limits<A>::max();
  std::memcpy(&hi, &largest, sizeof hi);
  if (!safe(hi)) return std::numeric_limits<A>::infinity();
  while (hi - lo > 1) {
    const Bits mid = lo + (hi - lo) / 2;
    (safe(mid) ? hi : lo) = mid;
  }
  return value(hi);
}

// The index of the first of n elements with 0 < |x| < limit (NaN is not), or n when there is none. In native vectors,
// a block of kBlock tested with one fold at its end; only a block that holds one is searched element by element.
template <class T>
int64_t first_below(const T* x, int64_t n, AccOf<T> limit) {
  using A = AccOf<T>;
  using S = Simd<A>;
  using V = typename S::Value;
  constexpr int L = S::kLength;
  const V zero{}, bound = S::splat(limit);
  auto hits = [&](V v) __attribute__((always_inline)) {
    const V a = v < zero ? -v : v;  // |v| (a NaN compares false below)
    return (a > zero) & (a < bound);
  };
  A buffer[kBlock];
  for (int64_t off = 0; off < n; off += kBlock) {
    const int64_t count = min_of(kBlock, n - off);
    const A* a = acc_view(x + off, buffer, count);
    // the block's whole vectors tested together and folded once; if one holds such an element, the block one by one
    typename S::Mask any{};
    int64_t i = 0;
    for (; i + L <= count; i += L) any |= hits(S::load(a + i));
    using E = typename S::MaskElement;
    if (fold_halves<E, sizeof(any)>(any, [](auto u, auto v) __attribute__((always_inline)) { return u | v; }) != 0) {
      i = 0;
    }
    for (; i < count; ++i) {
      const A v = std::fabs(a[i]);
      if ((v > 0) & (v < limit)) return off + i;
    }
  }
  return n;
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

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
