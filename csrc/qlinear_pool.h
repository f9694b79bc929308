// QLinearAveragePool: integer window sums, requantisation in double, ORT's float evaluation near rounding ties.
// Part of the per-ISA kernels: included by kernels_impl.h inside namespace onnx_pools::ONNX_POOLS_ISA::{anon},
// so everything here is compiled once per instruction set with that file's flags.
#pragma once

// ---- QLinearAveragePool ---------------------------------------------------------------------------------

inline double round_half_even(double v) {       // |v| < 2^51
  constexpr double magic = 6755399441055744.0;  // 1.5 * 2^52
  return (v + magic) - magic;
}

// ONNX Runtime's own float arithmetic, written once: each element dequantised in float, ...
template <class Q>
inline float ort_dequantised(Q v, const QLinearParams& q) {
  return q.x_scale * static_cast<float>(static_cast<int32_t>(v) - q.x_zero_point);
}
// ... and a window's float sum of those divided by the count, then by y_scale, plus y_zero_point (before rounding).
inline float ort_requantised(float sum, int64_t count, const QLinearParams& q) {
  return sum / static_cast<float>(count) / q.y_scale + static_cast<float>(q.y_zero_point);
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
    sum += ort_dequantised(x[offset * channels + c], q);
    ++valid;
  });
  return ort_requantised(sum, q.count_include_pad ? g.kernel_size : valid, q);
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

// Whether any of n marks is set, eight bytes at a time (a library call per window costs more than the test).
inline bool any_marked(const uint8_t* mark, int64_t n) {
  uint64_t any = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, mark + i, sizeof word);
    any |= word;
  }
  for (; i < n; ++i) any |= mark[i];
  return any != 0;
}

// How many of n marks (0 or 1 each) are set, eight at a time.
inline int64_t count_marked(const uint8_t* mark, int64_t n) {
  int64_t count = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, mark + i, sizeof word);
    count += __builtin_popcountll(word);
  }
  for (; i < n; ++i) count += mark[i];
  return count;
}

// Calls f(i) for each i < n with mark[i] != 0, skipping unmarked stretches 32 bytes at a time.
template <class F>
void for_each_marked(const uint8_t* mark, int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (!any_marked(mark + i, 32)) continue;
    for (int64_t k = 0; k < 32; ++k) {
      if (mark[i + k]) f(i + k);
    }
  }
  for (; i < n; ++i) {
    if (mark[i]) f(i);
  }
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
      sum += ort_dequantised(xr[k * p.cols.dilation * channels], q);
    }
  }
  const int64_t valid = (r_hi - r_lo) * (k_hi - k_lo);
  return ort_requantised(sum, q.count_include_pad ? kernel_size : valid, q);
}

// Outputs of the marked elements of output row oh, columns [begin, begin + n) with `channels` interleaved,
// evaluated as ort_float_value_2d does but vectorised: across the channels of a window (NHWC), or across the row
// (one plane): with equal scales whole edge rows land on ties, and one window at a time would cost several times
// the row's fast path. Each value adds the same terms in the same order as ort_float_value_2d. acc: scratch for
// max(channels, n) floats.
template <class Q>
void ort_tie_outputs_2d(const Q* x, const RowsAndColumns& p, int64_t channels, int64_t oh, int64_t begin, int64_t n,
                        const QLinearParams& q_in, int64_t kernel_size, const uint8_t* mark, Q* y, float* acc) {
  const QLinearParams q = q_in;  // a local copy: the stores to acc cannot alias it, so the loops vectorise
  int64_t r_lo, r_hi;
  p.rows.valid_range(oh, r_lo, r_hi);
  const int64_t row0 = oh * p.rows.stride - p.rows.pad_begin;
  auto count_of = [&](int64_t valid) { return q.count_include_pad ? kernel_size : valid; };
  auto output = [](float value) { return to_quantized<Q>(clamp_to<Q>(static_cast<double>(value))); };
  const AxisGeometry& cols = p.cols;
  if (channels > 1) {
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* mj = mark + j * channels;
      if (!any_marked(mj, channels)) continue;
      int64_t k_lo, k_hi;
      cols.valid_range(begin + j, k_lo, k_hi);
      fill(acc, channels, 0.0f);
      const int64_t col0 = (begin + j) * cols.stride - cols.pad_begin;
      for (int64_t r = r_lo; r < r_hi; ++r) {
        const Q* xr = x + ((row0 + r * p.rows.dilation) * cols.in + col0) * channels;
        for (int64_t k = k_lo; k < k_hi; ++k) {
          const Q* xk = xr + k * cols.dilation * channels;
          for (int64_t c = 0; c < channels; ++c) {
            acc[c] += ort_dequantised(xk[c], q);
          }
        }
      }
      // all channels at once (vectorised divisions), then the marked ones rounded
      const int64_t count = count_of((r_hi - r_lo) * (k_hi - k_lo));
      for (int64_t c = 0; c < channels; ++c) acc[c] = ort_requantised(acc[c], count, q);
      for (int64_t c = 0; c < channels; ++c) {
        if (mj[c]) y[j * channels + c] = output(acc[c]);
      }
    }
    return;
  }
  if (count_marked(mark, n) <= 4 || cols.kernel > cols.in) {  // a few windows (the edge columns): one at a time
    for_each_marked(mark, n, [&](int64_t j) {
      y[j] = to_quantized<Q>(clamp_to<Q>(ort_float_value_2d(x, p, 1, 0, oh, begin + j, q, kernel_size)));
    });
    return;
  }
  fill(acc, n, 0.0f);
  for (int64_t r = r_lo; r < r_hi; ++r) {
    const Q* xr = x + (row0 + r * p.rows.dilation) * cols.in;
    for (int64_t k = 0; k < cols.kernel; ++k) {
      // the columns j of [begin, begin + n) whose window's k-th element lies inside the row
      const int64_t offset = k * cols.dilation - cols.pad_begin;
      const int64_t j_lo = max_of(begin, offset >= 0 ? 0 : (-offset + cols.stride - 1) / cols.stride);
      const int64_t j_hi = min_of(begin + n, offset >= cols.in ? 0 : (cols.in - 1 - offset) / cols.stride + 1);
      for (int64_t j = j_lo; j < j_hi; ++j) {
        acc[j - begin] += ort_dequantised(xr[j * cols.stride + offset], q);
      }
    }
  }
  for_each_marked(mark, n, [&](int64_t j) {
    y[j] = output(ort_requantised(acc[j], count_of((r_hi - r_lo) * cols.valid_count(begin + j)), q));
  });
}

// Window sums of up to this many elements fit int16 (128 x 255 = 32640; s8: 128 x 128), so the streamed and
// whole-plane passes move half the bytes of int32 and the requantisation runs in float (see Requantiser).
constexpr int64_t kShortSumKernel = 128;

// The requantisation, written once: y = round((sum - zero_sum) * scale + y_zero_point), clamped, where per output
// position zero_sum = x_zero_point * (elements in the window) and scale = x_scale / (y_scale * count).
// With int16 sums the vectorised pass runs in float (twice the lanes of double): (sum - zero_sum) is exact in
// float and the float value is within 8e-5 of the exact one wherever the clamp does not decide, so elements more
// than 2e-4 from a tie round as the exact value does; those within 2e-4 (a superset of the 1e-4 tie band) are
// marked and the caller settles them with exact() in double. Results equal the all-double evaluation.
template <class Q, class I>
struct Requantiser {
  static constexpr bool kFloat = sizeof(I) == 2;
  using Scale = std::conditional_t<kFloat, float, double>;
  double y_zero, ratio;
  int32_t x_zero_point;
  int64_t kernel_size;
  bool count_include_pad;

  Requantiser(const QLinearParams& q, int64_t kernel)
      : y_zero(static_cast<double>(q.y_zero_point)),
        ratio(static_cast<double>(q.x_scale) / static_cast<double>(q.y_scale)),
        x_zero_point(q.x_zero_point),
        kernel_size(kernel),
        count_include_pad(q.count_include_pad) {
    if constexpr (kFloat) {
      for (int64_t count = 1; count <= kernel_size; ++count) count_scale[count] = ratio / static_cast<double>(count);
    }
  }
  // ratio / count for each count of a short kernel: exact() runs per marked element, and a division costs more
  // than the rest of it (the same values as the division, so pattern() uses them too)
  double count_scale[kFloat ? kShortSumKernel + 1 : 1] = {};

  // x_scale / (y_scale * count) of a window holding `valid` input elements; 0 for a window without any
  double window_scale(int64_t valid) const {
    const int64_t count = count_include_pad ? kernel_size : valid;
    return count == 0 ? 0.0 : kFloat ? count_scale[count] : ratio / static_cast<double>(count);
  }

  // zero_sum and scale of a window holding `valid` input elements
  void pattern(int64_t valid, I& zero_sum, Scale& scale) const {
    zero_sum = static_cast<I>(x_zero_point * valid);
    scale = static_cast<Scale>(window_scale(valid));
  }

  // The exact value (double, clamped) of a window sum over `valid` input elements.
  double exact(I sum, int64_t valid) const {
    return clamp_to<Q>(static_cast<double>(static_cast<int64_t>(sum) - x_zero_point * valid) * window_scale(valid) +
                       y_zero);
  }

  // One element, rounded; `marked` (0 or 1) when it lies in the band the caller must settle.
  template <class Flag>
  Q element(I sum, I zero_sum, Scale scale, Flag& marked) const {
    if constexpr (kFloat) {
      constexpr float qmin = static_cast<float>(std::numeric_limits<Q>::min());
      constexpr float qmax = static_cast<float>(std::numeric_limits<Q>::max());
      constexpr float magic = 12582912.0f;  // 1.5 * 2^23: (v + magic) - magic rounds half to even, |v| < 2^22
      float v = static_cast<float>(static_cast<int32_t>(sum) - static_cast<int32_t>(zero_sum)) * scale +
                static_cast<float>(y_zero);
      v = qmin > v ? qmin : v;
      v = qmax < v ? qmax : v;
      const float rounded = (v + magic) - magic;
      marked = std::fabs(v - rounded) > 0.5f - 2e-4f;
      return static_cast<Q>(static_cast<int32_t>(rounded));
    } else {
      const double v = clamp_to<Q>(static_cast<double>(sum - zero_sum) * scale + y_zero);
      marked = near_tie(v);
      return to_quantized<Q>(v);
    }
  }

  // n positions of `channels` interleaved values each; marks (one byte per value, 0 or 1) the values the caller
  // must settle, and returns whether there are any. Runs in chunks: while chunks carry no marks, the vectorised
  // loop keeps only a flag in int32 lanes (storing byte marks costs it a third of its time) and a flagged chunk
  // gets its marks from a second loop; after a flagged chunk (equal scales put marks in most of them) the next
  // chunk stores its marks directly.
  bool run(const I* sums, const I* zero_sum, const Scale* scale, int64_t n, int64_t channels, Q* y,
           uint8_t* mark) const {
    bool any = false, last_flagged = false;
    // elements [begin, end) of a stretch sharing zero_sum_of / scale_of (per element, or one position's)
    auto chunk = [&](const I* s, auto&& zero_sum_of, auto&& scale_of, Q* out, uint8_t* m, int64_t begin, int64_t end) {
      if (last_flagged) {
        uint8_t flags = 0;
        for (int64_t i = begin; i < end; ++i) {
          out[i] = element(s[i], zero_sum_of(i), scale_of(i), m[i]);
          flags |= m[i];
        }
        last_flagged = flags != 0;
      } else {
        int32_t flags = 0;
        for (int64_t i = begin; i < end; ++i) {
          int32_t f;
          out[i] = element(s[i], zero_sum_of(i), scale_of(i), f);
          flags |= f;
        }
        last_flagged = flags != 0;
        if (last_flagged) {
          for (int64_t i = begin; i < end; ++i) element(s[i], zero_sum_of(i), scale_of(i), m[i]);
        } else {
          std::memset(m + begin, 0, static_cast<size_t>(end - begin));
        }
      }
      any |= last_flagged;
    };
    constexpr int64_t kChunk = 64;
    if (channels == 1) {
      auto zs = [&](int64_t i) { return zero_sum[i]; };
      auto sc = [&](int64_t i) { return scale[i]; };
      for (int64_t begin = 0; begin < n; begin += kChunk)
        chunk(sums, zs, sc, y, mark, begin, min_of(n, begin + kChunk));
      return any;
    }
    for (int64_t i = 0; i < n; ++i) {
      const I zs = zero_sum[i];
      const Scale sc = scale[i];
      const int64_t at = i * channels;
      for (int64_t begin = 0; begin < channels; begin += kChunk) {
        chunk(
            sums + at, [&](int64_t) { return zs; }, [&](int64_t) { return sc; }, y + at, mark + at, begin,
            min_of(channels, begin + kChunk));
      }
    }
    return any;
  }

  // Settles the marked elements the exact value decides (writes y, clears the mark) and returns how many stay
  // marked: those within the tie band, left for ORT's float evaluation. n positions of `channels` values;
  // valid_of(i): elements in position i's windows. Position by position, so no division per element.
  template <class Valid>
  int64_t settle(const I* sums, int64_t n, int64_t channels, uint8_t* mark, Q* y, Valid&& valid_of) const {
    int64_t ties = 0;
    auto one = [&](int64_t e, int64_t valid) {
      const double v = exact(sums[e], valid);
      if (near_tie(v)) {
        ++ties;
      } else {
        y[e] = to_quantized<Q>(v);
        mark[e] = 0;
      }
    };
    if (channels == 1) {
      for_each_marked(mark, n, [&](int64_t i) { one(i, valid_of(i)); });
      return ties;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = i * channels;
      if (!any_marked(mark + at, channels)) continue;
      const int64_t valid = valid_of(i);
      for_each_marked(mark + at, channels, [&](int64_t c) { one(at + c, valid); });
    }
    return ties;
  }
};

// Offsets of several arrays in one scratch block, each aligned to 8 bytes whatever the arrays before it hold.
struct ScratchLayout {
  size_t bytes = 0;
  template <class T>
  size_t add(int64_t n) {
    const size_t at = bytes;
    bytes += (sizeof(T) * static_cast<size_t>(n) + 7) & ~size_t{7};
    return at;
  }
  template <class T>
  static T* at(ScratchBuffer& memory, size_t offset) {
    return reinterpret_cast<T*>(memory.as<char>() + offset);
  }
};

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
  using Scale = typename Requantiser<Q, I>::Scale;
  ScratchLayout layout;
  const size_t tags_at = layout.add<int64_t>(stream_tags(rc)), scale_at = layout.add<Scale>(strip),
               acc_at = layout.add<float>(max_of(channels, strip)), sums_at = layout.add<I>(sums_scratch),
               zero_sum_at = layout.add<I>(strip), mark_at = layout.add<uint8_t>(strip * channels);
  ScratchBuffer memory(layout.bytes);
  int64_t* tags = layout.at<int64_t>(memory, tags_at);
  Scale* scale = layout.at<Scale>(memory, scale_at);
  float* acc = layout.at<float>(memory, acc_at);
  I* sums_memory = layout.at<I>(memory, sums_at);
  I* zero_sum = layout.at<I>(memory, zero_sum_at);
  uint8_t* mark = layout.at<uint8_t>(memory, mark_at);
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
      if (requantiser.run(sums, zero_sum, scale, n, channels, out, mark) &&
          requantiser.settle(sums, n, channels, mark, out,
                             [&](int64_t j) { return rows_valid * rc.cols.valid_count(begin + j); }) > 0) {
        ort_tie_outputs_2d(xu, rc, channels, oh, begin, n, q, g.kernel_size, mark, out, acc);
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

// Output values qlinear_pool requantises per pass: many times the vector loop's step, while the sums, scales and
// marks of one pass (about 15 bytes per value) stay in L1.
constexpr int64_t kRequantiseBlock = 4096;

// I: integer type of the window sums (see Requantiser for the arithmetic of each).
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
  const int64_t step_units = direct ? max_of<int64_t>(1, min_of<int64_t>(units, kRequantiseBlock / g.out_size)) : 1;
  const int64_t direct_sums = direct ? step_units * g.out_size + (last.in + 1) + (g.axes[0].in + 1) * out_last : 0;
  const int64_t step_rows = step_units * rows;
  // Output rows whose windows have the same element counts (all but the edge rows) are requantised as one flat
  // block of up to ~kRequantiseBlock values: one row alone is often shorter than the vectorised loop's step.
  // (The direct path's whole step is one such block, its pattern built once below.)
  const int64_t block_rows =
      direct ? step_rows : max_of<int64_t>(1, min_of<int64_t>(step_rows, kRequantiseBlock / row_size));
  const int64_t block_positions = block_rows * out_last;
  using Scale = typename Requantiser<Q, I>::Scale;
  ScratchLayout layout;
  const size_t index_at = layout.add<int64_t>(static_cast<int64_t>(kVisitScratch * rank)),
               lead_at = layout.add<int64_t>(rows), scales_at = layout.add<Scale>(block_positions + out_last),
               acc_at = layout.add<float>(max_of(channels, out_last)), plane_at = layout.add<I>(widened),
               step_sums_at = layout.add<I>(direct_sums), buf_a_at = layout.add<I>(scratch),
               buf_b_at = layout.add<I>(scratch), zero_sums_at = layout.add<I>(block_positions + out_last),
               mark_at = layout.add<uint8_t>(block_rows * row_size);
  ScratchBuffer memory(layout.bytes);
  int64_t* index = layout.at<int64_t>(memory, index_at);
  int64_t* row_lead_valid = layout.at<int64_t>(memory, lead_at);  // per output row of a unit: in-bounds count
                                                                  // over the leading axes
  Scale* scales = layout.at<Scale>(memory, scales_at);
  float* acc = layout.at<float>(memory, acc_at);
  I* plane = layout.at<I>(memory, plane_at);
  I* step_sums = layout.at<I>(memory, step_sums_at);
  I* buf_a = layout.at<I>(memory, buf_a_at);
  I* buf_b = layout.at<I>(memory, buf_b_at);
  I* zero_sums = layout.at<I>(memory, zero_sums_at);
  uint8_t* mark = layout.at<uint8_t>(memory, mark_at);  // marks of a block (see Requantiser::run)
  // Per output position of a block: x_zero_point * elements in the window, and x_scale / (y_scale * count). Two
  // of them, so the interior rows' block is built once per call and the edge rows, one at a time, use the other.
  struct Pattern {
    I* zero_sum;
    Scale* scale;
    int64_t lead_valid = -1;  // the leading axes' in-bounds count it was made for
    int64_t rows = 0;         // rows filled
  } bulk, edge;
  bulk.zero_sum = zero_sums;
  edge.zero_sum = bulk.zero_sum + block_positions;
  bulk.scale = scales;
  edge.scale = bulk.scale + block_positions;
  for (int64_t r = 0; r < rows; ++r) row_lead_valid[r] = lead_valid_count(g, r);
  const Requantiser<Q, I> requantiser(q, g.kernel_size);
  const RowsAndColumns rc = rank <= 2 ? rows_and_columns(g) : RowsAndColumns{};
  auto fill_row = [&](I* zero_sum, Scale* scale, int64_t lead_valid) {
    for (int64_t j = 0; j < out_last; ++j) requantiser.pattern(lead_valid * last.valid_count(j), zero_sum[j], scale[j]);
  };
  if (direct) {  // small planes: the pattern of one plane, edge rows included, repeated for a whole step
    for (int64_t r = 0; r < rows; ++r)
      fill_row(bulk.zero_sum + r * out_last, bulk.scale + r * out_last, row_lead_valid[r]);
    for (int64_t k = 1; k < step_units; ++k) {
      std::memcpy(bulk.zero_sum + k * g.out_size, bulk.zero_sum, sizeof(I) * static_cast<size_t>(g.out_size));
      std::memcpy(bulk.scale + k * g.out_size, bulk.scale, sizeof(Scale) * static_cast<size_t>(g.out_size));
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
      std::memcpy(p.scale + p.rows * out_last, p.scale, sizeof(Scale) * static_cast<size_t>(out_last));
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
    auto requantise = [&](int64_t row, int64_t n_rows, const I* zero_sum, const Scale* scale) {
      const int64_t positions = n_rows * out_last;
      const I* s = sums + row * row_size;
      Q* yb = yu + row * row_size;
      if (!requantiser.run(s, zero_sum, scale, positions, channels, yb, mark)) return;
      auto valid_of = [&](int64_t i) {
        return row_lead_valid[(row + i / out_last) % rows] * last.valid_count(i % out_last);
      };
      if (requantiser.settle(s, positions, channels, mark, yb, valid_of) == 0) return;
      for (int64_t i = 0; i < n_rows; ++i) {  // the rows holding elements on a tie
        const int64_t r = row + i;            // the step's row: its unit, and the unit's row
        const Q* x_unit = xu + (r / rows) * g.in_size * channels;
        uint8_t* mr = mark + i * row_size;
        Q* yr = yb + i * row_size;
        if (rank <= 2) {
          if (any_marked(mr, row_size)) {
            ort_tie_outputs_2d(x_unit, rc, channels, r % rows, 0, out_last, q, g.kernel_size, mr, yr, acc);
          }
          continue;
        }
        for_each_marked(mr, row_size, [&](int64_t e) {
          const int64_t out_index = (r % rows) * out_last + e / channels;
          const double value = ort_float_value(x_unit, g, channels, e % channels, out_index, q, index);
          yr[e] = to_quantized<Q>(clamp_to<Q>(value));
        });
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
  if (g.kernel_size <= kShortSumKernel) {
    run(int16_t{});
  } else if (g.kernel_size <= (1 << 23)) {
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
