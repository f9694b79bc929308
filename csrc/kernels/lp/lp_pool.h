// LpPool: powers, window sums, roots per plane; untrusted windows recomputed exactly.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#if defined(__SSE2__) || defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/common/diagnostics.h"
#include "kernels/common/dtypes.h"
#include "kernels/common/lp_math.h"
#include "kernels/common/per_isa.h"
#include "kernels/common/scratch.h"
#include "kernels/common/simd.h"
#include "kernels/common/window_geometry.h"
#include "kernels/common/windows.h"
#include "kernels/global/global_pools.h"
#include "kernels/kernels.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// The scaled double form of window i of plane xp: for windows the fast sums cannot be trusted with.
template <class T>
AccOf<T> exact_window(const T* xp, const PoolGeometry& g, int64_t i, int64_t* index, const LpNorm& lp) {
  using A = AccOf<T>;
  return static_cast<A>(lp_scaled(
      [&](auto&& f) {
        visit_window(g, i, index, [&](int64_t offset) { f(static_cast<double>(to_acc<A>(xp[offset]))); });
      },
      lp));
}

// A probe of the plane's first elements: if their powers already underflow or overflow, the exponent e that
// normalises the plane's largest magnitude (the plane is then scaled by 2^e from the start), else 0.
template <class T>
int probe_exponent(const T* xp, int64_t size, AccOf<T>* buffer, const LpNorm& lp) {
  const int64_t n = min_of(kBlock, size);
  const AccOf<T>* probe = acc_view(xp, buffer, n);
  double probe_sum = 0;
  with_power(lp, [&](auto power) { probe_sum = power_sum_block(probe, n, power); });
  return lp_sum_trusted<AccOf<T>>(probe_sum) ? 0 : normalising_exponent(largest_magnitude(xp, size));
}

// ---- the scale of a plane: one protocol for every path ----------------------------------------------------
//
// Why: |x|^p of subnormal or huge inputs underflows or overflows in the accumulator type, and window sums made of
// such powers cannot be trusted. Rather than recompute most windows exactly (slow), the plane is multiplied by 2^e
// (exact) before the powers and its roots by 2^-e after. e comes from a probe of the plane's first elements
// (probe_exponent); when more than 1/16 of the plane's windows still come out untrusted (inputs the probe did not
// reveal), the plane is redone once with e normalising its largest magnitude. The windows left untrusted after
// that are recomputed exactly by the path (exact_window).

// One attempt at one plane: what a path's row loop needs to know.
template <class T>
struct PlaneAttempt {
  int64_t plane;                  // the plane's index
  const T* x;                     // its input
  T* y;                           // its output
  int e;                          // powers are of x * 2^e, roots are multiplied by 2^-e
  PowerOfTwo<AccOf<T>> up, down;  // 2^e and 2^-e as factors
};

// Where a plane's first element of nonzero magnitude below a limit (smallest_safe_magnitude: its term underflows) is,
// found as far as a path's windows have reached: over elements the path has just read (in cache), never the whole
// plane ahead of it, and no further once one is found.
template <class T>
struct TinyScan {
  int64_t scanned = 0;                                  // elements [0, scanned) searched
  int64_t first = std::numeric_limits<int64_t>::max();  // the first such element's index, once found

  // Whether elements [0, reach) hold none.
  bool none_up_to(const T* plane, int64_t reach, AccOf<T> limit) {
    if (first == std::numeric_limits<int64_t>::max() && reach > scanned) {
      const int64_t at = first_below(plane + scanned, reach - scanned, limit);
      if (at < reach - scanned) first = scanned + at;
      scanned = reach;
    }
    return first >= reach;
  }
};

// Which window sums of one attempt at a plane its path recomputes exactly, and whether the attempt is abandoned for a
// new scale: a path's loops count the sums window_sum_trusted rejects, and where they found any the path calls
// recompute_untrusted. A sum of exactly +0 is neither recomputed nor counted towards a redo (which cannot help it)
// when no element the windows of its output row and the rows above read (the plane's rows up to that row's reach; a
// 3-D plane: all of it) has a nonzero magnitude below `safe` (smallest_safe_magnitude at the attempt's scale): its
// root, +0, is already the exact one. That depends on the window's row only, not on a path's blocks, so which windows
// are recomputed, and whether the plane is redone, are the same on every path: the same bits on every ISA.
template <class T, class RedoNeeded>
class PlaneTrust {
 public:
  using A = AccOf<T>;
  PlaneTrust(const PlaneAttempt<T>& attempt, const PoolGeometry& g, const LpNorm& lp, A safe, RedoNeeded& redo_needed)
      : attempt_(attempt), g_(g), lp_(lp), safe_(safe), redo_needed_(redo_needed), by_rows_(g.axes.size() <= 2) {
    if (by_rows_) rc_ = rows_and_columns(g);
    row_windows_ = by_rows_ ? rc_.cols.out : g.out_size;
  }

  // For n window sums (sum_at(j): the plane's output first + j) of which the path's loop found some untrusted:
  // store(j, exact_window of output first + j) for each still untrusted (index: the path's scratch for
  // visit_window). False when the attempt is abandoned (more than 1/16 of the plane's windows untrusted): the path
  // returns at once and runs again at the new scale.
  template <class SumAt, class Store>
  bool recompute_untrusted(int64_t n, int64_t first, SumAt sum_at, int64_t* index, Store store) {
    auto recompute = [&](int64_t j) { store(j, exact_window(attempt_.x, g_, first + j, index, lp_)); };
    int64_t bad = 0, zeros = 0;
    count(0, n, sum_at, bad, zeros);
    // Every row's zeros exact when the last row's are (the usual case: ReLU outputs), else row by row.
    const bool all_rows = zeros == 0 || zeros_exact((first + n - 1) / row_windows_);
    if (all_rows) return settle(0, n, bad - zeros, zeros > 0, sum_at, recompute);
    for (int64_t j = 0; j < n;) {
      const int64_t row = (first + j) / row_windows_;
      const int64_t end = min_of(n, (row + 1) * row_windows_ - first);
      bad = zeros = 0;
      count(j, end, sum_at, bad, zeros);
      const bool skip_zeros = zeros > 0 && zeros_exact(row);
      if (!settle(j, end, skip_zeros ? bad - zeros : bad, skip_zeros, sum_at, recompute)) return false;
      j = end;
    }
    return true;
  }

 private:
  // bad: sums window_sum_trusted rejects, zeros: sums of exactly +0 among them, over sums [j, end); counted without
  // branches (zero and nonzero sums alternate unpredictably)
  template <class SumAt>
  static void count(int64_t j, int64_t end, SumAt sum_at, int64_t& bad, int64_t& zeros) {
    for (int64_t k = j; k < end; ++k) {
      const A sum = sum_at(k);
      bad += !window_sum_trusted(sum);
      zeros += sum == A(0);
    }
  }
  // whether zero sums of output row `row` are exact
  bool zeros_exact(int64_t row) {
    const int64_t reach = by_rows_ ? rows_reach(rc_, row + 1) : g_.in_size;
    return scan_.none_up_to(attempt_.x, reach, safe_);
  }
  // the bad untrusted sums of [j, end) (zero sums left out when skip_zeros) recomputed, unless the attempt is abandoned
  template <class SumAt, class Recompute>
  bool settle(int64_t j, int64_t end, int64_t bad, bool skip_zeros, SumAt sum_at, Recompute recompute) {
    if (bad == 0) return true;
    if (redo_needed_(bad)) return false;
    count_lp_windows_recomputed(static_cast<uint64_t>(bad));
    for (int64_t k = j; k < end; ++k) {
      const A sum = sum_at(k);
      if (!window_sum_trusted(sum) && !(skip_zeros && sum == A(0))) recompute(k);
    }
    return true;
  }

  const PlaneAttempt<T>& attempt_;
  const PoolGeometry& g_;
  const LpNorm& lp_;
  A safe_;
  RedoNeeded& redo_needed_;
  bool by_rows_;  // a 1-D or 2-D plane: zero sums settled by output row (rc_), else by the whole plane
  RowsAndColumns rc_;
  int64_t row_windows_ = 0;  // windows per output row (a 3-D plane: one row of all its windows)
  TinyScan<T> scan_;
};

// Runs rows(attempt, power, trust) for each plane of x (more than once for a plane redone at a new scale), power
// being lp's (with_power) and trust a PlaneTrust. rows computes and stores all of the plane's outputs; after a row
// (or the whole plane) whose loop found untrusted sums it calls trust.recompute_untrusted, and returns at once when
// that gives false (the attempt is abandoned; rows is called again with the new scale).
template <class T, class Rows>
void for_each_plane_scaled(const T* x, T* y, int64_t planes, const PoolGeometry& g, const LpNorm& lp,
                           AccOf<T>* probe_buffer, Rows rows) {
  using A = AccOf<T>;
  // smallest_safe_magnitude at scale 2^safe_e, found once per scale (the planes' e is mostly 0)
  int safe_e = std::numeric_limits<int>::min();
  A safe = 0;
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xp = x + plane * g.in_size;
    int e = probe_exponent(xp, g.in_size, probe_buffer, lp);
    for (bool first_attempt = true;; first_attempt = false) {
      const PlaneAttempt<T> attempt{plane, xp, y + plane * g.out_size, e, PowerOfTwo<A>(e), PowerOfTwo<A>(-e)};
      int64_t untrusted = 0;
      bool settled = !first_attempt;  // no redo left to decide: the plane keeps this scale
      bool redo = false;
      auto redo_needed = [&](int64_t bad) {
        untrusted += bad;
        if (settled || untrusted * 16 <= g.out_size) return false;
        settled = true;
        const int plane_e = normalising_exponent(largest_magnitude(xp, g.in_size));
        if (plane_e == e) return false;
        e = plane_e;
        redo = true;
        return true;
      };
      with_power(lp, [&](auto power) {
        if (safe_e != e) safe = smallest_safe_magnitude(power, attempt.up), safe_e = e;
        PlaneTrust<T, decltype(redo_needed)> trust(attempt, g, lp, safe, redo_needed);
        rows(attempt, power, trust);
      });
      if (!redo) break;
    }
  }
}

// dst[i] = |src[i] * 2^e|^p for n elements (up = 2^e, skipped when e == 0), converted to the accumulator type
// first when T is not it: the powered input rows of both 1-D/2-D paths.
template <class T, class Power>
void powered_row(const T* src, AccOf<T>* dst, int64_t n, Power power, int e, const PowerOfTwo<AccOf<T>>& up) {
  if constexpr (std::is_same_v<T, AccOf<T>>) {  // no conversion: the powers straight from the input
    if (e == 0) {
      for (int64_t i = 0; i < n; ++i) dst[i] = power(src[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = power(src[i] * up.first * up.second);
    }
  } else {
    load_block(src, dst, n);
    if (e == 0) {
      for (int64_t i = 0; i < n; ++i) dst[i] = power(dst[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = power(dst[i] * up.first * up.second);
    }
  }
}

// out[j] = the root of sum_at(j) times 2^-e (down) for n window sums, the roots fused_cube_root cannot vouch for
// settled; returns how many of the sums are untrusted (n < 2^31).
template <class A, class Power, class SumAt>
[[gnu::always_inline]] inline int32_t roots_of_sums(Power power, int64_t n, SumAt sum_at, A* out, int e,
                                                    const PowerOfTwo<A>& down) {
  int32_t bad = 0;  // 32-bit lanes count in one instruction per vector
  int32_t unsure = 0;
  if (e == 0) {
    for (int64_t j = 0; j < n; ++j) {
      const A sum = sum_at(j);
      bad += !window_sum_trusted(sum);
      out[j] = loop_root(power, sum, unsure);
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const A sum = sum_at(j);
      bad += !window_sum_trusted(sum);
      out[j] = loop_root(power, sum, unsure) * down.first * down.second;
    }
  }
  settle_roots(power, unsure, n, sum_at,  // (with e == 0 both factors are 1: the root itself)
               [&](int64_t j, A root) { out[j] = root * down.first * down.second; });
  return bad;
}

// 1-D and 2-D planes: streamed an output row at a time (scratch of a few rows, not of a plane). Each input row's
// |x * 2^e|^p is computed once; windows whose sum is not trustworthy are recomputed exactly on the spot, and when
// more than 1/16 of a plane's windows are (subnormal or huge inputs the first elements did not reveal) the plane
// is redone once with e normalising its largest magnitude.
template <class T>
void lp_pool_streamed(const T* x, T* y, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  using A = AccOf<T>;
  const RowsAndColumns rc = rows_and_columns(g);
  const int64_t sums_scratch = stream_scratch(rc, 1);
  const int64_t strip = strip_columns(rc.cols, 1);
  ScratchBuffer memory(sizeof(int64_t) * static_cast<size_t>(kVisitScratch * g.axes.size() + stream_tags(rc)) +
                       sizeof(A) * static_cast<size_t>(sums_scratch + strip + kBlock));
  int64_t* index = memory.as<int64_t>();  // 8-byte values first, so every array is aligned for its type
  int64_t* tags = index + kVisitScratch * g.axes.size();
  A* sums_memory = reinterpret_cast<A*>(tags + stream_tags(rc));
  A* roots = sums_memory + sums_scratch;
  A* probe_buffer = roots + strip;
  const int64_t row_length = rc.cols.in;
  const int64_t out_row_length = rc.cols.out;
  auto plane_rows = [&](const PlaneAttempt<T>& a, auto power, auto& trust) {
    const T* xp = a.x;
    T* yp = a.y;
    const int e = a.e;
    const PowerOfTwo<A> up = a.up, down = a.down;
    auto load = [&](int64_t row, int64_t first, int64_t n, A* dst) {
      powered_row(xp + row * row_length + first, dst, n, power, e, up);
    };
    auto finish = [&](int64_t oh, int64_t begin, int64_t n, const A* sums) {
      const int64_t bad = roots_of_sums(power, n, [&](int64_t j) { return sums[j]; }, roots, e, down);
      if (bad > 0 && !trust.recompute_untrusted(
                         n, oh * out_row_length + begin, [&](int64_t j) { return sums[j]; }, index,
                         [&](int64_t j, A exact) { roots[j] = exact; })) {
        return false;
      }
      store_block(static_cast<const A*>(roots), yp + oh * out_row_length + begin, n);
      return true;
    };
    stream_window_sums(rc, 1, sums_memory, tags, load, finish);
  };
  for_each_plane_scaled(x, y, planes, g, lp, probe_buffer, plane_rows);
}

// ---- 1-D and 2-D planes, a block of output rows at a time ---------------------------------------------

// Layout of the blocked path. Each input row's |x|^p goes into a row of `pitch` values: zeros, the row, zeros,
// with pitch a multiple of the column stride, so that the column sums of all rows of a block are one loop over
// rows x out_pitch outputs (out_pitch = pitch / stride; the few outputs past cols.out in each row read into the
// next row's padding and are ignored). With row stride 1 the row sums of a block are one loop too. Padding takes
// part as zeros, which adds exactly nothing (sums of |x|^p are >= +0 or NaN), so the sums and their order are
// those of stream_window_sums: same bits. Scratch: the rows of one block (bounded in row_blocks), whatever the plane.
struct RowBlocks {
  int64_t pitch = 0;      // values per powered row
  int64_t out_pitch = 0;  // pitch / cols.stride >= cols.out
  int64_t block = 0;      // output rows per block
  int64_t span = 0;       // input rows one block's windows reach: (block - 1) * rows.stride + rows.kernel
  int64_t slack = 0;      // values read past the last powered row by the ignored outputs
};

// Output values a block aims at: long enough loops, small enough to stay in L1 with the other buffers.
constexpr int64_t kBlockValues = 1024;
// Longest input row the blocked path takes (longer rows, e.g. 1-D planes, stream in strips instead).
constexpr int64_t kBlockedRowLimit = 16384;

inline bool row_blocks(const RowsAndColumns& rc, RowBlocks& rb) {
  const AxisGeometry& rows = rc.rows;
  const AxisGeometry& cols = rc.cols;
  // Every input row of a block's span is used (row stride <= kernel, no row dilation), kernels and pads are not
  // longer than the input, and rows are of ordinary length: scratch stays a few rows.
  if (rows.dilation != 1 || rows.stride > rows.kernel || rows.kernel > rows.in || cols.kernel > cols.in) return false;
  if (cols.in > kBlockedRowLimit || cols.pad_begin > cols.in || cols.pad_end > cols.in) return false;
  const int64_t reach = (cols.out - 1) * cols.stride + (cols.kernel - 1) * cols.dilation + 1;
  const int64_t width = max_of(cols.pad_begin + cols.in, reach);
  if (cols.stride > cols.in || width > 3 * cols.in) return false;  // powered rows a small multiple of the input's
  rb.out_pitch = (width + cols.stride - 1) / cols.stride;
  rb.pitch = rb.out_pitch * cols.stride;
  // outputs per block about kBlockValues, and the input rows a block adds to its first window's at most
  // 4 kBlockValues values: scratch O(kernel rows x row length) whatever the strides
  const int64_t by_outputs = kBlockValues / rb.out_pitch;
  const int64_t by_inputs = 1 + 4 * kBlockValues / (rows.stride * rb.pitch);
  rb.block = max_of<int64_t>(1, min_of(rows.out, min_of(by_outputs, by_inputs)));
  rb.span = (rb.block - 1) * rows.stride + rows.kernel;
  rb.slack = (cols.kernel - 1) * cols.dilation + cols.stride;
  return true;
}

// s[i] = (c[i] + c[i + step]) + c[i + 2*step] + ... (count rows, in order) for n values.
template <class A>
void stacked_row_sums(const A* c, int64_t step, int64_t count, A* s, int64_t n) {
  switch (count) {
    case 1: std::memcpy(s, c, sizeof(A) * static_cast<size_t>(n)); return;
    case 2:
      for (int64_t i = 0; i < n; ++i) s[i] = c[i] + c[i + step];
      return;
    default:
      for (int64_t i = 0; i < n; ++i) s[i] = (c[i] + c[i + step]) + c[i + 2 * step];
      for (int64_t r = 3; r < count; ++r) {
        const A* cr = c + r * step;
        for (int64_t i = 0; i < n; ++i) s[i] += cr[i];
      }
  }
}

// d[j] = map(s[j*stride]) + map(s[j*stride + 1]) + ... (kernel terms, in k order) for n windows that lie inside
// the row and do not overlap (stride >= kernel, no dilation): each |x|^p is computed once, straight from the input.
template <class A, class Map>
void mapped_column_sums(const A* s, A* d, int64_t n, const AxisGeometry& cols, Map map) {
  if (cols.stride == 2 && cols.kernel == 2) {
    for (int64_t j = 0; j < n; ++j) d[j] = map(s[2 * j]) + map(s[2 * j + 1]);
    return;
  }
  if (cols.stride == 3 && cols.kernel == 3) {
    for (int64_t j = 0; j < n; ++j) d[j] = (map(s[3 * j]) + map(s[3 * j + 1])) + map(s[3 * j + 2]);
    return;
  }
  const int64_t stride = cols.stride;
  for (int64_t j = 0; j < n; ++j) d[j] = map(s[j * stride]);
  for (int64_t k = 1; k < cols.kernel; ++k) {
    for (int64_t j = 0; j < n; ++j) d[j] += map(s[j * stride + k]);
  }
}

// |v|^p lane by lane, the same arithmetic as power(v[l]) in every lane: an odd whole power takes |v| by clearing the
// sign bit (as std::fabs does for scalars; IntegerPower's vector form keeps a NaN's sign), then multiplies in the
// same order.
template <class V, int P>
[[gnu::always_inline]] inline V lane_power(IntegerPower<P>, V v) {
  using S = Simd<std::remove_cv_t<std::remove_reference_t<decltype(v[0])>>, static_cast<int>(sizeof(V))>;
  V a = v;
  if constexpr (P % 2 == 1) {
    a = reinterpret_cast<V>(reinterpret_cast<typename S::Mask>(v) &
                            std::numeric_limits<typename S::MaskElement>::max());
  }
  V r = a;
  for (int k = 1; k < P; ++k) r *= a;
  return r;
}
template <class V>
[[gnu::always_inline]] inline V lane_power(const RealPower& power, V v) {
  return power(v);
}

// Powers whose root is square roots or none (p = 1, 2, 4): root_for's value lane by lane in native vectors, since an
// IEEE square root is correctly rounded in vector and scalar instructions alike.
template <class Power>
constexpr bool kLaneRoot = false;
template <>
constexpr bool kLaneRoot<IntegerPower<1>> = true;
template <>
constexpr bool kLaneRoot<IntegerPower<2>> = true;
template <>
constexpr bool kLaneRoot<IntegerPower<4>> = true;

template <class V>
[[gnu::always_inline]] inline V lane_sqrt(V v) {
  using E = std::remove_cv_t<std::remove_reference_t<decltype(v[0])>>;
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64 && std::is_same_v<E, float>)
    return _mm512_maskz_sqrt_ps(0xffff, v);  // (the unmasked form warns in GCC 12)
  if constexpr (sizeof(V) == 64 && std::is_same_v<E, double>) return _mm512_maskz_sqrt_pd(0xff, v);
#endif
#if defined(__AVX__)
  if constexpr (sizeof(V) == 32 && std::is_same_v<E, float>) return _mm256_sqrt_ps(v);
  if constexpr (sizeof(V) == 32 && std::is_same_v<E, double>) return _mm256_sqrt_pd(v);
#endif
#if defined(__SSE2__)
  if constexpr (sizeof(V) == 16 && std::is_same_v<E, float>) return _mm_sqrt_ps(v);
  if constexpr (sizeof(V) == 16 && std::is_same_v<E, double>) return _mm_sqrt_pd(v);
#endif
  for (int l = 0; l < static_cast<int>(sizeof(V) / sizeof(E)); ++l) v[l] = std::sqrt(v[l]);
  return v;
}
template <int P, class V>
[[gnu::always_inline]] inline V lane_root(IntegerPower<P>, V sum) {
  static_assert(kLaneRoot<IntegerPower<P>>);
  if constexpr (P == 1) {
    return sum;
  } else if constexpr (P == 2) {
    return lane_sqrt(sum);
  } else {
    return lane_sqrt(lane_sqrt(sum));
  }
}

// d[j] = (|s[j - 1]|^p + |s[j]|^p) + |s[j + 1]|^p (of scale(s)) for the n >= 2 columns of a row padded by one zero
// each side (the padding's terms are +0): the sums single_channel_window_sums makes of the powered row, in the same
// order, each power computed where it is added (three multiplies instead of a store and three loads of the powers).
// Native vectors, the last one overlapping the one before (it rewrites the same values), so a 56-column row has no
// scalar tail beyond its two edge columns.
template <class A, class Power, class Scale>
void padded_triple_sums(const A* __restrict s, A* __restrict d, int64_t n, Power power, Scale scale) {
  using S = Simd<A>;
  auto map = [&](auto v) __attribute__((always_inline)) { return lane_power(power, scale(v)); };
  d[0] = (A(0) + power(scale(s[0]))) + power(scale(s[1]));
  d[n - 1] = (power(scale(s[n - 2])) + power(scale(s[n - 1]))) + A(0);
  const int64_t inner = n - 2;  // columns 1 .. n - 2
  if (inner < S::kLength) {
    for (int64_t j = 1; j + 1 < n; ++j) d[j] = (power(scale(s[j - 1])) + power(scale(s[j]))) + power(scale(s[j + 1]));
    return;
  }
  auto at = [&](int64_t j) __attribute__((always_inline)) {
    S::store(d + j, (map(S::load(s + j - 1)) + map(S::load(s + j))) + map(S::load(s + j + 1)));
  };
  int64_t j = 1;
  for (; j + S::kLength <= n - 1; j += S::kLength) at(j);
  if (j < n - 1) at(n - 1 - S::kLength);
}

// padded_triple_sums of `count` consecutive rows of n >= 2 columns (a row every n values in s and in d) in one pass:
// the inner columns of all rows as one run of native vectors (where it crosses from a row to the next it computes
// the edge columns with values of the row beside them), then each row's two edge columns again, with their padding,
// over those. The same sums in the same order, without a row's setup and scalar edges between its vectors.
template <class A, class Power, class Scale>
void padded_triple_rows(const A* __restrict s, A* __restrict d, int64_t n, int64_t count, Power power, Scale scale) {
  using S = Simd<A>;
  const int64_t total = n * count;
  if (total - 2 < S::kLength) {
    for (int64_t r = 0; r < count; ++r) padded_triple_sums(s + r * n, d + r * n, n, power, scale);
    return;
  }
  auto map = [&](auto v) __attribute__((always_inline)) { return lane_power(power, scale(v)); };
  auto at = [&](int64_t j) __attribute__((always_inline)) {
    S::store(d + j, (map(S::load(s + j - 1)) + map(S::load(s + j))) + map(S::load(s + j + 1)));
  };
  int64_t j = 1;
  for (; j + S::kLength <= total - 1; j += S::kLength) at(j);
  if (j < total - 1) at(total - 1 - S::kLength);
  for (int64_t r = 0; r < count; ++r) {
    const A* sr = s + r * n;
    A* dr = d + r * n;
    dr[0] = (A(0) + power(scale(sr[0]))) + power(scale(sr[1]));
    dr[n - 1] = (power(scale(sr[n - 2])) + power(scale(sr[n - 1]))) + A(0);
  }
}

// Columns of rows n columns wide, as lane masks (values >= n + 1 of them, from a row's first column on, periodic):
// keep[k] is all-ones unless column k % n starts a row. At column k, keep[k] clears the left neighbour's term of a
// row's first column, keep[k + 1] the right neighbour's of a row's last.
template <class M>
void row_edge_masks(M* keep, int64_t values, int64_t n) {
  for (int64_t k = 0; k < values; ++k) keep[k] = k == 0 || k == n ? M(0) : M(-1);
}

// 3x3 windows at stride 1 with one column of padding each side, `total` outputs of whole rows of n columns in one
// run of native vectors, the column sums and the roots fused: each vector takes the row-triple sums h of input
// values (x: the input row below the outputs' row, on), stores them as the next rows' column sums (h2 = h01 + 2 n) and
// adds them to the two column-sum rows above (h01, h01 + n), then takes the trust test and the root. The same sums
// in the same order as padded_triple_rows and the flat rows' roots (the edge columns' outside neighbours masked to
// +0, the term padding adds): same bits, without storing the column sums of a block and reading them back for the
// roots. Reads x[-1] and x[total - 1] at most; keep: row_edge_masks of n + L + 1 values; n >= L (the vector length)
// and total > L. Returns true when every sum is trusted; false when some may not be (the caller counts them from the
// column sums): the loop keeps only the smallest sum and the total (NaN and infinity reach it), two operations a
// vector instead of a count's four.
// The vectors of fused_triple_rows: at most 32 bytes (the loop runs faster on ymm than on zmm registers on AVX-512).
constexpr int kFusedVectorBytes = kVectorBytes < 32 ? kVectorBytes : 32;
template <class A>
using FusedSimd = Simd<A, kFusedVectorBytes>;

template <class A, class Power, class Scale, class Down>
bool fused_triple_rows(const A* x, A* h01, A* y, int64_t total, int64_t n,
                       const typename FusedSimd<A>::MaskElement* keep, Power power, Scale scale, Down down) {
  using S = FusedSimd<A>;
  using V = typename S::Value;
  using M = typename S::Mask;
  constexpr int L = S::kLength;
  auto map = [&](V v) __attribute__((always_inline)) { return lane_power(power, scale(v)); };
  auto load_mask = [](const typename S::MaskElement* p) __attribute__((always_inline)) {
    M m;
    std::memcpy(&m, p, sizeof m);
    return m;
  };
  V smallest = S::splat(std::numeric_limits<A>::max());
  V total_sum{};
  auto at = [&](int64_t j, int64_t column) __attribute__((always_inline)) {
    const V left = reinterpret_cast<V>(reinterpret_cast<M>(map(S::load(x + j - 1))) & load_mask(keep + column));
    const V right = reinterpret_cast<V>(reinterpret_cast<M>(map(S::load(x + j + 1))) & load_mask(keep + column + 1));
    const V h = (left + map(S::load(x + j))) + right;
    S::store(h01 + 2 * n + j, h);
    const V sum = (S::load(h01 + j) + S::load(h01 + n + j)) + h;
    smallest = sum < smallest ? sum : smallest;
    total_sum += sum;
    S::store(y + j, down(lane_root(power, sum)));
  };
  int64_t j = 0;
  for (int64_t column = 0; j + L < total; j += L) {
    at(j, column);
    column += L;
    if (column >= n) column -= n;
  }
  const int64_t last = total - 1;              // its right neighbour is past the rows: taken alone
  if (j < last) at(last - L, (last - L) % n);  // over lanes already taken: their values again
  const A h = (power(scale(x[last - 1])) + power(scale(x[last]))) + A(0);
  h01[2 * n + last] = h;
  const A sum = (h01[last] + h01[n + last]) + h;
  y[last] = down(root_for(power, sum));
  A least = sum, all = sum;
  for (int l = 0; l < L; ++l) {
    least = smallest[l] < least ? smallest[l] : least;
    all += total_sum[l];
  }
  return window_sum_trusted(least) && window_sum_trusted(all);
}

template <class T>
void lp_pool_blocked(const T* x, T* y, int64_t planes, const PoolGeometry& g, const RowsAndColumns& rc,
                     const RowBlocks& rb, const LpNorm& lp) {
  using A = AccOf<T>;
  const AxisGeometry& rows = rc.rows;
  const AxisGeometry& cols = rc.cols;
  using Keep = typename FusedSimd<A>::MaskElement;
  const int64_t op = rb.out_pitch;
  const int64_t powered_values = rb.span * rb.pitch + rb.slack;
  const int64_t column_values = rb.span * op;
  const int64_t in_w = cols.in, out_w = cols.out;
  // 3x3 stride 1 pad 1 windows (padding one row above, as many columns each side): fused_triple_rows for the
  // output rows whose lower row is inside the plane, when power's root is lane_root's.
  const bool fused_triples = std::is_same_v<T, A> && rows.stride == 1 && rows.kernel == 3 && rows.pad_begin == 1 &&
                             cols.kernel == 3 && cols.stride == 1 && cols.dilation == 1 && cols.pad_begin == 1 &&
                             out_w == in_w && in_w >= FusedSimd<A>::kLength;  // a row holds a vector
  const int64_t keep_values = fused_triples ? in_w + FusedSimd<A>::kLength + 1 : 0;
  ScratchBuffer memory(sizeof(int64_t) * kVisitScratch * g.axes.size() +
                       sizeof(A) * static_cast<size_t>(powered_values + column_values + 2 * op + kBlock) +
                       sizeof(Keep) * static_cast<size_t>(keep_values));
  int64_t* index = memory.as<int64_t>();  // 8-byte values first, so every array is aligned for its type
  A* powered = reinterpret_cast<A*>(index + kVisitScratch * g.axes.size());
  A* column = powered + powered_values;
  A* sums = column + column_values;
  A* roots = sums + op;  // one output row
  A* probe_buffer = roots + op;
  Keep* keep = reinterpret_cast<Keep*>(probe_buffer + kBlock);  // Keep is as wide as A
  if (fused_triples) row_edge_masks(keep, keep_values, in_w);
  // The padding of every powered row stays zero; the rest is written before it is read, except by ignored outputs.
  fill(powered, powered_values, A(0));
  // Windows side by side inside each row (e.g. 2x2 stride 2 without padding): the column sums take the powers
  // straight from the input, without the powered rows.
  const bool side_by_side = std::is_same_v<T, A> && cols.pad_begin == 0 && cols.dilation == 1 &&
                            cols.stride >= cols.kernel && (out_w - 1) * cols.stride + cols.kernel <= in_w;
  // 3 columns at stride 1 with one column of padding each side (3x3 pad 1): the column sums straight from the
  // input too (padded_triple_sums), so the powered rows are neither stored nor read back.
  const bool same_width_triples = std::is_same_v<T, A> && !side_by_side && cols.kernel == 3 && cols.stride == 1 &&
                                  cols.dilation == 1 && cols.pad_begin == 1 && out_w == in_w && in_w >= 2;
  if (side_by_side || same_width_triples) fill(column, column_values, A(0));  // ignored outputs past out_w stay 0
  // Rows of column sums cp values apart: out_pitch, or for same_width_triples exactly an output row, so that the
  // column sums of consecutive input rows are one array, as the output's rows are.
  const int64_t cp = same_width_triples ? out_w : op;
  // Row stride 1 over such sums: the window sums of a block's output rows are (c[i] + c[i + cp]) + ... for i across
  // the whole block, stored straight into the output: one loop for the block's roots.
  const bool flat_rows = same_width_triples && rows.stride == 1 && rows.kernel <= 3;
  auto plane_rows = [&](const PlaneAttempt<T>& a, auto power, auto& trust) {
    const T* xp = a.x;
    T* yp = a.y;
    const int e = a.e;
    const PowerOfTwo<A> up = a.up, down = a.down;
    auto power_row = [&](int64_t row, A* dst) {
      if (row < 0 || row >= rows.in) {
        fill(dst, in_w, A(0));
        return;
      }
      powered_row(xp + row * in_w, dst, in_w, power, e, up);
    };
    int64_t ready = 0;  // rows of `column` already holding this block's first rows (from the previous block)
    for (int64_t oh0 = 0; oh0 < rows.out; oh0 += rb.block) {
      const int64_t nb = min_of(rb.block, rows.out - oh0);
      const int64_t first_row = oh0 * rows.stride - rows.pad_begin;
      const int64_t span = (nb - 1) * rows.stride + rows.kernel;
      int64_t fused_rows = 0;  // the block's first output rows, taken by fused_triple_rows
      if constexpr (kLaneRoot<decltype(power)>) {
        if (fused_triples) {
          fused_rows = max_of<int64_t>(0, min_of(nb, rows.in - 1 - oh0));
          if (fused_rows * in_w <= FusedSimd<A>::kLength) fused_rows = 0;
        }
      }
      // the column sums of the block's rows [from, to)
      auto triple_rows = [&](int64_t from, int64_t to) {
        // the block's input rows inside the plane are consecutive: their column sums in one pass; rows of padding 0
        const int64_t t_lo = min_of(to, max_of(from, -first_row));
        const int64_t t_hi = max_of(t_lo, min_of(to, rows.in - first_row));
        fill(column + from * cp, (t_lo - from) * cp, A(0));
        fill(column + t_hi * cp, (to - t_hi) * cp, A(0));
        if (t_hi > t_lo) {
          const A* src = reinterpret_cast<const A*>(xp + (first_row + t_lo) * in_w);  // T is A here
          A* d = column + t_lo * cp;
          if (e == 0) {
            padded_triple_rows(src, d, in_w, t_hi - t_lo, power, [](auto v) { return v; });
          } else {
            padded_triple_rows(src, d, in_w, t_hi - t_lo, power, [&](auto v) { return v * up.first * up.second; });
          }
        }
      };
      if (fused_rows > 0) {
        if constexpr (kLaneRoot<decltype(power)>) {
          if (ready < 2) triple_rows(ready, 2);
          const A* src = reinterpret_cast<const A*>(xp + (oh0 + 1) * in_w);  // T is A here
          A* out = reinterpret_cast<A*>(yp + oh0 * out_w);
          const int64_t n = fused_rows * out_w;
          bool trusted = true;
          if (e == 0) {
            auto same = [](auto v) __attribute__((always_inline)) { return v; };
            trusted = fused_triple_rows(src, column, out, n, in_w, keep, power, same, same);
          } else {
            trusted = fused_triple_rows(
                src, column, out, n, in_w, keep, power,
                [&](auto v) __attribute__((always_inline)) { return v * up.first * up.second; },
                [&](auto v) __attribute__((always_inline)) { return v * down.first * down.second; });
          }
          auto sum_at = [&](int64_t j) { return (column[j] + column[j + cp]) + column[j + 2 * cp]; };
          if (!trusted &&
              !trust.recompute_untrusted(n, oh0 * out_w, sum_at, index, [&](int64_t j, A exact) { out[j] = exact; })) {
            return;
          }
          triple_rows(fused_rows + 2, span);
        }
      } else if (same_width_triples) {
        triple_rows(ready, span);
      } else if (side_by_side) {
        // the column sums straight from the input rows
        auto column_sums = [&](const A* src, A* d, auto scale) {
          mapped_column_sums(src, d, out_w, cols, [&](A v) { return power(scale(v)); });
        };
        for (int64_t t = ready; t < span; ++t) {
          const int64_t row = first_row + t;
          A* d = column + t * cp;
          if (row < 0 || row >= rows.in) {
            fill(d, out_w, A(0));
          } else {
            const A* src = reinterpret_cast<const A*>(xp + row * in_w);  // T is A here
            if (e == 0) {
              column_sums(src, d, [](auto v) { return v; });
            } else {
              column_sums(src, d, [&](auto v) { return v * up.first * up.second; });
            }
          }
        }
      } else {
        for (int64_t t = ready; t < span; ++t) power_row(first_row + t, powered + t * rb.pitch + cols.pad_begin);
        single_channel_window_sums(static_cast<const A*>(powered + ready * rb.pitch), column + ready * cp,
                                   (span - ready) * cp, cols);
      }
      // The input rows the next block (or the next plane's first block) reads, fetched into the cache a part
      // per output row while this block computes its roots: memory and arithmetic then overlap.
      const char* fetch_begin = nullptr;
      int64_t fetch_bytes = 0;
      {
        const int64_t next = oh0 + nb;
        const T* base = xp;
        int64_t r0 = first_row + span, r1 = 0;
        if (next < rows.out) {
          r1 = (min_of(rows.out, next + rb.block) - 1) * rows.stride - rows.pad_begin + rows.kernel;
        } else if (a.plane + 1 < planes) {
          base = xp + g.in_size;
          r0 = 0;
          r1 = (min_of(rows.out, rb.block) - 1) * rows.stride - rows.pad_begin + rows.kernel;
        }
        r0 = max_of<int64_t>(r0, 0);
        r1 = min_of(r1, rows.in);
        if (r1 > r0) {
          fetch_begin = reinterpret_cast<const char*>(base + r0 * in_w);
          fetch_bytes = (r1 - r0) * in_w * static_cast<int64_t>(sizeof(T));
        }
      }
      // a whole number of cache lines per output row, computed once: no division per row
      const int64_t fetch_chunk = ((fetch_bytes + nb - 1) / nb + 63) & ~int64_t{63};
      if (flat_rows) {
        // The block's rows in one loop, as the rows below; without their fetches ahead, which here cost more than
        // they save (the input is read in order, which the hardware's prefetchers follow).
        const A* c0 = column + fused_rows * cp;
        const A* c1 = c0 + cp;
        const A* c2 = c1 + cp;
        A* out = reinterpret_cast<A*>(yp + (oh0 + fused_rows) * out_w);  // T is A here
        const int64_t n = (nb - fused_rows) * out_w;
        auto finish = [&](auto sum_at) {  // n <= max(kBlockValues, kBlockedRowLimit)
          const int32_t bad = roots_of_sums(power, n, sum_at, out, e, down);
          return bad == 0 || trust.recompute_untrusted(n, (oh0 + fused_rows) * out_w, sum_at, index,
                                                       [&](int64_t j, A exact) { out[j] = exact; });
        };
        bool go_on = true;
        switch (rows.kernel) {
          case 1: go_on = finish([&](int64_t j) { return c0[j]; }); break;
          case 2: go_on = finish([&](int64_t j) { return c0[j] + c1[j]; }); break;
          default: go_on = finish([&](int64_t j) { return (c0[j] + c1[j]) + c2[j]; });
        }
        if (!go_on) return;
      }
      // Per output row, in one loop: the row sums of its kernel rows, the trust test, the root, the store. (All of
      // a block's column sums are made first, above: that keeps more cache misses in flight than making each just
      // before the first output row that needs it.)
      for (int64_t r = 0; r < nb && !flat_rows; ++r) {
        for (int64_t b = r * fetch_chunk, end = min_of(fetch_bytes, b + fetch_chunk); b < end; b += 64) {
          __builtin_prefetch(fetch_begin + b);
        }
        const A* c0 = column + r * rows.stride * cp;
        T* y_row = yp + (oh0 + r) * out_w;
        A* out = roots;
        if constexpr (std::is_same_v<T, A>) out = y_row;
        int32_t bad = 0;
        auto finish = [&](auto sum_at) { bad = roots_of_sums(power, out_w, sum_at, out, e, down); };
        const A* c1 = c0 + cp;
        const A* c2 = c1 + cp;
        switch (rows.kernel) {
          case 1: finish([&](int64_t j) { return c0[j]; }); break;
          case 2: finish([&](int64_t j) { return c0[j] + c1[j]; }); break;
          case 3: finish([&](int64_t j) { return (c0[j] + c1[j]) + c2[j]; }); break;
          default: stacked_row_sums(c0, cp, rows.kernel, sums, out_w); finish([&](int64_t j) { return sums[j]; });
        }
        if constexpr (!std::is_same_v<T, A>) store_block(static_cast<const A*>(roots), y_row, out_w);
        if (bad == 0) continue;
        stacked_row_sums(c0, cp, rows.kernel, sums, out_w);
        if (!trust.recompute_untrusted(
                out_w, (oh0 + r) * out_w, [&](int64_t j) { return sums[j]; }, index,
                [&](int64_t j, A exact) { store_block(&exact, y_row + j, 1); })) {
          return;
        }
      }
      // the rows the next block shares with this one move to the front
      const int64_t next_first = (oh0 + nb) * rows.stride - rows.pad_begin;
      ready = max_of<int64_t>(0, first_row + span - next_first);
      if (ready > 0) {
        std::memmove(column, column + (span - ready) * cp, sizeof(A) * static_cast<size_t>(ready * cp));
      }
    }
  };
  for_each_plane_scaled(x, y, planes, g, lp, probe_buffer, plane_rows);
}

// ---- windows side by side along both axes (e.g. 2x2 stride 2), an output row at a time, software-pipelined -----

// Windows that tile the plane without sharing an element and without padding (kernel == stride along both axes,
// kernels of 2 or 3): each output row's window sums come from its own kernel rows only. Each step makes the next
// output row's window sums from the input (prefetched a few rows ahead) and this row's roots from the sums the
// previous step made (in L1). The sums are those of lp_pool_blocked's side-by-side path, in the same order (pairs
// or triples of |x|^p, then rows in order): same bits.
inline bool pipelined_rows(const RowsAndColumns& rc) {
  auto tiles = [](const AxisGeometry& a) {
    return a.dilation == 1 && a.pad_begin == 0 && a.kernel == a.stride && (a.kernel == 2 || a.kernel == 3) &&
           a.out * a.stride <= a.in && a.out > 0;
  };
  return tiles(rc.rows) && tiles(rc.cols) && rc.cols.in <= kBlockedRowLimit;
}

// The KC-term window sum of |x|^p at output column j of an input row (forced inline: as a call, the loop of
// pipelined_row does not vectorise).
template <int KC, class A, class Map>
[[gnu::always_inline]] inline A side_by_side_sum(const A* __restrict s, int64_t j, Map map) {
  if constexpr (KC == 2) {
    return map(s[2 * j]) + map(s[2 * j + 1]);
  } else {
    return (map(s[3 * j]) + map(s[3 * j + 1])) + map(s[3 * j + 2]);
  }
}

// The window sum of KR input rows (row pitch in_w) at output column j: the rows' KC-term sums added in row order.
template <int KR, int KC, class A, class Map>
[[gnu::always_inline]] inline A tile_sum(const A* __restrict s, int64_t in_w, int64_t j, Map map) {
  const A first = side_by_side_sum<KC>(s, j, map) + side_by_side_sum<KC>(s + in_w, j, map);
  if constexpr (KR == 2) {
    return first;
  } else {
    return first + side_by_side_sum<KC>(s + 2 * in_w, j, map);
  }
}

// Pair sums of a native vector pair: with a and b holding 2L consecutive values of a row, the even and odd values
// are picked within each 16-byte segment (one in-segment shuffle each, e.g. shufps: a full even/odd deinterleave
// costs cross-segment permutes on AVX2 / AVX-512) and added, so sum[i] = v[2 q(i)] + v[2 q(i) + 1] for the pair
// q(i) that position i holds; in_order() then moves pair q to position q (nothing to do with 16-byte vectors).
template <class A, int Bytes = kVectorBytes>
struct PairShuffles {
  using S = Simd<A, Bytes>;
  using V = typename S::Value;
  using M = typename S::Mask;
  static constexpr int L = S::kLength;
  static constexpr int Q = 16 / static_cast<int>(sizeof(A));  // values per 16-byte segment
  // the pair position i holds: segment k takes Q/2 pairs from a, then Q/2 from b
  static constexpr int pair_at(int i) {
    const int k = i / Q, t = i % Q;
    return t < Q / 2 ? k * Q / 2 + t : L / 2 + k * Q / 2 + (t - Q / 2);
  }
  static M picks(int parity) {
    M m{};
    for (int i = 0; i < L; ++i) {
      const int q = pair_at(i);
      m[i] = static_cast<typename S::MaskElement>(q < L / 2 ? 2 * q + parity : L + 2 * (q - L / 2) + parity);
    }
    return m;
  }
  static V sums(V a, V b) { return __builtin_shuffle(a, b, picks(0)) + __builtin_shuffle(a, b, picks(1)); }
  static V in_order(V v) {
    if constexpr (L == Q) {
      return v;
    } else {
      M m{};
      for (int i = 0; i < L; ++i) m[pair_at(i)] = static_cast<typename S::MaskElement>(i);
      return __builtin_shuffle(v, m);
    }
  }
};

// One output row of the pipelined path: out[j] = down(root of cur[j]) for n windows, counting the untrusted sums, and
// (when next_in is not null) next[j] = the window sums of the KR input rows from next_in, in tile_sum's order. 2-column
// windows take native vectors: powers of consecutive values, then PairShuffles (fewer shuffles than GCC's even/odd
// permutes before the powers), both rows of a window added before the order is restored.
// Kept out of line (noinline): inlined into the plane loop, it is slower.
template <int KR, int KC, class A, class Power, class Scale, class Down>
[[gnu::flatten, gnu::noinline]] int32_t pipelined_row(const A* __restrict cur, A* __restrict out, int64_t n,
                                                      const A* __restrict next_in, int64_t in_w, A* __restrict next,
                                                      Power power, Scale scale, Down down) {
  if (next_in != nullptr) {
    int64_t j = 0;
    if constexpr (KC == 2) {
      using P = PairShuffles<A>;
      using S = Simd<A>;
      auto pairs = [&](const A* s, int64_t at) __attribute__((always_inline)) {
        return P::sums(lane_power(power, scale(S::load(s + 2 * at))),
                       lane_power(power, scale(S::load(s + 2 * at + P::L))));
      };
      for (; j + P::L <= n; j += P::L) {
        typename S::Value sum = pairs(next_in, j) + pairs(next_in + in_w, j);
        if constexpr (KR == 3) sum += pairs(next_in + 2 * in_w, j);
        S::store(next + j, P::in_order(sum));
      }
    }
    auto map = [&](A v) __attribute__((always_inline)) { return power(scale(v)); };
    for (; j < n; ++j) next[j] = tile_sum<KR, KC>(next_in, in_w, j, map);
  }
  int32_t bad = 0;  // n <= kBlockedRowLimit: 32-bit lanes count in one instruction per vector
  int32_t unsure = 0;
  for (int64_t j = 0; j < n; ++j) {
    bad += !window_sum_trusted(cur[j]);
    out[j] = down(loop_root(power, cur[j], unsure));
  }
  settle_roots(power, unsure, n, [&](int64_t j) { return cur[j]; }, [&](int64_t j, A root) { out[j] = down(root); });
  return bad;
}

template <int KR, int KC, class A>
void lp_pool_pipelined(const A* x, A* y, int64_t planes, const PoolGeometry& g, const RowsAndColumns& rc,
                       const LpNorm& lp) {
  const int64_t in_w = rc.cols.in, out_w = rc.cols.out, out_h = rc.rows.out;
  ScratchBuffer memory(sizeof(int64_t) * kVisitScratch * g.axes.size() +
                       sizeof(A) * static_cast<size_t>(2 * out_w + kBlock));
  int64_t* index = memory.as<int64_t>();  // 8-byte values first, so every array is aligned for its type
  A* sums = reinterpret_cast<A*>(index + kVisitScratch * g.axes.size());  // two output rows' window sums
  A* probe_buffer = sums + 2 * out_w;
  // Input rows fetched ahead of the loads that use them: far enough for memory's latency (a few output rows).
  constexpr int64_t kAhead = 4;
  const int64_t input_values = planes * g.in_size;
  auto plane_rows = [&](const PlaneAttempt<A>& a, auto power, auto& trust) {
    const A* xp = a.x;
    A* yp = a.y;
    const int64_t plane = a.plane;
    const PowerOfTwo<A> up = a.up, down = a.down;
    auto run = [&](auto scale, auto down_scale) {
      // the first output row's window sums
      for (int64_t j = 0; j < out_w; ++j) {
        sums[j] = tile_sum<KR, KC>(xp, in_w, j, [&](A v) { return power(scale(v)); });
      }
      for (int64_t oh = 0; oh < out_h; ++oh) {
        const A* cur = sums + (oh & 1) * out_w;
        A* next = sums + ((oh + 1) & 1) * out_w;
        // the input rows kAhead output rows on (in the next plane near the end of this one), one cache line
        // in every 64 bytes of them
        const int64_t fetch_first = plane * g.in_size + (oh + kAhead) * KR * in_w;
        if (fetch_first + KR * in_w <= input_values) {
          const char* fetch = reinterpret_cast<const char*>(x + fetch_first);
          const int64_t fetch_bytes = KR * in_w * static_cast<int64_t>(sizeof(A));
          for (int64_t b = 0; b < fetch_bytes; b += 64) __builtin_prefetch(fetch + b);
        }
        const A* next_in = oh + 1 < out_h ? xp + (oh + 1) * KR * in_w : nullptr;
        A* y_row = yp + oh * out_w;
        const int32_t bad = pipelined_row<KR, KC>(cur, y_row, out_w, next_in, in_w, next, power, scale, down_scale);
        if (bad > 0 && !trust.recompute_untrusted(
                           out_w, oh * out_w, [&](int64_t j) { return cur[j]; }, index,
                           [&](int64_t j, A exact) { y_row[j] = exact; })) {
          return;
        }
      }
    };
    if (a.e == 0) {
      auto same = [](auto v) __attribute__((always_inline)) { return v; };
      run(same, same);
    } else {
      run([&](auto v) __attribute__((always_inline)) { return v * up.first * up.second; },
          [&](A root) __attribute__((always_inline)) { return root * down.first * down.second; });
    }
  };
  for_each_plane_scaled(x, y, planes, g, lp, probe_buffer, plane_rows);
}

// ---- 2x2 stride 2 windows, the sums and the roots of an output row in one run of vectors ---------------------------

// Powers whose root has a form in native vectors of A with the value root_for gives: square roots (kLaneRoot), and on
// x86-64 builds with fused multiply-adds the float cube root (fused_cube_root, its unsure lanes settled after).
template <class Power, class A>
constexpr bool kVectorRoot = kLaneRoot<Power>;
#if defined(__FMA__)
template <>
constexpr bool kVectorRoot<IntegerPower<3>, float> = kFusedCubeRoot;
#endif

// The root of a vector of window sums: lane_root, or fused_cube_root (unsure: its lanes it cannot vouch for).
template <class Power, class V, class M>
[[gnu::always_inline]] inline V vector_root(Power power, V sum, M& unsure) {
  if constexpr (kLaneRoot<Power>) {
    return lane_root(power, sum);
  } else {
    return fused_cube_root(sum, unsure);
  }
}

// sums[j] = the window sum of 2x2 stride 2 windows at j for n >= L windows of the input rows in and in + in_w: the
// sums of tile_sum<2, 2> in the same order, in native vectors (PairShuffles, as pipelined_row), the last one
// overlapping the one before when L does not divide n (it rewrites the same values).
template <class A, class Power, class Scale>
[[gnu::always_inline]] inline void pair_tile_sums(const A* __restrict in, int64_t in_w, A* __restrict sums, int64_t n,
                                                  Power power, Scale scale) {
  using P = PairShuffles<A>;
  using S = typename P::S;
  constexpr int L = P::L;
  auto pairs = [&](const A* s, int64_t at) __attribute__((always_inline)) {
    return P::sums(lane_power(power, scale(S::load(s + 2 * at))), lane_power(power, scale(S::load(s + 2 * at + L))));
  };
  auto at = [&](int64_t j)
                __attribute__((always_inline)) { S::store(sums + j, P::in_order(pairs(in, j) + pairs(in + in_w, j))); };
  int64_t j = 0;
  for (; j + L <= n; j += L) at(j);
  if (j < n) at(n - L);
}

// out[j] = down(root of sums[j]) for n >= L sums in native vectors, the last one overlapping the one before when L does
// not divide n. Returns whether every sum is surely trusted (the loop keeps only the smallest sum and the total, which
// NaN and infinity reach: two operations a vector instead of a count's four); the roots fused_cube_root could not
// vouch for are settled here with root_for. Meanwhile fetch_bytes from fetch on are fetched into the cache, as many
// cache lines a vector as its windows read (4 sizeof(A) bytes an output: 4 lines a vector of 16 floats, 2 of 8), so
// the fetches spread over the whole loop instead of crowding its first part, without a count per vector: the memory
// the next block reads, while this one computes.
template <class A, class Power, class Down>
[[gnu::always_inline]] inline bool vector_roots(const A* __restrict sums, A* __restrict out, int64_t n, Power power,
                                                Down down, const char* fetch, int64_t fetch_bytes) {
  using S = Simd<A>;
  using V = typename S::Value;
  using M = typename S::Mask;
  constexpr int L = S::kLength;
  constexpr int kWindowLines = L * static_cast<int>(sizeof(A)) * 4 / 64;
  constexpr int kFetchLines = kWindowLines > 1 ? kWindowLines : 1;
  V smallest = S::splat(std::numeric_limits<A>::max());
  V total{};
  M unsure_lanes{};
  int64_t fetched = 0;
  auto at = [&](int64_t j) __attribute__((always_inline)) {
    if (fetched < fetch_bytes) {  // (a fetch past the end of memory is harmless: fetches do not fault)
      for (int line = 0; line < kFetchLines; ++line) __builtin_prefetch(fetch + fetched + 64 * line);
      fetched += 64 * kFetchLines;
    }
    const V sum = S::load(sums + j);
    smallest = sum < smallest ? sum : smallest;
    total += sum;
    S::store(out + j, down(vector_root(power, sum, unsure_lanes)));
  };
  int64_t j = 0;
  for (; j + L <= n; j += L) at(j);
  if (j < n) at(n - L);
  A least = smallest[0], all = total[0];
  int32_t unsure = unsure_lanes[0] != 0;
  for (int l = 1; l < L; ++l) {
    least = smallest[l] < least ? smallest[l] : least;
    all += total[l];
    unsure |= unsure_lanes[l] != 0;
  }
  if (unsure != 0) {
    // the vectors with a lane fused_cube_root could not vouch for, again, those lanes from root_for: a vector
    // root per vector and a scalar root per such lane, not a scalar root per sum
    auto settle = [&](int64_t i) __attribute__((always_inline)) {
      M lanes{};
      const V sum = S::load(sums + i);
      vector_root(power, sum, lanes);
      for (int l = 0; l < L; ++l) {
        if (lanes[l] != 0) out[i + l] = down(root_for(power, sum[l]));
      }
    };
    int64_t i = 0;
    for (; i + L <= n; i += L) settle(i);
    if (i < n) settle(n - L);
  }
  return window_sum_trusted(least) && window_sum_trusted(all);
}

// Whether lp_pool_pair_tiles takes planes of this geometry and power: 2x2 stride 2 tiles (pipelined_rows) of rows at
// least one vector of windows wide, A's root in vectors.
template <class A>
bool pair_tiles_apply(const RowsAndColumns& rc, const LpNorm& lp) {
  if (rc.rows.kernel != 2 || rc.cols.kernel != 2 || rc.cols.out < Simd<A>::kLength) return false;
  bool vector_root_of_power = false;
  with_power(lp, [&](auto power) { vector_root_of_power = kVectorRoot<decltype(power), A>; });
  return vector_root_of_power;
}

// 2x2 stride 2 planes (pair_tiles_apply), a block of output rows at a time: their window sums (pair_tile_sums, each
// input row read once, the input rows a few output rows ahead fetched into the cache), then the roots of the whole
// block in one run of vectors (vector_roots). A block with a sum that may be untrusted counts them and recomputes
// those windows exactly.
// Outputs a block of lp_pool_pair_tiles aims at: the next block's input (4 output rows of 56) fetched while this one's
// roots are taken keeps memory busy; longer blocks leave it idle while their sums are made.
constexpr int64_t kPairTileValues = 256;

template <class A>
void lp_pool_pair_tiles(const A* x, A* y, int64_t planes, const PoolGeometry& g, const RowsAndColumns& rc,
                        const LpNorm& lp) {
  const int64_t in_w = rc.cols.in, out_w = rc.cols.out, out_h = rc.rows.out;
  const int64_t block = max_of<int64_t>(1, min_of(out_h, kPairTileValues / out_w));  // output rows
  ScratchBuffer memory(sizeof(int64_t) * kVisitScratch * g.axes.size() +
                       sizeof(A) * static_cast<size_t>(block * out_w + kBlock));
  int64_t* index = memory.as<int64_t>();  // 8-byte values first, so every array is aligned for its type
  A* sums = reinterpret_cast<A*>(index + kVisitScratch * g.axes.size());
  A* probe_buffer = sums + block * out_w;
  auto plane_rows = [&](const PlaneAttempt<A>& a, auto power, auto& trust) {
    if constexpr (kVectorRoot<decltype(power), A>) {
      const A* xp = a.x;
      A* yp = a.y;
      const PowerOfTwo<A> up = a.up, down = a.down;
      auto run = [&](auto scale, auto down_scale) {
        for (int64_t oh0 = 0; oh0 < out_h; oh0 += block) {
          const int64_t nb = min_of(block, out_h - oh0);
          for (int64_t r = 0; r < nb; ++r) {
            const int64_t oh = oh0 + r;
            pair_tile_sums(xp + oh * 2 * in_w, in_w, sums + r * out_w, out_w, power, scale);
          }
          // the input rows of the next block (in the next plane after this plane's last block), fetched while the
          // roots are taken
          const A* fetch = xp + (oh0 + nb) * 2 * in_w;
          int64_t fetch_rows = 2 * min_of(block, out_h - oh0 - nb);
          if (oh0 + nb >= out_h) {
            fetch = xp + g.in_size;
            fetch_rows = a.plane + 1 < planes ? 2 * min_of(block, out_h) : 0;
          }
          const int64_t n = nb * out_w;
          A* out = yp + oh0 * out_w;
          if (vector_roots(sums, out, n, power, down_scale, reinterpret_cast<const char*>(fetch),
                           fetch_rows * in_w * static_cast<int64_t>(sizeof(A)))) {
            continue;
          }
          if (!trust.recompute_untrusted(
                  n, oh0 * out_w, [&](int64_t j) { return sums[j]; }, index,
                  [&](int64_t j, A exact) { out[j] = exact; })) {
            return;
          }
        }
      };
      if (a.e == 0) {
        auto same = [](auto v) __attribute__((always_inline)) { return v; };
        run(same, same);
      } else {
        run([&](auto v) __attribute__((always_inline)) { return v * up.first * up.second; },
            [&](auto root) __attribute__((always_inline)) { return root * down.first * down.second; });
      }
    }
  };
  for_each_plane_scaled(x, y, planes, g, lp, probe_buffer, plane_rows);
}

// Runs the pipelined path when it applies (float and double planes of side-by-side windows); false otherwise.
template <class T>
bool try_lp_pool_pipelined(const T* x, T* y, int64_t planes, const PoolGeometry& g, const RowsAndColumns& rc,
                           const LpNorm& lp) {
  if constexpr (!std::is_same_v<T, AccOf<T>>) {
    return false;
  } else {
    if (!pipelined_rows(rc)) return false;
    const int kernels = 10 * static_cast<int>(rc.rows.kernel) + static_cast<int>(rc.cols.kernel);
    switch (kernels) {
      case 22:
        if (pair_tiles_apply<T>(rc, lp)) {
          lp_pool_pair_tiles(x, y, planes, g, rc, lp);
        } else {
          lp_pool_pipelined<2, 2>(x, y, planes, g, rc, lp);
        }
        return true;
      case 23: lp_pool_pipelined<2, 3>(x, y, planes, g, rc, lp); return true;
      case 32: lp_pool_pipelined<3, 2>(x, y, planes, g, rc, lp); return true;
      case 33: lp_pool_pipelined<3, 3>(x, y, planes, g, rc, lp); return true;
      default: return false;
    }
  }
}

// ---- 3x3 stride 1 windows with one row and column of padding each side, a column strip of the plane at a time ----

// The lanes of v one lane up (lane 0 takes +0) and one lane down (the last lane takes +0).
template <class V, size_t... I>
[[gnu::always_inline]] inline V lanes_up(V v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, V{}, sizeof...(I) + 1, I...);
}
template <class V, size_t... I>
[[gnu::always_inline]] inline V lanes_down(V v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, V{}, (I + 1)..., sizeof...(I) + 1);
}

// Whether lp_pool_triple_strips takes planes of this geometry and power: 3x3 windows at stride 1 over planes padded by
// one row and column each side (output plane = input plane), whole p whose root is square roots or none (kLaneRoot),
// rows at least one vector and 6 values wide, the first three rows within the probe's elements (see
// triple_strips_plane). For float and double planes (A, the accumulator type).
template <class A>
bool triple_strips_apply(const PoolGeometry& g, const LpNorm& lp) {
  if (g.axes.size() != 2 || (lp.integer_p != 1 && lp.integer_p != 2 && lp.integer_p != 4)) return false;
  for (const AxisGeometry& a : g.axes) {
    if (a.kernel != 3 || a.stride != 1 || a.dilation != 1 || a.pad_begin != 1 || a.pad_end != 1 || a.out != a.in) {
      return false;
    }
  }
  const int64_t h = g.axes[0].in, w = g.axes[1].in;
  return h >= 3 && w >= 6 && w >= Simd<A>::kLength && 3 * w <= kBlock;
}

// One plane of triple_strips_apply's geometry at scale 1 (e = 0): for each strip of L columns (the last one overlapping
// the one before when L does not divide w), down the rows: h = (|x[j-1]|^p + |x[j]|^p) + |x[j+1]|^p of the next input
// row (the edge columns' outside neighbour +0, the term padding adds), and the window sum of the output row above,
// (h of the row above it + h of its row) + h (+0 rows above the first and below the last), its root stored: the sums
// of lp_pool_blocked (padded_triple_rows, fused_triple_rows and the flat rows) in the same order, with the two rows of
// h in registers instead of column sums stored and read back. The first strip of a block fetches into the cache the
// input rows of the next block (the next plane's first rows after a plane's last block), a row per row it takes: the
// hardware's prefetchers alone leave memory idle at each block's start.
// Returns whether all the sums together are at most max / 2048, and sets least to the smallest sum. The plane's roots
// are those of the plane paths when, besides, every sum is trusted (at least the trusted minimum): the paths then
// scale the plane by 2^0, since the probe of the plane's first kBlock values (probe_exponent) is trusted: it holds the
// first three rows, so two windows without a common element (each sum trusted) and no more than kBlock powers (each
// at most max / 2048). Sums below the minimum are allowed where no element has a nonzero magnitude below
// smallest_safe_magnitude and the probe is trusted (lp_pool_triple_strips asks): they are then exact zeros, which the
// plane paths keep too. Otherwise the plane is for the plane paths to take again.
// Input rows a block of triple_strips_plane takes each strip through.
constexpr int64_t kStripRows = 8;

template <class A, class Power>
bool triple_strips_plane(const A* __restrict x, A* __restrict y, int64_t rows, int64_t w, Power power, A& least) {
  using S = Simd<A>;
  using V = typename S::Value;
  constexpr int L = S::kLength;
  constexpr auto below = std::make_index_sequence<L - 1>{};
  V smallest = S::splat(std::numeric_limits<A>::max());
  V total{};
  // each strip's two rows of h at the end of a block of rows, for the next block: strip k at 2 k and 2 k + 1
  V carried[2 * (kBlock / 3 / L + 2)];
  // the rows [r0, r1) of the strip k of L columns from column j; left_edge / right_edge: std::true_type when it holds
  // the row's first / last column
  auto strip = [&](int64_t k, int64_t j, int64_t r0, int64_t r1, auto left_edge, auto right_edge)
                   __attribute__((always_inline)) {
                     auto row_sums = [&](const A* row) __attribute__((always_inline)) {
                       const V centre = lane_power(power, S::load(row + j));
                       V left, right;
                       if constexpr (decltype(left_edge)::value) {
                         left = lanes_up(centre, below);
                       } else {
                         left = lane_power(power, S::load(row + j - 1));
                       }
                       if constexpr (decltype(right_edge)::value) {
                         right = lanes_down(centre, below);
                       } else {
                         right = lane_power(power, S::load(row + j + 1));
                       }
                       return (left + centre) + right;
                     };
                     auto finish = [&](int64_t out_row, V sum) __attribute__((always_inline)) {
                       smallest = sum < smallest ? sum : smallest;
                       total += sum;
                       S::store(y + out_row * w + j, lane_root(power, sum));
                     };
                     V above, middle;
                     int64_t r = r0;
                     if (r0 == 0) {
                       above = V{};  // the padding row above the first
                       middle = row_sums(x);
                       r = 1;
                     } else {
                       above = carried[2 * k];
                       middle = carried[2 * k + 1];
                     }
                     for (; r < r1; ++r) {
                       if (k == 0) {  // the input row kStripRows on, which the next block's strips read
                         const char* ahead = reinterpret_cast<const char*>(x + (r + kStripRows) * w);
                         for (int64_t b = 0; b < w * static_cast<int64_t>(sizeof(A)); b += 64) {
                           __builtin_prefetch(ahead + b);
                         }
                       }
                       const V next = row_sums(x + r * w);
                       finish(r - 1, (above + middle) + next);
                       above = middle;
                       middle = next;
                     }
                     if (r1 == rows) {
                       finish(rows - 1, (above + middle) + V{});  // the padding row below the last
                     } else {
                       carried[2 * k] = above;
                       carried[2 * k + 1] = middle;
                     }
                   };
  using Yes = std::true_type;
  using No = std::false_type;
  // blocks of kStripRows input rows, each strip in turn: the plane is read about in order (as the hardware's
  // prefetchers expect), and a block's rows stay in L1 for the strips after the first
  for (int64_t r0 = 0; r0 < rows; r0 += kStripRows) {
    const int64_t r1 = min_of(rows, r0 + kStripRows);
    if (w == L) {
      strip(0, 0, r0, r1, Yes{}, Yes{});
    } else {
      strip(0, 0, r0, r1, Yes{}, No{});
      int64_t k = 1;
      for (; (k + 1) * L < w; ++k) strip(k, k * L, r0, r1, No{}, No{});
      strip(k, w - L, r0, r1, No{}, Yes{});
    }
  }
  least = smallest[0];
  A all = total[0];
  for (int l = 1; l < L; ++l) {
    least = smallest[l] < least ? smallest[l] : least;
    all += total[l];
  }
  return all <= std::numeric_limits<A>::max() / 2048;  // NaN fails
}

template <class T>
void lp_pool_planes_by_geometry(const void* xv, void* yv, int64_t planes, const PoolGeometry& g, const LpNorm& lp);

// The planes of triple_strips_apply, each by triple_strips_plane, or by the plane paths when that cannot vouch for it.
template <class A>
void lp_pool_triple_strips(const A* x, A* y, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  const int64_t rows = g.axes[0].in, w = g.axes[1].in;
  A probe_buffer[kBlock];
  with_power(lp, [&](auto power) {
    A safe_magnitude = -1;  // found at the first plane that needs it
    auto safe = [&] {
      if (safe_magnitude < 0) safe_magnitude = smallest_safe_magnitude(power, PowerOfTwo<A>(0));
      return safe_magnitude;
    };
    if constexpr (kLaneRoot<decltype(power)>) {
      for (int64_t plane = 0; plane < planes; ++plane) {
        const A* xp = x + plane * g.in_size;
        A* yp = y + plane * g.out_size;
        A least = 0;
        const bool bounded = triple_strips_plane(xp, yp, rows, w, power, least);
        if (bounded && window_sum_trusted(least)) continue;
        if (bounded && least == A(0) && first_below(xp, g.in_size, safe()) == g.in_size &&
            probe_exponent(xp, g.in_size, probe_buffer, lp) == 0) {
          continue;
        }
        lp_pool_planes_by_geometry<A>(xp, yp, 1, g, lp);
      }
    }
  });
}

// ---- float16 and bfloat16 planes, converted to float a group of planes at a time --------------------------------

// Input and output floats of one group of converted planes: together in L2 beside the float paths' own scratch.
constexpr int64_t kConvertedGroupValues = int64_t{1} << 15;
// A plane whose input and output floats exceed this stays on the T paths, which convert a row block at a time:
// converting it whole would take several times the tensor's own memory.
constexpr int64_t kConvertedPlaneLimit = int64_t{1} << 22;

inline bool converted_planes_apply(const PoolGeometry& g) { return g.in_size + g.out_size <= kConvertedPlaneLimit; }

template <class T>
void lp_pool_planes(const void* xv, void* yv, int64_t planes, const PoolGeometry& g, const LpNorm& lp);

// Planes of T (float16, bfloat16) through the float paths: every T value is exact in float, and a window's sum and
// root are the same float operations in the same order on either path, so the roots, rounded to T once by
// store_block, are the same bits; only the float paths (triple strips, pipelined, fused and side-by-side rows) are
// vectorised for the plane's geometry.
template <class T>
void lp_pool_converted(const T* x, T* y, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  using A = AccOf<T>;
  const int64_t per_plane = g.in_size + g.out_size;
  const int64_t group = min_of(planes, max_of(int64_t{1}, kConvertedGroupValues / per_plane));
  ScratchBuffer memory(sizeof(A) * static_cast<size_t>(group * per_plane));
  A* in = memory.as<A>();
  A* out = in + group * g.in_size;
  for (int64_t begin = 0; begin < planes; begin += group) {
    const int64_t n = min_of(group, planes - begin);
    load_block(x + begin * g.in_size, in, n * g.in_size);
    lp_pool_planes<A>(in, out, n, g, lp);
    store_block(static_cast<const A*>(out), y + begin * g.out_size, n * g.out_size);
  }
}

// LpPool over whole planes, each plane by the path its geometry takes.
template <class T>
void lp_pool_planes(const void* xv, void* yv, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  if constexpr (std::is_same_v<T, AccOf<T>>) {
    if (triple_strips_apply<T>(g, lp)) {
      lp_pool_triple_strips(static_cast<const T*>(xv), static_cast<T*>(yv), planes, g, lp);
      return;
    }
  } else if (converted_planes_apply(g)) {
    lp_pool_converted(static_cast<const T*>(xv), static_cast<T*>(yv), planes, g, lp);
    return;
  }
  lp_pool_planes_by_geometry<T>(xv, yv, planes, g, lp);
}

// The plane paths of lp_pool_planes but triple_strips_plane's.
template <class T>
void lp_pool_planes_by_geometry(const void* xv, void* yv, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  if (g.axes.size() <= 2 && !needs_scaled_lp(lp)) {
    const RowsAndColumns rc = rows_and_columns(g);
    if (try_lp_pool_pipelined(static_cast<const T*>(xv), static_cast<T*>(yv), planes, g, rc, lp)) return;
    RowBlocks rb;
    if (row_blocks(rc, rb)) {
      lp_pool_blocked(static_cast<const T*>(xv), static_cast<T*>(yv), planes, g, rc, rb, lp);
      return;
    }
    lp_pool_streamed(static_cast<const T*>(xv), static_cast<T*>(yv), planes, g, lp);
    return;
  }
  using A = AccOf<T>;
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  const int64_t scratch = max_of(g.largest_intermediate, g.in_size);
  ScratchBuffer memory(sizeof(A) * static_cast<size_t>(3 * scratch) + sizeof(int64_t) * kVisitScratch * g.axes.size());
  int64_t* index = memory.as<int64_t>();  // 8-byte values first, so every array is aligned for its type
  A* powers = reinterpret_cast<A*>(index + kVisitScratch * g.axes.size());
  A* buf_a = powers + scratch;
  A* buf_b = buf_a + scratch;
  if (needs_scaled_lp(lp)) {  // every window in the scaled double form
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t i = 0; i < g.out_size; ++i) buf_a[i] = exact_window(x + p * g.in_size, g, i, index, lp);
      store_block(static_cast<const A*>(buf_a), y + p * g.out_size, g.out_size);
    }
    return;
  }
  auto plane_rows = [&](const PlaneAttempt<T>& a, auto power, auto& trust) {
    load_block(a.x, powers, g.in_size);
    if (a.e != 0) scale_by_power_of_two(powers, g.in_size, a.e);
    for (int64_t i = 0; i < g.in_size; ++i) powers[i] = power(powers[i]);
    const A* sums = window_sums(static_cast<const A*>(powers), buf_a, buf_b, g, 1);
    int64_t untrusted = 0;
    for (int64_t i = 0; i < g.out_size; ++i) untrusted += !window_sum_trusted(sums[i]);
    // Roots, then the rare untrusted windows again, scaled.
    A* roots = sums == buf_a ? buf_b : buf_a;
    for (int64_t i = 0; i < g.out_size; ++i) roots[i] = root_for(power, sums[i]);
    if (a.e != 0) scale_by_power_of_two(roots, g.out_size, -a.e);
    if (untrusted > 0 &&
        !trust.recompute_untrusted(
            g.out_size, 0, [&](int64_t i) { return sums[i]; }, index, [&](int64_t i, A exact) { roots[i] = exact; })) {
      return;
    }
    store_block(static_cast<const A*>(roots), a.y, g.out_size);
  };
  for_each_plane_scaled(x, y, planes, g, lp, buf_a, plane_rows);
}

// ---- planes of one element (the 1x1 planes of CNN heads under padded windows), many planes per loop --------------

// Every plane one element, which its one output's window holds (e.g. 3x3 pad 1 over 1x1 planes): on every plane path
// that window's sum is the element's |x|^p (padding adds nothing, a sum of one term is the term), and the plane's
// probe is that term too, so a plane whose term is trusted gets its root, unscaled. Such planes are consecutive
// values: one loop takes many of them.
inline bool single_element_planes(const PoolGeometry& g) {
  if (g.in_size != 1 || g.out_size != 1) return false;
  for (const AxisGeometry& axis : g.axes) {
    if (axis.valid_count(0) != 1) return false;
  }
  return true;
}

// The roots of single_element_planes, a block of planes at a time; a plane whose term is not trusted is recomputed
// alone by lp_pool_planes (scaled or exact, as that path decides).
template <class T>
void lp_pool_single_elements(const T* x, T* y, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  using A = AccOf<T>;
  A converted[kBlock];
  A roots[kBlock];
  with_power(lp, [&](auto power) {
    for (int64_t begin = 0; begin < planes; begin += kBlock) {
      const int64_t n = min_of(kBlock, planes - begin);
      const A* a = acc_view(x + begin, converted, n);
      A* out = roots;
      if constexpr (std::is_same_v<T, A>) out = y + begin;
      int32_t bad = 0;  // n <= kBlock
      int32_t unsure = 0;
      for (int64_t j = 0; j < n; ++j) {
        const A sum = power(a[j]);
        bad += !window_sum_trusted(sum) & (a[j] != A(0));  // a zero's root, +0, is already the exact one
        out[j] = loop_root(power, sum, unsure);
      }
      settle_roots(power, unsure, n, [&](int64_t j) { return power(a[j]); }, [&](int64_t j, A root) { out[j] = root; });
      if constexpr (!std::is_same_v<T, A>) store_block(static_cast<const A*>(out), y + begin, n);
      if (bad == 0) continue;
      for (int64_t j = 0; j < n; ++j) {
        if (!window_sum_trusted(power(a[j])) && a[j] != A(0)) lp_pool_planes<T>(x + begin + j, y + begin + j, 1, g, lp);
      }
    }
  });
}

template <class T>
void lp_pool(const void* xv, void* yv, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  if (!needs_scaled_lp(lp) && single_element_planes(g)) {
    lp_pool_single_elements(static_cast<const T*>(xv), static_cast<T*>(yv), planes, g, lp);
    return;
  }
  lp_pool_planes<T>(xv, yv, planes, g, lp);
}

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
