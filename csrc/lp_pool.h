// LpPool: powers, window sums, roots per plane; untrusted windows recomputed exactly.
// Part of the per-ISA kernels: included by kernels_impl.h inside namespace onnx_pools::ONNX_POOLS_ISA::{anon},
// so everything here is compiled once per instruction set with that file's flags.
#pragma once

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

