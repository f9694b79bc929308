// Global pools: sum, NaN-aware max and power sums over whole channels.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/common/dtypes.h"
#include "kernels/common/element_types.h"
#include "kernels/common/lp_math.h"
#include "kernels/common/per_isa.h"
#include "kernels/common/simd.h"
#include "kernels/kernels.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// ---- global pools -----------------------------------------------------------------------------------------

// A channel's partial sums (the lanes of K vectors of Bytes) folded pairwise in a fixed order, in registers: cheap, as
// accurate as a sequential fold, and the same additions in the same order on every vector width (lane l and lane
// l + width are in vectors k and k + width / kLength while width spans vectors). Then widened to double.
template <class A, int K, int Bytes = kVectorBytes>
double fold_vectors(typename Simd<A, Bytes>::Value* acc) {
#pragma GCC unroll 8
  for (int half = K / 2; half >= 1; half /= 2) {
#pragma GCC unroll 8
    for (int k = 0; k < half; ++k) acc[k] += acc[k + half];
  }
  return static_cast<double>(fold_halves<A, Bytes>(acc[0], [](auto low, auto high) { return low + high; }));
}

constexpr int64_t kStreamMinBytes = 2048;  // channels from this long on take streamed_channels
// Short float channels' maxima computed side by side (global_pool): as many as keep their K = 4 running maxima each
// in registers, with room for the loads; up to channels of kShortMaxGroupBytes, past which a channel's own loads
// keep the core busy and more streams only slow the reads from L2 / L3 down.
constexpr int kShortMaxGroup = kVectorBytes >= 64 ? 4 : 2;
constexpr int64_t kShortMaxGroupBytes = 512;
// Long channels side by side (streamed_channels): float and double channels one at a time, so that the reads are one
// sequential stream through the tensor (the channels lie back to back): on an AMD EPYC (Zen 4) two to four channels
// read side by side (concurrent streams) came from L3 and memory markedly slower than one, on every path and for
// every reduction. So do the means of 16-bit floats on AVX2 and AVX-512, whose conversions and kLanes partial sums
// keep up with the reads of one stream. Their Lp sums do not: each element needs a conversion and a power before it
// is added, and one channel's chains of partial sums bind the loop before the reads do. Their groups: 4 x 128 bytes
// of partial sums fit AVX-512's registers; on AVX2 3 channels, where 4 channels' 4 vectors of partial sums would take
// all 16 registers and a spilled sum costs a store and a reload per step. SSE2, converting 16-bit floats in
// software, is bound by its own work: its two streams of sums spill too, and still beat one - except float16 means,
// summed without a conversion in ScaledHalves' scaled domain (StreamLoader), one channel's sums in registers.
template <class T, Reduction R>
constexpr bool kScaledHalvesStream =
#if defined(__SSE2__) && !defined(__F16C__)
    std::is_same_v<T, Float16> && R == Reduction::Average;
#else
    false;
#endif
// Float16 Lp sums without F16C, one channel at a time too: their values in words (half_word_stream_sum), with no
// shuffle, leave one channel's partial sums and conversions in SSE2's registers. So do bfloat16 Lp sums, whose
// words convert in a shift and a mask where AccLoader's interleave with zeros takes SSE2's one shuffle port.
template <class T, Reduction R>
constexpr bool kWordHalvesStream =
#if defined(__SSE2__) && !defined(__F16C__)
    (std::is_same_v<T, Float16> && (R == Reduction::Average || R == Reduction::Lp)) ||
    (std::is_same_v<T, BFloat16> && R == Reduction::Lp);
#else
    false;
#endif
template <class T, Reduction R>
constexpr int kStreamedGroup = std::is_same_v<T, AccOf<T>> || R == Reduction::Max || kWordHalvesStream<T, R> ? 1
                               : kVectorBytes < 32                                                           ? 2
                               : R != Reduction::Lp                                                          ? 1
                               : kVectorBytes == 64                                                          ? 4
                                                                                                             : 3;

// A hint to load the cache line `bytes` past p (an address only: nothing is read, and none past the input faults).
inline void prefetch_ahead(const void* p, int64_t bytes) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)));
}
// How far ahead the float16 sums without a conversion instruction prefetch their input. Their loops take longer per
// byte than a plain read; the hardware's prefetchers alone left a stream from L3 or memory waiting on its loads.
constexpr int64_t kHalvesPrefetchBytes = 8192;
// How far ahead the long sums and maxima (mapped_sum_streams, max_pairs_unrolled, max_keys) prefetch on x86-64's
// baseline build: with its 16-byte loads (twice AVX2's a byte) and the hardware's prefetchers alone, a stream from
// memory read slower than the AVX2 build's. None on the other builds.
#if defined(__SSE2__) && !defined(__AVX__)
constexpr int64_t kNarrowStreamPrefetchBytes = 1024;
#else
constexpr int64_t kNarrowStreamPrefetchBytes = 0;
#endif
// The cache lines of a loop step of StepBytes from p on, kNarrowStreamPrefetchBytes ahead (nothing where that is 0,
// nor for steps shorter than a line).
template <int StepBytes>
[[gnu::always_inline]] inline void prefetch_narrow_stream(const void* p) {
  if constexpr (kNarrowStreamPrefetchBytes > 0) {
    for (int line = 0; line < StepBytes / 64; ++line) prefetch_ahead(p, kNarrowStreamPrefetchBytes + 64 * line);
  }
}

// The sums of map(x) over G channels side by side (channel g at a + g * stride, n >= 2 kLanes elements each, T
// loaded by loads[g], accumulated in A = AccOf<T>). A channel's logical lane l adds a[i + l] for i in steps of
// kLanes<A>, whatever the vector width (see kLanes), then its tail, then a pairwise fold: the same operations in
// the same order for any G, so a channel's sum has the same bits alone (G = 1) as streamed.
template <int G, class T, class Map, class Loader>
void mapped_sum_streams(const T* a, int64_t stride, int64_t n, Map map, Loader* loads, double* sums) {
  using A = AccOf<T>;
  using S = typename Loader::S;  // native vectors, or a NarrowLoader's
  constexpr int L = kLanes<A>;
  constexpr int K = L / S::kLength;  // vectors of partial sums per channel
  typename S::Value acc[G][K] = {};
  // the loaders' state (a float16 loader's range checks) in locals: in the caller's memory every store to it would
  // have to precede the next load of the input, which it could alias
  Loader local[G];
  for (int g = 0; g < G; ++g) local[g] = loads[g];
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    for (int g = 0; g < G; ++g) {
      prefetch_narrow_stream<L* static_cast<int>(sizeof(T))>(a + g * stride + i);
      typename S::Value v[K];
      local[g].load(a + g * stride + i, v);
      for (int k = 0; k < K; ++k) acc[g][k] += map(v[k]);
    }
  }
  for (int g = 0; g < G; ++g) {
    if (i < n) {  // the tail, spread over the lanes from lane 0; the lanes past it add map(0) = +0, which leaves
                  // them as they are (a lane's sum starts at +0, so it is never -0)
      typename S::Value v[K];
      local[g].load_tail(a + g * stride + i, n - i, v);
      for (int k = 0; k < K; ++k) acc[g][k] += map(v[k]);
    }
    sums[g] = fold_vectors<A, K, sizeof(typename S::Value)>(acc[g]);
    loads[g] = local[g];
  }
}

// The sum of map(a[i]) over one channel's n elements; map takes a native vector or a scalar (IntegerPower,
// scaling lambdas with auto arguments).
// mapped_sum_block's short path (n < 2 kLanes<A>): a lane array would cost more to fold than to fill.
template <class T, class Map>
inline double short_sum(const T* a, int64_t n, Map map) {
  using A = AccOf<T>;
  auto at = [&](int64_t i) { return map(to_acc<A>(a[i])); };
  A s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  const int64_t whole = n - n % 8;
  int64_t i = 0;
  for (; i < whole; i += 8) {
    s0 += at(i);
    s1 += at(i + 1);
    s2 += at(i + 2);
    s3 += at(i + 3);
    s4 += at(i + 4);
    s5 += at(i + 5);
    s6 += at(i + 6);
    s7 += at(i + 7);
  }
  // the tail, from element whole on in order; with AVX-512 unrolled, as GCC vectorises the loop (an in-order
  // reduction in masked 64-byte vectors, slower than scalar adds for up to 7 elements)
  A tail = 0;
#if !defined(__AVX512F__)
  for (; i < n; ++i) tail += at(i);
#else
  switch (n - whole) {
    case 7: tail += at(n - 7); [[fallthrough]];
    case 6: tail += at(n - 6); [[fallthrough]];
    case 5: tail += at(n - 5); [[fallthrough]];
    case 4: tail += at(n - 4); [[fallthrough]];
    case 3: tail += at(n - 3); [[fallthrough]];
    case 2: tail += at(n - 2); [[fallthrough]];
    case 1: tail += at(n - 1); [[fallthrough]];
    default: break;
  }
#endif
  return static_cast<double>(((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + tail);
}

// Four vectors, one per channel, transposed in registers: lane l of vector k becomes lane k of vector l.
inline void transpose4(Simd<float, 16>::Value* v) {
  const auto front01 = __builtin_shufflevector(v[0], v[1], 0, 4, 1, 5);
  const auto back01 = __builtin_shufflevector(v[0], v[1], 2, 6, 3, 7);
  const auto front23 = __builtin_shufflevector(v[2], v[3], 0, 4, 1, 5);
  const auto back23 = __builtin_shufflevector(v[2], v[3], 2, 6, 3, 7);
  v[0] = __builtin_shufflevector(front01, front23, 0, 1, 4, 5);
  v[1] = __builtin_shufflevector(front01, front23, 2, 3, 6, 7);
  v[2] = __builtin_shufflevector(back01, back23, 0, 1, 4, 5);
  v[3] = __builtin_shufflevector(back01, back23, 2, 3, 6, 7);
}

// short_sum over four float channels of n < 2 kLanes elements side by side (channel g at a + g * n), lane g of the
// result channel g's sum: each channel's 8 running sums in two 4-lane vectors, transposed so that the fold and the
// tail take one vector operation for the four, the same additions in the same order as short_sum. R = n % 8: the
// tail's elements are loaded as the vectors from element n - R on, which reads up to 8 - R elements past a channel
// (the caller keeps those reads in the tensor).
template <int R>
[[gnu::always_inline]] inline Simd<float, 16>::Value short_sums4(const float* a, int64_t n) {
  using S = Simd<float, 16>;
  using V = S::Value;
  const int64_t whole = n - R;
  V tail = {};
  if constexpr (R > 0) {  // in order, from +0 (so never -0: adding the running sums' +0 to it leaves it as it is)
    V last[8];
    for (int g = 0; g < 4; ++g) last[g] = S::load(a + g * n + whole);
    transpose4(last);
    if constexpr (R > 4) {
      for (int g = 0; g < 4; ++g) last[4 + g] = S::load(a + g * n + whole + 4);
      transpose4(last + 4);
    }
    for (int l = 0; l < R; ++l) tail += last[l];
    if (whole == 0) return tail;
  }
  V low[4] = {}, high[4] = {};
  for (int64_t i = 0; i < whole; i += 8) {
    for (int g = 0; g < 4; ++g) {
      low[g] += S::load(a + g * n + i);
      high[g] += S::load(a + g * n + i + 4);
    }
  }
  transpose4(low);
  transpose4(high);
  return ((low[0] + low[1]) + (low[2] + low[3])) + ((high[0] + high[1]) + (high[2] + high[3])) + tail;
}

// The means of `channels` float channels of 2 <= n < 2 kLanes elements (n % 8 = R), as global_pool's one channel at a
// time gives them (short_sum's sum, divided in double, rounded to float), four channels at a time (short_sums4): a
// short channel's tail and fold cost more than its sum, and four channels share them. Returns the channels done: the
// last ones, whose tail loads would read past the tensor, are left to the caller. A channel whose sum is not finite
// goes to one_channel.
template <int R, class OneChannel>
int64_t short_means(const float* x, float* y, int64_t channels, int64_t n, OneChannel& one_channel) {
  using V = Simd<float, 16>::Value;
  using D = typename VectorOf<double, 32>::Type;
  using Mask = Simd<float, 16>::Mask;
  constexpr int64_t kReadPast = R == 0 ? 0 : R <= 4 ? 4 - R : 8 - R;
  int64_t c = 0;
  for (; c + 4 <= channels && (c + 4) * n + kReadPast <= channels * n; c += 4) {
    const V sums = short_sums4<R>(x + c * n, n);
    if constexpr (kVectorBytes >= 32) {  // one vector of 4 doubles
      const D quotients = __builtin_convertvector(sums, D) / (D{} + static_cast<double>(n));
      Simd<float, 16>::store(y + c, __builtin_convertvector(quotients, V));
    } else {  // in halves: GCC may split a vector wider than the instruction set's into scalars
      using D2 = typename VectorOf<double, 16>::Type;
      using V2 = typename VectorOf<float, 8>::Type;
      const D2 half_length = D2{} + static_cast<double>(n);
      const D2 low = __builtin_convertvector(__builtin_shufflevector(sums, sums, 0, 1), D2) / half_length;
      const D2 high = __builtin_convertvector(__builtin_shufflevector(sums, sums, 2, 3), D2) / half_length;
      const V2 low_means = __builtin_convertvector(low, V2), high_means = __builtin_convertvector(high, V2);
      Simd<float, 16>::store(y + c, __builtin_shufflevector(low_means, high_means, 0, 1, 2, 3));
    }
    const V difference = sums - sums;  // NaN where a sum is infinite or NaN
    const Mask infinite = difference != difference;
    if (fold_halves<int32_t, 16>(infinite, [](auto low, auto high) { return low | high; }) != 0) {
      for (int g = 0; g < 4; ++g)
        if (infinite[g]) one_channel(c + g);
    }
  }
  return c;
}

template <class T, class Map, class Loader = AccLoader<T>>
double mapped_sum_block(const T* a, int64_t n, Map map, Loader&& load = Loader{}) {
  using A = AccOf<T>;
  if (n < 2 * kLanes<A>) return short_sum(a, n, map);
  double sum;
  mapped_sum_streams<1>(a, 0, n, map, &load, &sum);
  return sum;
}

struct Identity {
  template <class V>
  V operator()(V v) const {
    return v;
  }
};

template <class A, class Power>
double power_sum_block(const A* a, int64_t n, Power power) {
  return mapped_sum_block(a, n, power);
}

// mapped_sum_block over n <= kBlock elements, the 16-bit floats converted in registers; where the loader's fast
// conversion does not cover a value, the block again through load_block (the same values, so the same sum).
template <class T, class Map>
double mapped_sum_elements(const T* a, int64_t n, Map map, AccOf<T>* buffer) {
  AccLoader<T> load;
  const double sum = mapped_sum_block(a, n, map, load);
  return load.exact() ? sum : mapped_sum_block(acc_view(a, buffer, n), n, map);
}

#if defined(__SSE2__) && !defined(__AVX512F__)  // where ScaledHalves is (simd.h)
// The halves from lane `drop` on, moved down to lane 0, zeros after them (drop is the same all through a call: a
// predicted jump).
inline ScaledHalves::Halves drop_first(ScaledHalves::Halves h, int64_t drop) {
  const ScaledHalves::Halves z = {};
  switch (drop) {
    case 1: return __builtin_shufflevector(h, z, 1, 2, 3, 4, 5, 6, 7, 8);
    case 2: return __builtin_shufflevector(h, z, 2, 3, 4, 5, 6, 7, 8, 8);
    case 3: return __builtin_shufflevector(h, z, 3, 4, 5, 6, 7, 8, 8, 8);
    case 4: return __builtin_shufflevector(h, z, 4, 5, 6, 7, 8, 8, 8, 8);
    case 5: return __builtin_shufflevector(h, z, 5, 6, 7, 8, 8, 8, 8, 8);
    case 6: return __builtin_shufflevector(h, z, 6, 7, 8, 8, 8, 8, 8, 8);
    case 7: return __builtin_shufflevector(h, z, 7, 8, 8, 8, 8, 8, 8, 8);
    default: return h;
  }
}

// The means of `count` float16 channels of 8 <= n < 2048 / sizeof(float) elements each (channel j at a + j * n),
// converted in registers as they are summed instead of into a copy: the float path's sums of the same values in the
// same order (short_sum's 8 running sums as two vectors, its tail in order and its fold below 2 kLanes elements;
// mapped_sum_streams' 32 lanes in 4-lane vectors, its zero-padded tail and fold_vectors from there on; the same on
// every vector width), in ScaledHalves' scaled domain without F16C. Below 2 kLanes elements four channels at a time,
// their lanes transposed so that the fold and the tail take one vector operation for the four. Each mean is the
// float sum (exact in float: a multiple of 2^-136 below 2^25) divided in float: the float path's double quotient
// rounded to float is that quotient correctly rounded, as rounding first to 53 bits does not change the float
// rounding of a quotient of two floats (53 >= 2 * 24 + 2). Returns false, means unset, if subnormals are flushed
// (without F16C) or a sum is not finite: the caller then converts the block.
constexpr int64_t kScaledMeansGroup = 256;  // channels per call: count <= this
inline bool scaled_half_means(const Float16* a, int64_t count, int64_t n, float* means) {
  using V = Simd<float, 16>::Value;
  static_assert(kLanes<float> == 32, "the lanes of short_sum and mapped_sum_streams");
  if (!ScaledHalves::kept_subnormals()) return false;
  ScaledHalves halves;
  alignas(16) float sums[kScaledMeansGroup + 3];
  if (n < 2 * kLanes<float>) {
    const int64_t whole = n - n % 8;
    for (int64_t j = 0; j < count; j += 4) {
      const Float16* channel[4];
      for (int g = 0; g < 4; ++g) channel[g] = a + min_of(j + g, count - 1) * n;  // past the last: the last again
      V low[4] = {}, high[4] = {}, last_low[4], last_high[4];
      for (int64_t i = 0; i < whole; i += 8) {  // the four channels' sums side by side: four chains of additions
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          V l, h;
          halves.convert(ScaledHalves::load(channel[g] + i), l, h);
          low[g] += l;
          high[g] += h;
        }
      }
      V tail = {};
      if (n - whole <= 2) {  // in order, from +0; one or two elements: the four channels' gathered, lanes transposed
        if (whole < n) {
          ScaledHalves::Halves gathered = {};
          for (int g = 0; g < 4; ++g) {
            gathered[g] = static_cast<int16_t>(channel[g][whole].bits);
            if (n - whole == 2) gathered[4 + g] = static_cast<int16_t>(channel[g][whole + 1].bits);
          }
          V first, second;
          halves.convert(gathered, first, second);
          tail += first;
          if (n - whole == 2) tail += second;
        }
      } else {  // the last lanes of the 8 halves ending each channel
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) halves.convert(ScaledHalves::load(channel[g] + n - 8), last_low[g], last_high[g]);
        transpose4(last_low);
        transpose4(last_high);
        for (int64_t lane = 8 - (n - whole); lane < 8; ++lane) tail += lane < 4 ? last_low[lane] : last_high[lane - 4];
      }
      transpose4(low);
      transpose4(high);
      const V sum = ((low[0] + low[1]) + (low[2] + low[3])) + ((high[0] + high[1]) + (high[2] + high[3])) + tail;
      std::memcpy(sums + j, &sum, sizeof sum);
    }
  } else {
    for (int64_t j = 0; j < count; ++j) {
      const Float16* channel = a + j * n;
      V acc[8] = {};
      int64_t i = 0;
      for (; i + 32 <= n; i += 32) {
        for (int q = 0; q < 4; ++q) {
          V l, h;
          halves.convert(ScaledHalves::load(channel + i + 8 * q), l, h);
          acc[2 * q] += l;
          acc[2 * q + 1] += h;
        }
      }
      // the tail from lane 0, +0 after it (which leaves a lane's sum as it is)
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        const int64_t left = n - i - 8 * q;
        if (left <= 0) break;
        V l, h;
        if (left >= 8) halves.convert(ScaledHalves::load(channel + i + 8 * q), l, h);
        else halves.convert(drop_first(ScaledHalves::load(channel + n - 8), 8 - left), l, h);
        acc[2 * q] += l;
        acc[2 * q + 1] += h;
      }
      sums[j] = static_cast<float>(fold_vectors<float, 8, 16>(acc));
    }
  }
  bool finite = halves.finite();
  for (int64_t j = 0; j < count; ++j) finite &= std::isfinite(sums[j]);
  if (!finite) return false;
  const float length = static_cast<float>(n);
  for (int64_t j = 0; j < count; ++j) means[j] = (0.0f + sums[j] * ScaledHalves::kScale) / length;
  return true;
}
#endif

#if defined(__SSE2__) && !defined(__F16C__)
// mapped_sum_streams<1> over 16-bit floats (n >= 2 kLanes) with a loader of two halves per word (float16:
// ScaledHalvesLoader, summed in its scaled domain, or AccLoader<Float16>; bfloat16: AccLoader<BFloat16>; map takes
// their values): the same 32 lanes, additions and fold.
// Each half converts with shifts and a mask within its word: no shuffle. The even elements of 8 loaded halves fill
// one vector, the odd ones another, so partial sums E[q] and O[q] hold lanes 8q + {0, 2, 4, 6} and 8q + {1, 3, 5, 7}:
// each lane adds the same elements in the same order as mapped_sum_streams' lane does, and the lanes are put back in
// order (an interleave) before the fold.
template <class T, class Loader, class Map>
inline double half_word_stream_sum(const T* a, int64_t n, Map map, Loader& loader) {
  using V = Simd<float, 16>::Value;
  static_assert(kLanes<float> == 32, "4 loads of 8 halves per step");
  Loader load = loader;  // a local: stores to the caller's copy would wait on the input's loads
  const int64_t whole = n - n % 32;
  V even[4] = {}, odd[4] = {};
  auto step = [&](const T* p) {
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      V e, o;
      load.load_words(p + 8 * q, e, o);
      even[q] += map(e);
      odd[q] += map(o);
    }
  };
  for (int64_t i = 0; i < whole; i += 32) {
    prefetch_ahead(a + i, kHalvesPrefetchBytes);
    step(a + i);
  }
  if (whole < n) {  // mapped_sum_streams' zero-padded tail (map(+0) is +0)
    T tail[32] = {};
    std::memcpy(tail, a + whole, static_cast<size_t>(n - whole) * sizeof(T));
    step(tail);
  }
  V acc[8];
  for (int q = 0; q < 4; ++q) {
    acc[2 * q] = __builtin_shufflevector(even[q], odd[q], 0, 4, 1, 5);
    acc[2 * q + 1] = __builtin_shufflevector(even[q], odd[q], 2, 6, 3, 7);
  }
  loader = load;
  return fold_vectors<float, 8, 16>(acc);
}
#endif

// Whether a NaN is in a or b, lane by lane; SSE2 tests two vectors in one comparison.
#if defined(__SSE2__) && !defined(__AVX__)
constexpr bool kPairedNanCheck = true;
inline Simd<float>::Mask unordered(Simd<float>::Value a, Simd<float>::Value b) {
  return reinterpret_cast<Simd<float>::Mask>(_mm_cmpunord_ps(a, b));
}
inline Simd<double>::Mask unordered(Simd<double>::Value a, Simd<double>::Value b) {
  return reinterpret_cast<Simd<double>::Mask>(_mm_cmpunord_pd(a, b));
}
#else
constexpr bool kPairedNanCheck = false;
template <class V>
auto unordered(V a, V b) {
  return (a != a) | (b != b);
}
#endif

#if defined(__SSE2__) && !defined(__AVX__)
// SSE2's long channels (max_streams<1, 2, A, true>): the paired loop's steps four at a time, each running maximum
// taking its 8 vectors as a tree whose every node keeps the earlier of equal values (the value of taking them in
// turn, as the paired loop does), at one load, one max and one multiply per vector. The NaN test is the multiply:
// a product of +0 and the elements stays a zero unless an element is NaN or infinite, and stays NaN once NaN; it
// runs on the multiply units while compares and maxima share the adder's, which the maxima alone fill. The loads and
// products are single instructions in asm: the compiler otherwise loads a vector twice rather than copy it, or
// multiplies into the loaded copy and moves the product back, each an extra instruction per vector where the loop
// is bound by the instructions it issues. Returns the elements taken (a multiple of 16 vectors); `suspect` is set if
// a NaN or an infinity came by, the maxima then being of no use (the caller scans again, testing each vector).
template <class A>
[[gnu::always_inline]] inline int64_t max_pairs_unrolled(const A* a, int64_t n, typename Simd<A>::Value* m,
                                                         bool& suspect) {
  using V = typename Simd<A>::Value;
  constexpr int N = Simd<A>::kLength;
  constexpr int64_t kStep = 16 * N;
  auto load = [](const A* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    __asm__("" : "+x"(v));
    return v;
  };
  auto multiply = [](V& product, V v) {
    if constexpr (std::is_same_v<A, float>) __asm__("mulps %1, %0" : "+x"(product) : "x"(v));
    else __asm__("mulpd %1, %0" : "+x"(product) : "x"(v));
  };
  auto later_first = [](V later, V earlier) { return later > earlier ? later : earlier; };
  V p0 = {}, p1 = {}, p2 = {}, p3 = {}, p4 = {}, p5 = {}, p6 = {}, p7 = {};
  // step s's vectors k and K + k (K = 2) at a + 4 N s + N k and a + 4 N s + N (2 + k)
  auto pair = [&](const A* q, V& first_product, V& second_product) {
    const V first = load(q), second = load(q + 2 * N);
    multiply(first_product, first);
    multiply(second_product, second);
    return later_first(second, first);
  };
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    const A* q = a + i;
    prefetch_narrow_stream<kStep* static_cast<int>(sizeof(A))>(q);
#pragma GCC unroll 2
    for (int k = 0; k < 2; ++k) {
      const V s01 = later_first(pair(q + 4 * N + k * N, p2, p3), pair(q + k * N, p0, p1));
      const V s23 = later_first(pair(q + 12 * N + k * N, p6, p7), pair(q + 8 * N + k * N, p4, p5));
      m[k] = later_first(later_first(s23, s01), m[k]);
    }
  }
  const V products = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7));
  using E = typename Simd<A>::MaskElement;
  suspect = fold_halves<E, kVectorBytes>(products != products, [](auto low, auto high) { return low | high; }) != 0;
  return i;
}
#endif

// The larger of two values or vectors (lane by lane), the first where they are equal (+0 and -0) or unordered: a scan
// that keeps the first of equal values, taking two neighbouring runs of values the earlier one first.
template <class V>
[[gnu::always_inline]] inline V keep_first(V first, V second) {
  return second > first ? second : first;
}

// The maxima of G channels side by side (channel g at a + g * stride, n >= one native vector each), each from
// `start` (max is exact and idempotent, so the order does not change the value). K native vectors of running maxima
// per channel plus one "saw NaN" mask: a plain compare and select per element, where a sticky-NaN select would
// chain three. The last vector of a channel overlaps the one before instead of a scalar tail (e.g. 7x7 channels).
// Returns false if a NaN came by: the caller then finds the first one. Paired: each running maximum takes two of its
// vectors per step, their maximum first (the earlier kept where equal), which is the value of taking them in turn
// (a maximum keeping the first of equal values is associative) with half the chain of dependent selects per element.
template <int G, int K, class A, bool Paired = false>
bool max_streams(const A* a, int64_t stride, int64_t n, A start, A* maxima) {
  using S = Simd<A>;
  using V = typename S::Value;
  using M = typename S::Mask;
  constexpr int N = S::kLength;
  V m[G][K];
  for (auto& channel : m)
    for (auto& v : channel) v = S::splat(start);
  M nan[K] = {};  // one per running maximum: GCC turns the ORs into a chain of selects when they share one
  int64_t i = 0;
  if constexpr (Paired) {
#if defined(__SSE2__) && !defined(__AVX__)
    if constexpr (G == 1 && K == 2) {
      bool suspect = false;
      i = max_pairs_unrolled(a, n, m[0], suspect);
      if (suspect) {  // a NaN or an infinity: the same steps again from the start, each vector tested
        i = 0;
        for (auto& v : m[0]) v = S::splat(start);
      }
    }
#endif
    for (; i + 2 * K * N <= n; i += 2 * K * N) {
      V v[G * K], w[G * K];
      for (int g = 0; g < G; ++g) {
        for (int k = 0; k < K; ++k) {
          const V first = S::load(a + g * stride + i + k * N);
          const V second = S::load(a + g * stride + i + (K + k) * N);
          const V both = second > first ? second : first;
          m[g][k] = both > m[g][k] ? both : m[g][k];
          v[g * K + k] = first, w[g * K + k] = second;
        }
      }
      for (int j = 0; j < G * K; ++j) nan[j % K] |= unordered(v[j], w[j]);
    }
  }
  for (; i + K * N <= n; i += K * N) {
    V v[G * K];
    for (int g = 0; g < G; ++g) {
      for (int k = 0; k < K; ++k) {
        v[g * K + k] = S::load(a + g * stride + i + k * N);
        m[g][k] = v[g * K + k] > m[g][k] ? v[g * K + k] : m[g][k];
      }
    }
    if constexpr (kPairedNanCheck) {  // SSE2: one comparison per two vectors
      for (int j = 0; j < G * K; j += 2) nan[j / 2 % K] |= unordered(v[j], v[j + 1]);
    } else {
      for (int j = 0; j < G * K; ++j) nan[j % K] |= v[j] != v[j];
    }
  }
  for (; i < n; i += N) {  // the rest, the last vector overlapping
    V v[G];
    for (int g = 0; g < G; ++g) {
      v[g] = S::load(a + g * stride + (i + N <= n ? i : n - N));
      m[g][0] = v[g] > m[g][0] ? v[g] : m[g][0];
    }
    if constexpr (kPairedNanCheck && G % 2 == 0) {
      for (int g = 0; g < G; g += 2) nan[0] |= unordered(v[g], v[g + 1]);
    } else {
      for (int g = 0; g < G; ++g) nan[0] |= v[g] != v[g];
    }
  }
  // folded in registers, without an exit per lane: short channels pay this per channel
  for (int k = 1; k < K; ++k) nan[0] |= nan[k];
  using E = typename S::MaskElement;
  if (fold_halves<E, kVectorBytes>(nan[0], [](auto low, auto high) { return low | high; }) != 0) return false;
  static_assert(K == 1 || K == 2 || K == 4);
  for (int g = 0; g < G; ++g) {  // no NaN left: plain maxima, neighbouring vectors first
    if constexpr (K == 4) m[g][2] = keep_first(m[g][2], m[g][3]);
    if constexpr (K >= 2) m[g][0] = keep_first(m[g][0], m[g][1]);
    if constexpr (K == 4) m[g][0] = keep_first(m[g][0], m[g][2]);
    // the first lane holding the maximum, as a scan from lane 0 keeping the first of equal values (+0, -0) gives
    const A best =
        fold_pairs<A, kVectorBytes>(m[g][0], [](auto first, auto second) { return keep_first(first, second); });
    maxima[g] = start < best ? best : start;
  }
  return true;
}

// Lanes [0, r) of p in a vector of Bytes <= kVectorBytes, zeros from lane r on (load_first's narrower form, for
// channels shorter than a native vector).
template <class A, int Bytes>
[[gnu::always_inline]] inline typename Simd<A, Bytes>::Value load_first_of(const A* p, int64_t r) {
  using S = Simd<A, Bytes>;
  if constexpr (Bytes == kVectorBytes) {
    return load_first(p, r);
  } else {
    if (r >= S::kLength) return S::load(p);
    const int lanes = r > 0 ? static_cast<int>(r) : 0;
#if defined(__AVX512VL__)
    const auto mask = static_cast<__mmask8>((1u << lanes) - 1);
    if constexpr (std::is_same_v<A, float> && Bytes == 16) return _mm_maskz_loadu_ps(mask, p);
    if constexpr (std::is_same_v<A, float> && Bytes == 32) return _mm256_maskz_loadu_ps(mask, p);
    if constexpr (std::is_same_v<A, double> && Bytes == 16) return _mm_maskz_loadu_pd(mask, p);
    if constexpr (std::is_same_v<A, double> && Bytes == 32) return _mm256_maskz_loadu_pd(mask, p);
#elif defined(__AVX2__)
    if constexpr (std::is_same_v<A, float> && Bytes == 16)
      return _mm_maskload_ps(p, _mm_cmpgt_epi32(_mm_set1_epi32(lanes), _mm_setr_epi32(0, 1, 2, 3)));
    if constexpr (std::is_same_v<A, double> && Bytes == 16)
      return _mm_maskload_pd(p, _mm_cmpgt_epi64(_mm_set1_epi64x(lanes), _mm_set_epi64x(1, 0)));
#endif
    typename S::Value v = {};
    for (int l = 0; l < lanes; ++l) v[l] = p[l];
    return v;
  }
}

// The maxima of G channels of 2 <= n <= one vector elements each (channel g at a + g * n), one vector of Bytes per
// channel with the lanes from n on at start: the values max_streams' fold gives, which are those of a scan from lane 0
// keeping the first of equal values, as max_block's scalar scan does. (A fold in pairs over lanes whose tail is
// `start` gives the fold of the first power of two lanes holding n: so any width holding n gives the same value, and
// the narrowest one has the fewest steps.) Returns false if a NaN came by (the caller then scans each channel).
template <int G, class A, int Bytes = kVectorBytes>
bool max_short_vectors(const A* a, int64_t n, A start, A* maxima) {
  using S = Simd<A, Bytes>;
  using V = typename S::Value;
  using M = typename S::Mask;
  V lane;
  for (int l = 0; l < S::kLength; ++l) lane[l] = static_cast<A>(l);
  const M inside = lane < static_cast<A>(n);
  const V fill = S::splat(start);
  V m[G];
  M nan = {};
  for (int g = 0; g < G; ++g) {
    const V v = load_first_of<A, Bytes>(a + g * n, n);
    nan |= v != v;
    m[g] = inside ? (v > fill ? v : fill) : fill;
  }
  using E = typename S::MaskElement;
  if (fold_halves<E, Bytes>(nan, [](auto low, auto high) { return low | high; }) != 0) return false;
  for (int g = 0; g < G; ++g) {
    const A best = fold_pairs<A, Bytes>(m[g], [](auto first, auto second) { return keep_first(first, second); });
    maxima[g] = start < best ? best : start;
  }
  return true;
}

// Lane indices for transposed_maxima's shuffles of two vectors of W lanes (b's lanes numbered from W), in blocks of C
// lanes (16 bytes). in_block_lane: in each block, the even (Odd = 0) or odd lanes of a's block, then those of b's.
// block_lane: the even or odd blocks of a, then those of b.
template <int W, int C, int Odd>
constexpr int in_block_lane(int l) {
  const int block = l / C, p = l % C, half = C / 2;
  return p < half ? block * C + 2 * p + Odd : W + block * C + 2 * (p - half) + Odd;
}
template <int W, int C, int Odd>
constexpr int block_lane(int l) {
  const int half = W / C / 2, block = l / C, p = l % C;
  return block < half ? (2 * block + Odd) * C + p : W + (2 * (block - half) + Odd) * C + p;
}
template <int W, int C, bool InBlock, int Odd, class V, size_t... L>
[[gnu::always_inline]] inline V pick_lanes(V a, V b, std::index_sequence<L...>) {
  if constexpr (InBlock) {
    return __builtin_shufflevector(a, b, in_block_lane<W, C, Odd>(L)...);
  } else {
    return __builtin_shufflevector(a, b, block_lane<W, C, Odd>(L)...);
  }
}

// Step `Step` of transposed_maxima, then the steps after it: W / 2^(Step + 1) pairs of vectors into one each, lanes
// 2^Step apart (within 16-byte blocks while that is less than a block, then whole blocks). Recursion rather than a
// loop whose bound halves: GCC does not unroll that, and the shuffles' lanes must be constants.
template <class A, int Bytes, int Step>
[[gnu::always_inline]] inline void transposed_step(typename Simd<A, Bytes>::Value* m) {
  constexpr int W = Bytes / static_cast<int>(sizeof(A));
  constexpr int C = 16 / static_cast<int>(sizeof(A));
  constexpr int kPairs = W >> (Step + 1);
  constexpr bool kInBlock = (1 << Step) < C;
  constexpr auto lanes = std::make_index_sequence<W>{};
#pragma GCC unroll 16
  for (int i = 0; i < kPairs; ++i) {
    m[i] = keep_first(pick_lanes<W, C, kInBlock, 0>(m[2 * i], m[2 * i + 1], lanes),
                      pick_lanes<W, C, kInBlock, 1>(m[2 * i], m[2 * i + 1], lanes));
  }
  if constexpr (kPairs > 1) transposed_step<A, Bytes, Step + 1>(m);
}

// The maxima of the lanes of W = Bytes / sizeof(A) vectors m[0..W) (no NaN), as one vector: lane c is fold_pairs'
// maximum of m[c] keeping the first of equal values. Each step takes two neighbouring runs of a vector's lanes, the
// lower one first, as fold_pairs does, but for two vectors' lanes at once: first within 16-byte blocks (two vectors'
// even lanes against their odd lanes, the shufps pattern), then whole blocks. W - 1 steps of two shuffles and a
// comparison for W channels, where folding each alone takes log2(W) steps and a scalar out per channel.
template <class A, int Bytes>
[[gnu::always_inline]] inline typename Simd<A, Bytes>::Value transposed_maxima(typename Simd<A, Bytes>::Value* m) {
  transposed_step<A, Bytes, 0>(m);
  return m[0];
}

// One channel's running maxima lane by lane as max_streams<G, 4> takes them (n > one native vector), folded over its
// K = 4 vectors as it folds them, into one vector whose fold_pairs gives max_streams' value; NaNs seen are or-ed
// into nan.
template <class A>
[[gnu::always_inline]] inline typename Simd<A>::Value channel_lanes_max(const A* a, int64_t n, A start,
                                                                        typename Simd<A>::Mask& nan) {
  using S = Simd<A>;
  using V = typename S::Value;
  constexpr int N = S::kLength;
  constexpr int K = 4;
  auto nan_of = [](V v, V w) {
    if constexpr (kPairedNanCheck) return unordered(v, w);
    else return (v != v) | (w != w);
  };
  V m0 = S::splat(start);
  int64_t i = 0;
  if (n >= K * N) {
    V m[K];
    for (auto& v : m) v = m0;
    for (; i + K * N <= n; i += K * N) {
      V v[K];
      for (int k = 0; k < K; ++k) {
        v[k] = S::load(a + i + k * N);
        m[k] = v[k] > m[k] ? v[k] : m[k];
      }
      nan |= nan_of(v[0], v[1]) | nan_of(v[2], v[3]);
    }
    for (; i < n; i += N) {
      const V v = S::load(a + (i + N <= n ? i : n - N));
      m[0] = v > m[0] ? v : m[0];
      nan |= v != v;
    }
    m[2] = keep_first(m[2], m[3]);
    m[0] = keep_first(m[0], m[1]);
    return keep_first(m[0], m[2]);
  }
  auto pair = [&](V v, V w) {
    m0 = v > m0 ? v : m0;
    m0 = w > m0 ? w : m0;
    nan |= nan_of(v, w);
  };
  for (; i + 2 * N <= n; i += 2 * N) pair(S::load(a + i), S::load(a + i + N));
  if (i + N < n) {  // the last vector ends at n
    pair(S::load(a + i), S::load(a + n - N));
  } else if (i < n) {
    const V v = S::load(a + n - N);
    m0 = v > m0 ? v : m0;
    nan |= v != v;
  }
  return m0;
}

// The maxima of W = Bytes / sizeof(A) channels of n >= 2 elements each (channel c at a + c * n) into out[0..W), the
// values max_short_vectors (n <= W) or max_streams<G, 4> (n > W, native vectors only) give, from -inf; false if a NaN
// came by (out is then not written). Vectors narrower than the native ones hold whole channels only: n <= W.
template <class A, int Bytes>
[[gnu::always_inline]] inline bool max_channel_block(const A* a, int64_t n, A* out) {
  static_assert(Bytes <= kVectorBytes);
  using S = Simd<A, Bytes>;
  using V = typename S::Value;
  using M = typename S::Mask;
  constexpr int W = S::kLength;
  constexpr A kStart = -std::numeric_limits<A>::infinity();
  V m[W];
  M nan = {};
  auto whole_channels = [&] {  // each channel in one vector, the lanes past it at kStart
    V lane;
    for (int l = 0; l < W; ++l) lane[l] = static_cast<A>(l);
    const M inside = lane < static_cast<A>(n);
    const V fill = S::splat(kStart);
#pragma GCC unroll 16
    for (int c = 0; c < W; ++c) {
      const V v = load_first_of<A, Bytes>(a + c * n, n);
      nan |= v != v;
      m[c] = inside ? v : fill;
    }
  };
  if constexpr (Bytes < kVectorBytes) {
    whole_channels();
  } else if (n <= W) {
    whole_channels();
  } else {
#pragma GCC unroll 16
    for (int c = 0; c < W; ++c) m[c] = channel_lanes_max(a + c * n, n, kStart, nan);
  }
  using E = typename S::MaskElement;
  if (fold_halves<E, Bytes>(nan, [](auto low, auto high) { return low | high; }) != 0) return false;
  S::store(out, transposed_maxima<A, Bytes>(m));
  return true;
}

// NaN is sticky: once a lane holds NaN no comparison replaces it, as numpy's max propagates NaN.
template <class A>
inline A max_step(A m, A v) {
  return (v > m || v != v) ? v : m;
}

// max(running, a[0..n)), NaN if any is NaN: then the first NaN, as the sequential definition gives.
template <class A>
A max_block(const A* a, int64_t n, A running) {
  if (running != running) return running;
  if (n < Simd<A>::kLength) {
    for (int64_t i = 0; i < n; ++i) running = max_step(running, a[i]);
    return running;
  }
  A result;
  if (max_streams<1, 4>(a, 0, n, running, &result)) return result;
  for (int64_t j = 0;; ++j)  // rare
    if (a[j] != a[j]) return a[j];
}

// The largest key of n >= W halves into best, W lanes at a time in K vectors, the rest one vector at a time with the
// last one overlapping the one before (an integer max is the same in any order and with repeats); nan is set if a
// NaN's bits came by.
template <int W, int K, class Key>
[[gnu::always_inline]] inline void max_keys(const int16_t* bits, int64_t n, int16_t infinity_bits, Key key,
                                            int16_t& best, bool& nan) {
  using V = typename VectorOf<int16_t, 2 * W>::Type;
  auto load = [bits](int64_t i) {
    V v;
    std::memcpy(&v, bits + i, sizeof v);
    return v;
  };
  V m[K], nan_seen = {};
  for (auto& v : m) v = V{} + best;
  auto step = [&](V& running, V v) {
    const V kv = key(v);
    running = kv > running ? kv : running;
    nan_seen |= (v & 0x7fff) > infinity_bits;
  };
  int64_t i = 0;
  for (; i + K * W <= n; i += K * W) {
    if constexpr (K * W * 2 == 64) prefetch_narrow_stream<64>(bits + i);
    for (int k = 0; k < K; ++k) step(m[k], load(i + k * W));
  }
  for (; i < n; i += W) step(m[0], load(i + W <= n ? i : n - W));
  for (int k = 1; k < K; ++k) m[0] = m[k] > m[0] ? m[k] : m[0];
  best = max_of(best, fold_halves<int16_t, 2 * W>(m[0], [](auto a, auto b) { return a > b ? a : b; }));
  nan |= fold_halves<int16_t, 2 * W>(nan_seen, [](auto a, auto b) { return a | b; }) != 0;
}

// The fewest halves max_halves takes in a vector (16 bytes); shorter channels it scans one element at a time.
constexpr int64_t kShortestHalvesVector = 8;

// max over n 16-bit floats (float16 or bfloat16) without converting them: each value's bits map to a signed
// integer with the same order (negative values have their magnitude bits flipped), so the max is an integer max
// of 16 lanes per AVX2 vector (8 on SSE2, which has no float16 conversion instruction: converting in software
// cost more than ORT's own F16C casts). NaN (magnitude above infinity's bits) returns the first NaN, converted as the
// float path does; -0 ranks below +0, as IEEE 754's maximum has it. Channels shorter than a vector take narrower
// ones, down to 8 lanes.
template <class T>
T max_halves(const T* x, int64_t n) {
  constexpr int16_t kInfinityBits = std::is_same_v<T, Float16> ? 0x7c00 : 0x7f80;
  constexpr int N = Simd<int16_t>::kLength;
  const int16_t* bits = reinterpret_cast<const int16_t*>(x);
  auto key = [](auto v) { return v ^ ((v >> 15) & 0x7fff); };  // self-inverse
  int16_t best = std::numeric_limits<int16_t>::min();
  bool nan = false;
  if (n >= N) {
    max_keys<N, 4>(bits, n, kInfinityBits, key, best, nan);
  } else if (N > 16 && n >= 16) {
    max_keys<N / 2, 1>(bits, n, kInfinityBits, key, best, nan);
  } else if (N > kShortestHalvesVector && n >= kShortestHalvesVector) {
    max_keys<kShortestHalvesVector, 1>(bits, n, kInfinityBits, key, best, nan);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      best = max_of(best, static_cast<int16_t>(key(bits[i])));
      nan |= (bits[i] & 0x7fff) > kInfinityBits;
    }
  }
  if (nan) {
    for (int64_t j = 0; j < n; ++j) {
      if ((bits[j] & 0x7fff) > kInfinityBits) return from_acc<T>(to_acc<float>(x[j]));
    }
  }
  T result;
  const int16_t b = static_cast<int16_t>(key(best));
  std::memcpy(&result, &b, sizeof result);
  return result;
}

// max_halves' order-preserving integer keys of n 16-bit floats, as floats (exact: 16-bit integers), so that the
// float kernels' maxima of short channels give the keys of max_halves' maxima. Returns whether a NaN's bits came by
// (its key is no NaN: such a channel's maximum is max_halves' own).
template <class T>
bool halves_to_keys(const T* x, float* keys, int64_t n) {
  constexpr int32_t kInfinityBits = std::is_same_v<T, Float16> ? 0x7c00 : 0x7f80;
  const int16_t* bits = reinterpret_cast<const int16_t*>(x);
  int32_t nan = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = bits[i];
    keys[i] = static_cast<float>(b ^ ((b >> 15) & 0x7fff));
    nan |= (b & 0x7fff) > kInfinityBits ? 1 : 0;
  }
  return nan != 0;
}

// The 16-bit floats whose keys (halves_to_keys) are keys[0..n).
template <class T>
void keys_to_halves(const float* keys, T* y, int64_t n) {
  uint16_t* bits = reinterpret_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t k = static_cast<int32_t>(keys[i]);
    bits[i] = static_cast<uint16_t>(k ^ ((k >> 15) & 0x7fff));
  }
}

// The loader of streamed_channels' sums: float and double means in 32-byte loads on AVX-512 (see NarrowLoader; power
// sums, with more work per element, read as fast in 64-byte ones); float16 means without F16C in ScaledHalves'
// scaled domain (no multiply per vector, and one channel's partial sums and conversions fit SSE2's registers).
#if defined(__SSE2__) && !defined(__F16C__)
template <class T, Reduction R>
using StreamLoader = std::conditional_t<kScaledHalvesStream<T, R>, ScaledHalvesLoader, AccLoader<T>>;
#else
template <class T, Reduction R>
using StreamLoader = std::conditional_t<std::is_same_v<T, AccOf<T>> && R == Reduction::Average && kVectorBytes == 64,
                                        NarrowLoader<T, 32>, AccLoader<T>>;
#endif

// What a loader's sums are multiplied by to give the sums of the values (ScaledHalvesLoader's scale, else 1).
template <class Loader, class = void>
constexpr double kLoaderScale = 1;
template <class Loader>
constexpr double kLoaderScale<Loader, std::void_t<decltype(Loader::kScale)>> = Loader::kScale;

// The sums of G = kStreamedGroup<T, R> long channels side by side, each with the bits the one-channel path
// gives it; done[g] is false for a channel left to that path (a float lane overflow, a NaN, an Lp sum outside the range
// where it is trusted unscaled).
template <class T, Reduction R>
void streamed_channels(const T* x, int64_t size, T* y, const LpNorm& lp, AccOf<T>* buffer, bool* done) {
  using A = AccOf<T>;
  constexpr int G = kStreamedGroup<T, R>;
  for (int g = 0; g < G; ++g) done[g] = false;
  // sum over [begin, size) of map(x), per channel in blocks of kBlock as mapped_sum_elements takes them
  auto block_totals = [&](int64_t begin, auto map, double* totals) {
    for (int64_t off = begin; off < size; off += kBlock) {
      const int64_t n = min_of(kBlock, size - off);
      StreamLoader<T, R> loads[G];
      double sums[G];
      if (n >= 2 * kLanes<A>) {
#if defined(__SSE2__) && !defined(__F16C__)
        if constexpr (kWordHalvesStream<T, R>) sums[0] = half_word_stream_sum(x + off, n, map, loads[0]);
        else
#endif
          mapped_sum_streams<G>(x + off, size, n, map, loads, sums);
        for (int g = 0; g < G; ++g) sums[g] *= kLoaderScale<StreamLoader<T, R>>;
      } else {
        for (int g = 0; g < G; ++g) sums[g] = mapped_sum_block(x + g * size + off, n, map, loads[g]);
      }
      for (int g = 0; g < G; ++g) {  // a block the fast conversion did not cover: as mapped_sum_elements
        if (!loads[g].exact()) sums[g] = mapped_sum_block(acc_view(x + g * size + off, buffer, n), n, map);
        totals[g] += sums[g];
      }
    }
  };
  if constexpr (R == Reduction::Average) {
    double totals[G] = {};
#if defined(__SSE2__) && !defined(__F16C__)
    // block_totals' sums, with one check of the conversion for the channel instead of one per block: a block with an
    // infinity or NaN, summed again converted, makes the total infinite or NaN, and the channel goes to one_channel
    if constexpr (kScaledHalvesStream<T, R>) {
      if (ScaledHalves::kept_subnormals()) {
        ScaledHalvesLoader load;
        for (int64_t off = 0; off < size; off += kBlock) {
          const int64_t n = min_of(kBlock, size - off);
          totals[0] += n >= 2 * kLanes<A>
                           ? half_word_stream_sum(x + off, n, Identity{}, load) * ScaledHalvesLoader::kScale
                           : mapped_sum_block(x + off, n, Identity{});
        }
        done[0] = load.halves.finite() && std::isfinite(totals[0]);
        if (done[0]) y[0] = from_acc<T>(totals[0] / static_cast<double>(size));
        return;
      }
    }
#endif
    block_totals(0, Identity{}, totals);
    for (int g = 0; g < G; ++g) {
      if (std::isfinite(totals[g])) y[g] = from_acc<T>(totals[g] / static_cast<double>(size));
      done[g] = std::isfinite(totals[g]);
    }
  } else if constexpr (R == Reduction::Max) {
    A maxima[G];
    if constexpr (std::is_same_v<T, A>) {
      // paired with 16-byte vectors, whose two running maxima otherwise bind the loop by their selects' latency (with
      // 64-byte ones the paired loop measured slower)
      constexpr bool kPaired = kVectorBytes == 16;
      if (max_streams<G, 2, A, kPaired>(x, size, size, -std::numeric_limits<A>::infinity(), maxima)) {
        for (int g = 0; g < G; ++g) y[g] = maxima[g], done[g] = true;
      }
    }
  } else {  // Lp: the one-channel path's unscaled case, its probe first
    if (needs_scaled_lp(lp)) return;
    with_power(lp, [&](auto power) {
      const int64_t first = min_of(int64_t{kLanes<A>}, size);  // as the one-channel path takes it
      double probes[G], rest[G] = {};
      for (int g = 0; g < G; ++g) {
        probes[g] = mapped_sum_elements(x + g * size, first, power, buffer);
        if (!lp_sum_trusted<A>(probes[g])) return;
      }
      block_totals(first, power, rest);
      for (int g = 0; g < G; ++g) {
        const double total = probes[g] + rest[g];
        if (lp_sum_trusted<A>(total)) y[g] = from_acc<T>(lp_root(total, lp)), done[g] = true;
      }
    });
  }
}

// streamed_channels with everything it calls inlined (the block sums, the fold, the powers): for float and double
// power sums on every path and means on SSE2, where a call per block (its spills of the partial sums, its fold through
// memory) measured 5-20% of a 4 MB tensor's time; elsewhere as fast or slower (16-bit floats' Lp sums on AVX2).
template <class T, Reduction R>
constexpr bool kInlinedStream =
    std::is_same_v<T, AccOf<T>> && (R == Reduction::Lp || (R == Reduction::Average && kVectorBytes == 16));
template <class T, Reduction R>
[[gnu::flatten]] void streamed_channels_inlined(const T* x, int64_t size, T* y, const LpNorm& lp, AccOf<T>* buffer,
                                                bool* done) {
  streamed_channels<T, R>(x, size, y, lp, buffer, done);
}

// The sums of `count` channels of 2 kLanes <= n <= kBlock float or double elements each (channel j at a + j * n),
// with the bits mapped_sum_block gives each, in one loop with everything inlined: mapped_sum_streams, called from many
// places, is otherwise a call per channel, and its loads, fold and tail then cost a short channel more than its sum.
template <class T>
[[gnu::flatten]] void channel_sums(const T* a, int64_t count, int64_t n, double* sums) {
  AccLoader<T> load;
  for (int64_t j = 0; j < count; ++j) mapped_sum_streams<1>(a + j * n, 0, n, Identity{}, &load, sums + j);
}

template <class T, Reduction R>
void global_pool(const void* xv, void* yv, int64_t channels, int64_t size, const LpNorm& lp) {
  using A = AccOf<T>;
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  if constexpr (!std::is_same_v<T, A> && R != Reduction::Max) {
    // Channels of 16-bit floats shorter than a streamed float channel: converted to float a block of channels at a
    // time (channels lie back to back), then pooled as float, which sums the same values in the same order (one
    // block, one channel at a time) and rounds the float result to T as from_acc does.
    if (size * static_cast<int64_t>(sizeof(A)) < kStreamMinBytes) {
      A converted[kBlock], pooled[kBlock];
      auto convert_and_pool = [&](int64_t begin, int64_t end) {
        const int64_t per_block = kBlock / size;
        for (int64_t c = begin; c < end; c += per_block) {
          const int64_t count = min_of(per_block, end - c);
          convert_block(x + c * size, converted, count * size);
          global_pool<A, R>(converted, pooled, count, size, lp);
          store_block(pooled, y + c, count);
        }
      };
#if defined(__SSE2__) && !defined(__AVX512F__)
      if constexpr (std::is_same_v<T, Float16> && R == Reduction::Average) {
        if (size >= 8) {  // summed as converted, without a converted copy to store and read again
          for (int64_t c = 0; c < channels; c += kScaledMeansGroup) {
            const int64_t count = min_of(kScaledMeansGroup, channels - c);
            if (scaled_half_means(x + c * size, count, size, pooled)) store_block(pooled, y + c, count);
            else convert_and_pool(c, c + count);
          }
          return;
        }
      }
#endif
      convert_and_pool(0, channels);
      return;
    }
  }
  A buffer[kBlock];
  constexpr int G = kStreamedGroup<T, R>;
  auto one_channel = [&](int64_t c) {
    const T* xc = x + c * size;
    if constexpr (R == Reduction::Max && sizeof(T) == 2) {
      y[c] = max_halves(xc, size);
      return;
    }
    double result = 0;
    if constexpr (R == Reduction::Average) {
      double total = 0;
      for (int64_t off = 0; off < size; off += kBlock) {
        const int64_t n = min_of(kBlock, size - off);
        total += mapped_sum_elements(xc + off, n, Identity{}, buffer);
      }
      double scale = 1;
      if (!std::isfinite(total)) {  // float lanes can overflow though the mean is finite: redo in double
        total = 0;
        for (int64_t i = 0; i < size; ++i) total += static_cast<double>(to_acc<A>(xc[i]));
      }
      if (std::isinf(total)) {  // so can double's (huge doubles): scaled by 2^-64 (an inf input stays inf)
        total = 0;
        scale = 0x1p64;
        for (int64_t i = 0; i < size; ++i) total += static_cast<double>(to_acc<A>(xc[i])) * 0x1p-64;
      }
      result = total / static_cast<double>(size) * scale;
    } else if constexpr (R == Reduction::Max) {
      A running = -std::numeric_limits<A>::infinity();
      for (int64_t off = 0; off < size; off += kBlock) {
        const int64_t n = min_of(kBlock, size - off);
        running = max_block(acc_view(xc + off, buffer, n), n, running);
      }
      result = running;
    } else {
      auto exact = [&] {
        return lp_scaled(
            [&](auto&& f) {
              for (int64_t i = 0; i < size; ++i) f(static_cast<double>(to_acc<A>(xc[i])));
            },
            lp);
      };
      // sum over [begin, end) of |x * 2^e|^p, the scaling inside the same loop
      auto power_total = [&](int e, int64_t begin, int64_t end) {
        double total = 0;
        const PowerOfTwo<A> f(e);
        with_power(lp, [&](auto power) {
          for (int64_t off = begin; off < end; off += kBlock) {
            const int64_t n = min_of(kBlock, end - off);
            const T* a = xc + off;
            if (e == 0) total += mapped_sum_elements(a, n, power, buffer);
            else if (f.second == 1)
              total += mapped_sum_elements(a, n, [&](auto v) { return power(v * f.first); }, buffer);
            else total += mapped_sum_elements(a, n, [&](auto v) { return power(v * f.first * f.second); }, buffer);
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
        const int64_t first = min_of(int64_t{kLanes<A>}, size);
        int e = 0;
        double total = power_total(0, 0, first);
        if (lp_sum_trusted<A>(total)) {
          total += power_total(0, first, size);
        } else {
          e = normalising_exponent(largest_magnitude(xc, min_of(kBlock, size)));
          total = power_total(e, 0, size);
        }
        A largest = -1;  // the channel's largest magnitude, once known
        if (!lp_sum_trusted<A>(total)) {
          largest = largest_magnitude(xc, size);
          const int channel_e = normalising_exponent(largest);
          if (channel_e != e) {
            e = channel_e;
            total = power_total(e, 0, size);
          }
        }
        if (lp_sum_trusted<A>(total)) {
          result = std::ldexp(lp_root(total, lp), -e);
        } else if (total == 0 && largest == 0) {
          result = 0;  // every element a zero (a NaN would have made the total NaN): the exact path's +0
        } else {
          result = exact();
        }
      }
    }
    y[c] = from_acc<T>(result);
  };
  if constexpr (std::is_same_v<T, A>) {
    // Short channels (one block each, below the streamed length), in one loop with nothing per channel but
    // one_channel's own arithmetic for them; a channel whose sum is not finite or not trusted goes to one_channel.
    const bool short_channels = size * static_cast<int64_t>(sizeof(T)) < kStreamMinBytes;
    static_assert(kStreamMinBytes / sizeof(T) <= kBlock, "a short channel is one block");
    if (R == Reduction::Average && size == 1) {
      // 1x1 planes: a group of channels' totals (short_sum of one element: 0 + x, so -0 becomes +0), then their
      // means in one loop of vector conversions; a total that is not finite goes to one_channel
      constexpr int64_t kGroup = 64;
      for (int64_t c0 = 0; c0 < channels; c0 += kGroup) {
        const int64_t count = min_of(kGroup, channels - c0);
        double totals[kGroup];
        for (int64_t j = 0; j < count; ++j) totals[j] = 0.0 + short_sum(x + c0 + j, 1, Identity{});
        bool finite = true;
        for (int64_t j = 0; j < count; ++j) {
          finite &= std::isfinite(totals[j]);
          y[c0 + j] = from_acc<T>(totals[j] / 1.0);
        }
        if (!finite) {
          for (int64_t j = 0; j < count; ++j)
            if (!std::isfinite(totals[j])) one_channel(c0 + j);
        }
      }
      return;
    }
    if (R == Reduction::Average && size < 2 * kLanes<A>) {
      int64_t c = 0;
      if constexpr (std::is_same_v<T, float>) {
        switch (size % 8) {
          case 0: c = short_means<0>(x, y, channels, size, one_channel); break;
          case 1: c = short_means<1>(x, y, channels, size, one_channel); break;
          case 2: c = short_means<2>(x, y, channels, size, one_channel); break;
          case 3: c = short_means<3>(x, y, channels, size, one_channel); break;
          case 4: c = short_means<4>(x, y, channels, size, one_channel); break;
          case 5: c = short_means<5>(x, y, channels, size, one_channel); break;
          case 6: c = short_means<6>(x, y, channels, size, one_channel); break;
          default: c = short_means<7>(x, y, channels, size, one_channel); break;
        }
      }
      for (; c < channels; ++c) {
        double total = 0;
        total += short_sum(x + c * size, size, Identity{});
        if (std::isfinite(total)) y[c] = from_acc<T>(total / static_cast<double>(size));
        else one_channel(c);
      }
      return;
    }
    if (R == Reduction::Average && short_channels) {
      // from 2 kLanes elements on: channel_sums' totals of a group of channels, then their means; a total that is
      // not finite goes to one_channel
      constexpr int64_t kGroup = 64;
      for (int64_t c0 = 0; c0 < channels; c0 += kGroup) {
        const int64_t count = min_of(kGroup, channels - c0);
        double totals[kGroup];
        channel_sums(x + c0 * size, count, size, totals);
        bool finite = true;
        for (int64_t j = 0; j < count; ++j) {
          finite &= std::isfinite(totals[j]);
          y[c0 + j] = from_acc<T>(totals[j] / static_cast<double>(size));
        }
        if (!finite) {
          for (int64_t j = 0; j < count; ++j)
            if (!std::isfinite(totals[j])) one_channel(c0 + j);
        }
      }
      return;
    }
    if (R == Reduction::Max && short_channels) {
      // kShortMaxGroup channels of at least a vector side by side, each exactly as max_block takes it (the same
      // K = 4 vectors per channel): a short channel's few loads and its fold are a chain of dependent steps, and
      // independent channels fill the gaps of each other's chains
      constexpr A kStart = -std::numeric_limits<A>::infinity();
      auto scanned = [&](int64_t channel) { return from_acc<T>(max_block(x + channel * size, size, kStart)); };
      int64_t c = 0;
      if (size == 1) {  // max(-inf, v) is v itself, NaN and -inf included
        std::memcpy(y, x, static_cast<size_t>(channels) * sizeof(T));
        return;
      }
      // blocks of as many channels as a vector of that width has lanes, their maxima stored as one vector
      auto blocks = [&](auto width) {
        constexpr int kWidth = decltype(width)::value;
        constexpr int64_t kCount = kWidth / static_cast<int>(sizeof(A));
        for (; c + kCount <= channels; c += kCount) {
          if (!max_channel_block<A, kWidth>(x + c * size, size, y + c)) {
            for (int64_t g = 0; g < kCount; ++g) y[c + g] = scanned(c + g);
          }
        }
      };
      if (size <= Simd<A>::kLength) {
        // in the narrowest vectors that hold a channel (16 bytes: 4 floats, 2 doubles; 32 bytes); a channel of one
        // whole vector (4x4 floats with AVX-512) too, where max_streams' four running maxima would be folded for one
        auto short_vectors = [&](const A* a, A* maxima) {
          const int64_t bytes = size * static_cast<int64_t>(sizeof(A));
          if constexpr (kVectorBytes > 32) {
            if (bytes <= 32 && bytes > 16) return max_short_vectors<kShortMaxGroup, A, 32>(a, size, kStart, maxima);
          }
          if constexpr (kVectorBytes > 16) {
            if (bytes <= 16) return max_short_vectors<kShortMaxGroup, A, 16>(a, size, kStart, maxima);
          }
          return max_short_vectors<kShortMaxGroup>(a, size, kStart, maxima);
        };
        const int64_t bytes = size * static_cast<int64_t>(sizeof(A));
        if (bytes <= 16) blocks(std::integral_constant<int, 16>{});
        else if (bytes <= 32) blocks(std::integral_constant<int, kVectorBytes >= 32 ? 32 : kVectorBytes>{});
        else blocks(std::integral_constant<int, kVectorBytes>{});
        for (; c + kShortMaxGroup <= channels; c += kShortMaxGroup) {
          A maxima[kShortMaxGroup];
          if (short_vectors(x + c * size, maxima)) {
            for (int g = 0; g < kShortMaxGroup; ++g) y[c + g] = from_acc<T>(maxima[g]);
          } else {
            for (int g = 0; g < kShortMaxGroup; ++g) y[c + g] = scanned(c + g);
          }
        }
      } else if (size * static_cast<int64_t>(sizeof(A)) <= kShortMaxGroupBytes) {
        // not on 16-byte vectors once a channel fills max_streams' four running maxima: there its two channels side
        // by side keep more loads in flight than one channel at a time
        if (kVectorBytes > 16 || size < 4 * Simd<A>::kLength) blocks(std::integral_constant<int, kVectorBytes>{});
        for (; c + kShortMaxGroup <= channels; c += kShortMaxGroup) {
          A maxima[kShortMaxGroup];
          if (max_streams<kShortMaxGroup, 4>(x + c * size, size, size, kStart, maxima)) {
            for (int g = 0; g < kShortMaxGroup; ++g) y[c + g] = from_acc<T>(maxima[g]);
          } else {  // a NaN among them: each channel alone finds its first
            for (int g = 0; g < kShortMaxGroup; ++g) y[c + g] = scanned(c + g);
          }
        }
      }
      for (; c < channels; ++c) y[c] = scanned(c);
      return;
    }
    if (R == Reduction::Lp && short_channels && !needs_scaled_lp(lp)) {
      with_power(lp, [&](auto power) {
        const int64_t first = min_of(int64_t{kLanes<A>}, size);  // the probe, as one_channel takes it
        for (int64_t c = 0; c < channels; ++c) {
          const T* xc = x + c * size;
          double total = 0, rest = 0;
          total += mapped_sum_block(xc, first, power);
          if (lp_sum_trusted<A>(total)) {
            if (first < size) rest += mapped_sum_block(xc + first, size - first, power);
            total += rest;
          }
          if (lp_sum_trusted<A>(total)) y[c] = from_acc<T>(root_for(power, total));
          else one_channel(c);
        }
      });
      return;
    }
  }
  if constexpr (R == Reduction::Max && sizeof(T) == 2) {
    if (size == 1) {  // 1x1 planes: each channel's element, a NaN converted as max_halves returns it
      constexpr uint16_t kInfinityBits = std::is_same_v<T, Float16> ? 0x7c00 : 0x7f80;
      const uint16_t* bits = reinterpret_cast<const uint16_t*>(x);
      bool nan = false;
      for (int64_t j = 0; j < channels; ++j) nan |= (bits[j] & 0x7fff) > kInfinityBits;
      std::memcpy(y, x, static_cast<size_t>(channels) * sizeof(T));
      if (nan) {
        for (int64_t j = 0; j < channels; ++j)
          if ((bits[j] & 0x7fff) > kInfinityBits) y[j] = max_halves(x + j, 1);
      }
      return;
    }
    if (size < kShortestHalvesVector) {
      // channels shorter than max_halves' narrowest vector, which it scans element by element: their keys' maxima
      // by the float kernel's blocks of channels side by side
      float keys[kBlock], maxima[kBlock];
      const int64_t per_block = kBlock / size;
      for (int64_t c = 0; c < channels; c += per_block) {
        const int64_t count = min_of(per_block, channels - c);
        const bool nan = halves_to_keys(x + c * size, keys, count * size);
        global_pool<float, R>(keys, maxima, count, size, lp);
        keys_to_halves(maxima, y + c, count);
        if (nan) {
          for (int64_t j = c; j < c + count; ++j)
            if (halves_to_keys(x + j * size, keys, size)) y[j] = max_halves(x + j * size, size);
        }
      }
      return;
    }
  }
  int64_t c = 0;
  constexpr bool kStreamed = !(R == Reduction::Max && sizeof(T) == 2);  // max_halves is no sum of lanes
  if (kStreamed && size * static_cast<int64_t>(sizeof(T)) >= kStreamMinBytes) {
    for (; c + G <= channels; c += G) {
      bool done[G];
      if constexpr (kInlinedStream<T, R>) streamed_channels_inlined<T, R>(x + c * size, size, y + c, lp, buffer, done);
      else streamed_channels<T, R>(x + c * size, size, y + c, lp, buffer, done);
      for (int g = 0; g < G; ++g)
        if (!done[g]) one_channel(c + g);
    }
  }
  for (; c < channels; ++c) one_channel(c);
}

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
