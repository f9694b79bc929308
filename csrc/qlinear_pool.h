// QLinearAveragePool: integer window sums, requantisation in double, ORT's float evaluation near rounding ties.
// Part of the per-ISA kernels: included by kernels_impl.h inside namespace onnx_pools::ONNX_POOLS_ISA::{anon},
// so everything here is compiled once per instruction set with that file's flags.
#pragma once

// ---- QLinearAveragePool ---------------------------------------------------------------------------------

inline double round_half_even(double v) {       // |v| < 2^51
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
    const float element =
        q.x_scale * static_cast<float>(static_cast<int32_t>(x[offset * channels + c]) - q.x_zero_point);
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
inline Q to_quantized(double clamped) {
  return static_cast<Q>(static_cast<int32_t>(round_half_even(clamped)));
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

// ORT's float value (as ort_float_value) of one window of a 1-D or 2-D plane, without the generic window walk:
// the tie path runs for a few percent of all outputs when scales are equal (edge windows of 4 or 6 elements land
// exactly on .5), so it must cost about as much as the window itself.
template <class Q>
double ort_float_value_2d(const Q* x, const RowsAndColumns& p, int64_t channels, int64_t c, int64_t oh, int64_t ow,
                          const QLinearParams& q, int64_t kernel_size) {
  int64_t r_lo, r_hi, k_lo, k_hi;
  p.rows.valid_range(oh, r_lo, r_hi);
  p.cols.valid_range(ow, k_lo, k_hi);
  float sum = 0;
  const int64_t row0 = oh * p.rows.stride - p.rows.pad_begin, col0 = ow * p.cols.stride - p.cols.pad_begin;
  for (int64_t r = r_lo; r < r_hi; ++r) {
    const Q* xr = x + ((row0 + r * p.rows.dilation) * p.cols.in + col0) * channels + c;
    for (int64_t k = k_lo; k < k_hi; ++k) {
      sum += q.x_scale * static_cast<float>(static_cast<int32_t>(xr[k * p.cols.dilation * channels]) - q.x_zero_point);
    }
  }
  const int64_t valid = (r_hi - r_lo) * (k_hi - k_lo);
  const int64_t count = q.count_include_pad ? kernel_size : valid;
  sum /= static_cast<float>(count);
  return static_cast<double>(sum / q.y_scale + static_cast<float>(q.y_zero_point));
}

// The requantisation, written once: y = round((sum - zero_sum) * scale + y_zero_point), clamped, where per output
// position zero_sum = x_zero_point * (elements in the window) and scale = x_scale / (y_scale * count). Values
// within rounding noise of a tie are left for the caller (the count of them is returned, their positions marked
// in `tie` when given).
template <class Q, class I>
struct Requantiser {
  double y_zero, ratio;
  int32_t x_zero_point;
  int64_t kernel_size;
  bool count_include_pad;

  Requantiser(const QLinearParams& q, int64_t kernel)
      : y_zero(static_cast<double>(q.y_zero_point)),
        ratio(static_cast<double>(q.x_scale) / static_cast<double>(q.y_scale)),
        x_zero_point(q.x_zero_point),
        kernel_size(kernel),
        count_include_pad(q.count_include_pad) {}

  // zero_sum and scale of a window holding `valid` input elements
  void pattern(int64_t valid, I& zero_sum, double& scale) const {
    const int64_t count = count_include_pad ? kernel_size : valid;
    zero_sum = static_cast<I>(x_zero_point * valid);
    scale = count == 0 ? 0.0 : ratio / static_cast<double>(count);
  }

  // n positions of `channels` interleaved values each; marks in `tie` (one byte per value) the values within
  // rounding noise of a tie, whose outputs the caller then recomputes, and returns how many there are.
  int64_t run(const I* sums, const I* zero_sum, const double* scale, int64_t n, int64_t channels, Q* y,
              uint8_t* tie) const {
    int64_t ties = 0;
    if (channels == 1) {
      int64_t i = 0;
#if defined(ONNX_POOLS_NEON_INTRINSICS)
      if constexpr (std::is_same_v<I, int32_t>)
        i = neon_requantise<Q, false>(sums, zero_sum, scale, y_zero, n, y, tie, ties);
#endif
      for (; i < n; ++i) {
        const double v = clamp_to<Q>(static_cast<double>(sums[i] - zero_sum[i]) * scale[i] + y_zero);
        const bool t = near_tie(v);
        tie[i] = t;
        ties += t;
        y[i] = to_quantized<Q>(v);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const I zs = zero_sum[i];
        const double sc = scale[i];
        const I* si = sums + i * channels;
        Q* yi = y + i * channels;
        uint8_t* ti = tie + i * channels;
        int64_t c = 0;
#if defined(ONNX_POOLS_NEON_INTRINSICS)
        if constexpr (std::is_same_v<I, int32_t>)
          c = neon_requantise<Q, true>(si, &zs, &sc, y_zero, channels, yi, ti, ties);
#endif
        for (; c < channels; ++c) {
          const double v = clamp_to<Q>(static_cast<double>(si[c] - zs) * sc + y_zero);
          const bool t = near_tie(v);
          ti[c] = t;
          ties += t;
          yi[c] = to_quantized<Q>(v);
        }
      }
    }
    return ties;
  }
};

// Calls f(i) for each i < n with mark[i] != 0, skipping unmarked stretches eight bytes at a time.
template <class F>
void for_each_marked(const uint8_t* mark, int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, mark + i, sizeof word);
    if (word == 0) continue;
    for (int64_t k = 0; k < 8; ++k) {
      if (mark[i + k]) f(i + k);
    }
  }
  for (; i < n; ++i) {
    if (mark[i]) f(i);
  }
}

// 1-D and 2-D pools (NCHW planes, channels == 1, or NHWC images): window sums streamed an output row at a time
// (scratch: a ring of kernel rows of one strip, not a plane), requantised row by row. The zero sums and scales of
// a row are rebuilt only when the row's in-bounds count changes (the edge rows).
template <class Q, class I>
void qlinear_streamed(const Q* x, Q* y, int64_t units, int64_t channels, const PoolGeometry& g,
                      const QLinearParams& q) {
  const RowsAndColumns rc = rows_and_columns(g);
  const Requantiser<Q, I> requantiser(q, g.kernel_size);
  const int64_t strip = min_of(rc.cols.out, kStripColumns);
  const int64_t sums_scratch = stream_scratch(rc, channels);
  ScratchBuffer memory(sizeof(int64_t) * static_cast<size_t>(stream_tags(rc)) +
                       sizeof(double) * static_cast<size_t>(strip) +
                       sizeof(I) * static_cast<size_t>(sums_scratch + strip) + static_cast<size_t>(strip * channels));
  int64_t* tags = memory.as<int64_t>();  // 8-byte values first, so every array is aligned for its type
  double* scale = reinterpret_cast<double*>(tags + stream_tags(rc));
  I* sums_memory = reinterpret_cast<I*>(scale + strip);
  I* zero_sum = sums_memory + sums_scratch;
  uint8_t* tie = reinterpret_cast<uint8_t*>(zero_sum + strip);
  const int64_t row_length = rc.cols.in * channels;
  for (int64_t u = 0; u < units; ++u) {
    const Q* xu = x + u * g.in_size * channels;
    Q* yu = y + u * g.out_size * channels;
    int64_t pattern_rows = -1, pattern_begin = -1;  // the row count and strip the pattern was built for
    auto load = [&](int64_t row, int64_t first, int64_t n, I* dst) {
      const Q* src = xu + row * row_length + first * channels;
      for (int64_t i = 0; i < n * channels; ++i) dst[i] = static_cast<I>(src[i]);
    };
    auto finish = [&](int64_t oh, int64_t begin, int64_t n, const I* sums) {
      const int64_t rows_valid = rc.rows.valid_count(oh);
      if (rows_valid != pattern_rows || begin != pattern_begin) {
        for (int64_t j = 0; j < n; ++j) {
          requantiser.pattern(rows_valid * rc.cols.valid_count(begin + j), zero_sum[j], scale[j]);
        }
        pattern_rows = rows_valid;
        pattern_begin = begin;
      }
      Q* out = yu + (oh * rc.cols.out + begin) * channels;
      if (requantiser.run(sums, zero_sum, scale, n, channels, out, tie) > 0) {
        for_each_marked(tie, n * channels, [&](int64_t e) {
          const double value =
              ort_float_value_2d(xu, rc, channels, e % channels, oh, begin + e / channels, q, g.kernel_size);
          out[e] = to_quantized<Q>(clamp_to<Q>(value));
        });
      }
      return true;
    };
    stream_window_sums(rc, channels, sums_memory, tags, load, finish);
  }
}

// Whether qlinear_pool takes the summed-area path: NCHW 2-D planes with short output rows and no dilation.
inline bool summed_area_planes(const PoolGeometry& g, int64_t channels) {
  return channels == 1 && g.axes.size() == 2 && g.axes[1].out < kDirectColumns && g.axes[0].dilation == 1 &&
         g.axes[1].dilation == 1;
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
  const bool direct = summed_area_planes(g, channels);
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
                       sizeof(int64_t) * (kVisitScratch * rank + static_cast<size_t>(rows)) +
                       static_cast<size_t>(block_rows * row_size));
  // 8-byte values first (scales, then indices), then the integer arrays, so every array is aligned for its type.
  double* scales = memory.as<double>();
  int64_t* index = reinterpret_cast<int64_t*>(scales + block_positions + out_last);
  int64_t* row_lead_valid =
      index + kVisitScratch * rank;  // per output row of a unit: in-bounds count over the leading axes
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
  uint8_t* tie = reinterpret_cast<uint8_t*>(edge.zero_sum + out_last);  // near-tie marks of a block
  const Requantiser<Q, I> requantiser(q, g.kernel_size);
  const RowsAndColumns rc = rank <= 2 ? rows_and_columns(g) : RowsAndColumns{};
  auto fill_row = [&](I* zero_sum, double* scale, int64_t lead_valid) {
    for (int64_t j = 0; j < out_last; ++j) requantiser.pattern(lead_valid * last.valid_count(j), zero_sum[j], scale[j]);
  };
  if (direct) {  // small planes: the pattern of one plane, edge rows included, repeated for a whole step
    for (int64_t r = 0; r < rows; ++r)
      fill_row(bulk.zero_sum + r * out_last, bulk.scale + r * out_last, row_lead_valid[r]);
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
      if (requantiser.run(s, zero_sum, scale, positions, channels, yb, tie) == 0) return;
      for_each_marked(tie, positions * channels, [&](int64_t e) {
        const int64_t i = e / channels;
        const int64_t r = row + i / out_last;  // the unit's row, and the unit
        const Q* x_unit = xu + (r / rows) * g.in_size * channels;
        const int64_t oh = r % rows, ow = i % out_last;
        const double value = rank <= 2
                                 ? ort_float_value_2d(x_unit, rc, channels, e % channels, oh, ow, q, g.kernel_size)
                                 : ort_float_value(x_unit, g, channels, e % channels, oh * out_last + ow, q, index);
        yb[e] = to_quantized<Q>(clamp_to<Q>(value));
      });
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
// Elements of an NCHW plane up to which it is pooled whole (4 bytes of scratch per element: 256 KiB, in L2).
constexpr int64_t kWholePlaneLimit = 1 << 16;

template <class Q>
void qlinear_dispatch(const void* x, void* y, int64_t units, int64_t channels, const PoolGeometry& g,
                      const QLinearParams& q) {
  // NCHW planes that fit in cache take qlinear_pool's whole-plane passes (fewer, longer loops than short rows;
  // scratch bounded by kWholePlaneLimit), small ones its summed-area path; larger planes and NHWC images are
  // streamed.
  const bool streamed =
      g.axes.size() <= 2 && !summed_area_planes(g, channels) && !(channels == 1 && g.in_size <= kWholePlaneLimit);
  auto run = [&](auto sum_type) {  // the integer type of the window sums
    using I = decltype(sum_type);
    if (streamed) {
      qlinear_streamed<Q, I>(static_cast<const Q*>(x), static_cast<Q*>(y), units, channels, g, q);
    } else {
      qlinear_pool<Q, I>(static_cast<const Q*>(x), static_cast<Q*>(y), units, channels, g, q);
    }
  };
  if (g.kernel_size <= (1 << 23)) {
    run(int32_t{});
  } else {
    run(int64_t{});
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
