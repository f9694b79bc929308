// LpPool: powers, window sums, roots per plane; untrusted windows recomputed exactly.
// Part of the per-ISA kernels: included by kernels_impl.h inside namespace onnx_pools::ONNX_POOLS_ISA::{anon},
// so everything here is compiled once per instruction set with that file's flags.
#pragma once

// Roots of n window sums in place, the root matching lp's power (root_for).
template <class A>
void roots_in_place(A* v, int64_t n, const LpNorm& lp) {
  with_power(lp, [&](auto power) {
    for (int64_t i = 0; i < n; ++i) v[i] = root_for(power, v[i]);
  });
}

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

// 1-D and 2-D planes: streamed an output row at a time (scratch of a few rows, not of a plane). Each input row's
// |x * 2^e|^p is computed once; windows whose sum is not trustworthy are recomputed exactly on the spot, and when
// more than 1/16 of a plane's windows are (subnormal or huge inputs the first elements did not reveal) the plane
// is redone once with e normalising its largest magnitude.
template <class T>
void lp_pool_streamed(const T* x, T* y, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  using A = AccOf<T>;
  const RowsAndColumns rc = rows_and_columns(g);
  const int64_t sums_scratch = stream_scratch(rc, 1);
  const int64_t strip = min_of(rc.cols.out, kStripColumns);
  ScratchBuffer memory(sizeof(int64_t) * static_cast<size_t>(kVisitScratch * g.axes.size() + stream_tags(rc)) +
                       sizeof(A) * static_cast<size_t>(sums_scratch + strip + kBlock));
  int64_t* index = memory.as<int64_t>();  // 8-byte values first, so every array is aligned for its type
  int64_t* tags = index + kVisitScratch * g.axes.size();
  A* sums_memory = reinterpret_cast<A*>(tags + stream_tags(rc));
  A* roots = sums_memory + sums_scratch;
  A* probe_buffer = roots + strip;
  const int64_t row_length = rc.cols.in;
  const int64_t out_row_length = rc.cols.out;
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xp = x + plane * g.in_size;
    T* yp = y + plane * g.out_size;
    auto exact = [&](int64_t i) { return exact_window(xp, g, i, index, lp); };
    int e = probe_exponent(xp, g.in_size, probe_buffer, lp);
    for (int attempt = 0;; ++attempt) {
      const PowerOfTwo<A> up(e), down(-e);
      int64_t untrusted = 0;
      bool redo = false;
      with_power(lp, [&](auto power) {
        auto load = [&](int64_t row, int64_t first, int64_t n, A* dst) {
          const T* src = xp + row * row_length + first;
          if constexpr (std::is_same_v<T, A>) {  // no conversion: the powers straight from the input
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
        };
        auto finish = [&](int64_t oh, int64_t begin, int64_t n, const A* sums) {
          int64_t bad = 0;
          if (e == 0) {
            for (int64_t j = 0; j < n; ++j) {
              bad += !window_sum_trusted(sums[j]);
              roots[j] = root_for(power, sums[j]);
            }
          } else {
            for (int64_t j = 0; j < n; ++j) {
              bad += !window_sum_trusted(sums[j]);
              roots[j] = root_for(power, sums[j]) * down.first * down.second;
            }
          }
          if (bad > 0) {
            untrusted += bad;
            if (attempt == 0 && untrusted * 16 > g.out_size) {
              const int plane_e = normalising_exponent(largest_magnitude(xp, g.in_size));
              if (plane_e != e) {
                e = plane_e;
                redo = true;
                return false;
              }
            }
            for (int64_t j = 0; j < n; ++j) {
              if (!window_sum_trusted(sums[j])) roots[j] = exact(oh * out_row_length + begin + j);
            }
          }
          store_block(static_cast<const A*>(roots), yp + oh * out_row_length + begin, n);
          return true;
        };
        stream_window_sums(rc, 1, sums_memory, tags, load, finish);
      });
      if (!redo) break;
    }
  }
}

template <class T>
void lp_pool(const void* xv, void* yv, int64_t planes, const PoolGeometry& g, const LpNorm& lp) {
  if (g.axes.size() <= 2 && !needs_scaled_lp(lp)) {
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
  const bool all_exact = needs_scaled_lp(lp);
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = x + p * g.in_size;
    T* yp = y + p * g.out_size;
    // The scaled double form of one window: for windows the fast sums cannot be trusted with (or all of them).
    auto exact = [&](int64_t i) { return exact_window(xp, g, i, index, lp); };
    if (all_exact) {
      for (int64_t i = 0; i < g.out_size; ++i) buf_a[i] = exact(i);
      store_block(static_cast<const A*>(buf_a), yp, g.out_size);
      continue;
    }
    // The plane is multiplied by 2^e (exact) before the powers and the roots by 2^-e after: e = 0 first, and when
    // many windows come out untrusted (subnormal or huge inputs), once more with e normalising the plane's largest
    // magnitude, so such planes stay on the fast path.
    int e = probe_exponent(xp, g.in_size, buf_a, lp);
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
    // Roots, then the rare untrusted windows again, scaled.
    A* roots = sums == buf_a ? buf_b : buf_a;
    std::memcpy(roots, sums, sizeof(A) * static_cast<size_t>(g.out_size));
    roots_in_place(roots, g.out_size, lp);
    if (e != 0) scale_by_power_of_two(roots, g.out_size, -e);
    if (untrusted > 0) {
      for (int64_t i = 0; i < g.out_size; ++i) {
        if (!window_sum_trusted(sums[i])) roots[i] = exact(i);
      }
    }
    store_block(roots, yp, g.out_size);
  }
}
