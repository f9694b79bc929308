// QLinearAveragePool: window sums by the path the geometry suits, requantised by the rule of requantise.h.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>

#include "kernels/common/diagnostics.h"
#include "kernels/common/per_isa.h"
#include "kernels/common/scratch.h"
#include "kernels/common/simd.h"
#include "kernels/common/window_geometry.h"
#include "kernels/common/windows.h"
#include "kernels/kernels.h"
#include "kernels/qlinear/requantise.h"
#include "kernels/qlinear/rows3x3.h"
#include "kernels/qlinear/whole_window.h"
#include "kernels/qlinear/windows.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// Per output position of a block of output rows: Requantiser::pattern's zero_sum and scale, rebuilt only when
// the block's kind (`key`: its rows' element counts) changes.
template <class Q, class I>
struct RequantisePattern {
  using Scale = typename Requantiser<Q, I>::Scale;
  I* zero_sum = nullptr;
  Scale* scale = nullptr;
  int64_t key = -1, rows = 0;  // what the rows were made for (caller-defined; -1: nothing yet), rows filled

  // Row `at` for the output columns [first, first + n), windows of lead_valid elements over the axes but the last.
  void fill_row(const Requantiser<Q, I>& r, const AxisGeometry& last, int64_t lead_valid, int64_t first, int64_t n,
                int64_t at = 0) {
    for (int64_t j = 0; j < n; ++j)
      r.pattern(lead_valid * last.valid_count(first + j), zero_sum[at * n + j], scale[at * n + j]);
  }
  // n_rows rows of n columns from `first`, each with lead_valid; row 0 rebuilt only when `key` changes.
  void ensure(const Requantiser<Q, I>& r, const AxisGeometry& last, int64_t key_of_rows, int64_t lead_valid,
              int64_t first, int64_t n, int64_t n_rows) {
    if (key != key_of_rows) {
      fill_row(r, last, lead_valid, first, n);
      key = key_of_rows, rows = 1;
    }
    for (; rows < n_rows; ++rows) {
      std::memcpy(zero_sum + rows * n, zero_sum, sizeof(I) * static_cast<size_t>(n));
      std::memcpy(scale + rows * n, scale, sizeof(Scale) * static_cast<size_t>(n));
    }
  }
};

// 1-D and 2-D pools (NCHW planes, channels == 1, or NHWC images): window sums streamed an output row at a time
// (scratch: a ring of kernel rows of one strip, not a plane), requantised row by row. Built once per call.
template <class Q, class I>
class QLinearStreamPlan {
 public:
  using Scale = typename Requantiser<Q, I>::Scale;

  QLinearStreamPlan(const PoolGeometry& g, const QLinearParams& q, int64_t channels)
      : g_(g),
        q_(q),
        channels_(channels),
        rc_(rows_and_columns(g)),
        requantiser_(q, g.kernel_size),
        strip_(strip_columns(rc_.cols, channels)),
        row_length_(rc_.cols.in * channels),
        memory_(layout(nullptr)) {
    layout(memory_.as<char>());
  }

  void run(const Q* x, Q* y, int64_t units) {
    for (int64_t u = 0; u < units; ++u) unit(x + u * g_.in_size * channels_, y + u * g_.out_size * channels_);
  }

 private:
  // Points the arrays into the scratch at base (nullptr: nowhere). Returns the bytes they take.
  size_t layout(char* base) {
    Carve c{base};
    tags_ = c.take<int64_t>(stream_tags(rc_));
    pattern_.scale = c.take<Scale>(strip_);
    sums_ = c.take<I>(stream_scratch(rc_, channels_));
    pattern_.zero_sum = c.take<I>(strip_);
    mark_ = c.take<uint8_t>(strip_ * channels_);
    return c.bytes;
  }

  void unit(const Q* xu, Q* yu) {
    pattern_.key = -1;
    auto load = [&](int64_t row, int64_t first, int64_t n, I* dst) {
      const Q* src = xu + row * row_length_ + first * channels_;
      for (int64_t i = 0; i < n * channels_; ++i) dst[i] = static_cast<I>(src[i]);
    };
    auto finish = [&](int64_t oh, int64_t begin, int64_t n, const I* sums) {
      const int64_t rows_valid = rc_.rows.valid_count(oh);
      // the pattern of one row of the strip: the key tells the row count and the strip apart
      pattern_.ensure(requantiser_, rc_.cols, rows_valid * (rc_.cols.out + 1) + begin, rows_valid, begin, n, 1);
      Q* out = yu + (oh * rc_.cols.out + begin) * channels_;
      auto valid_of = [&](int64_t j) { return rows_valid * rc_.cols.valid_count(begin + j); };
      if (requantiser_.run(sums, pattern_.zero_sum, pattern_.scale, n, channels_, out, mark_)) {
        settle_marked(requantiser_, sums, n, channels_, mark_, out, valid_of, [&](int64_t j, int64_t c) {
          return ort_output_2d(xu, rc_, channels_, c, oh, begin + j, q_, g_.kernel_size);
        });
      }
      return true;
    };
    stream_window_sums(rc_, channels_, sums_, tags_, load, finish);
  }

  const PoolGeometry& g_;
  const QLinearParams& q_;
  const int64_t channels_;
  const RowsAndColumns rc_;
  const Requantiser<Q, I> requantiser_;
  const int64_t strip_;       // output columns whose sums are built at a time
  const int64_t row_length_;  // values of one input row
  ScratchBuffer memory_;
  int64_t* tags_ = nullptr;  // stream_window_sums' ring tags
  I* sums_ = nullptr;        // stream_window_sums' scratch
  uint8_t* mark_ = nullptr;  // marks of a row (see Requantiser::run)
  RequantisePattern<Q, I> pattern_;
};

// Whether QLinearPlan takes the summed-area path: NCHW 2-D planes with short output rows and no dilation.
inline bool summed_area_planes(const PoolGeometry& g, int64_t channels) {
  return channels == 1 && g.axes.size() == 2 && g.axes[1].out < kDirectColumns && g.axes[0].dilation == 1 &&
         g.axes[1].dilation == 1;
}

// a[block, total) = a[0, block) repeated: copies of a doubling prefix, so a short block (one plane's few outputs)
// takes a few copies, not one per repeat.
template <class T>
void repeat_prefix(T* a, int64_t block, int64_t total) {
  for (int64_t done = block; done < total;) {
    const int64_t n = min_of(done, total - done);
    std::memcpy(a + done, a, sizeof(T) * static_cast<size_t>(n));
    done += n;
  }
}

// Whole-unit pools (any rank; NCHW planes that fit in cache, NHWC images of rank 3): window sums of a step of
// units by the separable passes (or summed areas), then requantised in blocks of output rows. Built once per call.
template <class Q, class I>
class QLinearPlan {
 public:
  using Scale = typename Requantiser<Q, I>::Scale;

  QLinearPlan(const PoolGeometry& g, const QLinearParams& q, int64_t units, int64_t channels)
      : g_(g),
        q_(q),
        channels_(channels),
        rank_(g.axes.size()),
        last_(g.axes[rank_ - 1]),
        out_last_(last_.out),
        row_size_(out_last_ * channels),
        rows_(g.out_size / out_last_),
        // summed-area sums of several short-rowed planes per step: long stretches to requantise (2x2 over 7x7)
        direct_(summed_area_planes(g, channels)),
        flat_(channels == 1 && !direct_ && flat_plane_sums_apply(g)),
        step_units_(direct_ ? max_of<int64_t>(1, min_of<int64_t>(units, kRequantiseBlock / g.out_size)) : 1),
        // rows of the same element counts requantised as one block of up to ~kRequantiseBlock values (one row is
        // often shorter than the vector loop's step); the direct path's whole step is one block
        block_rows_(direct_ ? step_units_ * rows_
                            : max_of<int64_t>(1, min_of<int64_t>(step_units_ * rows_, kRequantiseBlock / row_size_))),
        requantiser_(q, g.kernel_size),
        rc_(rank_ <= 2 ? rows_and_columns(g) : RowsAndColumns{}),
        memory_(layout(nullptr)) {
    layout(memory_.as<char>());
    for (int64_t r = 0; r < rows_; ++r) row_lead_valid_[r] = lead_valid_count(g, r);
    if (direct_) {  // small planes: the pattern of one plane, edge rows included, repeated for a whole step
      for (int64_t r = 0; r < rows_; ++r) bulk_.fill_row(requantiser_, last_, row_lead_valid_[r], 0, out_last_, r);
      repeat_prefix(bulk_.zero_sum, g.out_size, step_units_ * g.out_size);
      repeat_prefix(bulk_.scale, g.out_size, step_units_ * g.out_size);
    }
  }

  void run(const Q* x, Q* y, int64_t units) {
    for (int64_t u = 0; u < units; u += step_units_) {
      const int64_t n_units = min_of(step_units_, units - u);
      const Q* xu = x + u * g_.in_size * channels_;
      Q* yu = y + u * g_.out_size * channels_;
      const I* sums = window_sums_of(xu, n_units);
      const int64_t unit_rows = n_units * rows_;  // the rows of consecutive units follow one another
      if (direct_) {
        requantise_rows(xu, yu, sums, 0, unit_rows, bulk_);
        continue;
      }
      for (int64_t row = 0; row < unit_rows;) {  // blocks of rows with the same in-bounds count
        const int64_t lead_valid = row_lead_valid_[row % rows_];
        int64_t n_rows = 1;
        while (n_rows < block_rows_ && row + n_rows < unit_rows &&
               row_lead_valid_[(row + n_rows) % rows_] == lead_valid)
          ++n_rows;
        // two patterns, so the interior rows' block is built once per call and the edge rows use the other
        RequantisePattern<Q, I>& pattern = n_rows > 1 ? bulk_ : edge_;
        pattern.ensure(requantiser_, last_, lead_valid, lead_valid, 0, out_last_, n_rows);
        requantise_rows(xu, yu, sums, row, n_rows, pattern);
        row += n_rows;
      }
    }
  }

 private:
  // Points the arrays into the scratch at base (nullptr: nowhere). Returns the bytes they take.
  size_t layout(char* base) {
    const int64_t block_positions = block_rows_ * out_last_ + out_last_;  // bulk_'s, then edge_'s one row
    const int64_t sums_scratch = g_.largest_intermediate * channels_;     // checked by the op
    Carve c{base};
    index_ = c.take<int64_t>(static_cast<int64_t>(kVisitScratch * rank_));
    row_lead_valid_ = c.take<int64_t>(rows_);
    bulk_.scale = c.take<Scale>(block_positions);
    plane_ = c.take<I>(channels_ == 1 && !direct_ && !flat_ ? g_.in_size : 0);
    step_sums_ = c.take<I>(direct_ ? step_units_ * g_.out_size + (last_.in + 1) + (g_.axes[0].in + 1) * out_last_ : 0);
    buf_a_ = c.take<I>(sums_scratch);
    buf_b_ = c.take<I>(sums_scratch);
    bulk_.zero_sum = c.take<I>(block_positions);
    mark_ = c.take<uint8_t>(block_rows_ * row_size_);
    if (base) {
      edge_.scale = bulk_.scale + block_rows_ * out_last_;
      edge_.zero_sum = bulk_.zero_sum + block_rows_ * out_last_;
    }
    return c.bytes;
  }

  // The window sums of n_units units from xu: [unit][output position][channel].
  const I* window_sums_of(const Q* xu, int64_t n_units) {
    if (direct_) {
      I* direct_scratch = step_sums_ + step_units_ * g_.out_size;
      for (int64_t k = 0; k < n_units; ++k) {
        direct_window_sums_2d(xu + k * g_.in_size, step_sums_ + k * g_.out_size, g_, direct_scratch);
      }
      return step_sums_;
    }
    if (channels_ == 1) {
      if (flat_) {
        flat_plane_sums(xu, buf_a_, buf_b_, g_);
        return buf_b_;
      }
      for (int64_t i = 0; i < g_.in_size; ++i) plane_[i] = static_cast<I>(xu[i]);
      return window_sums(static_cast<const I*>(plane_), buf_a_, buf_b_, g_, 1);
    }
    return window_sums(xu, buf_a_, buf_b_, g_, channels_);
  }

  // Requantises output rows [row, row + n_rows) of this step with `pattern`'s zero_sum and scale.
  void requantise_rows(const Q* xu, Q* yu, const I* sums, int64_t row, int64_t n_rows,
                       const RequantisePattern<Q, I>& pattern) {
    const I* s = sums + row * row_size_;
    Q* yb = yu + row * row_size_;
    auto valid_of = [&](int64_t i) {
      return row_lead_valid_[(row + i / out_last_) % rows_] * last_.valid_count(i % out_last_);
    };
    if (!requantiser_.run(s, pattern.zero_sum, pattern.scale, n_rows * out_last_, channels_, yb, mark_)) return;
    settle_marked(requantiser_, s, n_rows * out_last_, channels_, mark_, yb, valid_of, [&](int64_t i, int64_t c) {
      const int64_t r = row + i / out_last_;
      const Q* x_unit = xu + (r / rows_) * g_.in_size * channels_;
      if (rank_ <= 2) return ort_output_2d(x_unit, rc_, channels_, c, r % rows_, i % out_last_, q_, g_.kernel_size);
      return ort_output(x_unit, g_, channels_, c, (r % rows_) * out_last_ + i % out_last_, q_, index_);
    });
  }

  const PoolGeometry& g_;
  const QLinearParams& q_;
  const int64_t channels_;
  const size_t rank_;
  const AxisGeometry& last_;
  const int64_t out_last_;
  const int64_t row_size_;    // values of one output row
  const int64_t rows_;        // output rows of one unit
  const bool direct_;         // summed-area sums (summed_area_planes)
  const bool flat_;           // flat passes over each plane (flat_plane_sums)
  const int64_t step_units_;  // units whose sums are taken per step
  const int64_t block_rows_;  // output rows requantised per pass, at most
  const Requantiser<Q, I> requantiser_;
  const RowsAndColumns rc_;  // rank <= 2: for ort_output_2d
  ScratchBuffer memory_;
  int64_t* index_ = nullptr;               // visit_window's scratch
  int64_t* row_lead_valid_ = nullptr;      // per output row of a unit: in-bounds count over the leading axes
  I* plane_ = nullptr;                     // an NCHW plane widened to I
  I* step_sums_ = nullptr;                 // the direct path's sums of a step, then its scratch
  I *buf_a_ = nullptr, *buf_b_ = nullptr;  // the separable passes' two buffers
  uint8_t* mark_ = nullptr;                // marks of a block (see Requantiser::run)
  RequantisePattern<Q, I> bulk_, edge_;
};

// Elements of an NCHW plane up to which it is pooled whole (4 bytes of scratch per element: 256 KiB, in L2).
constexpr int64_t kWholePlaneLimit = 1 << 16;

// `units` NCHW planes (channels == 1) or NHWC images of `channels` interleaved values.
template <class Q>
void qlinear_pool(const void* x, void* y, int64_t units, int64_t channels, const PoolGeometry& g,
                  const QLinearParams& q) {
  if (Rows3x3Pool<Q>::applies(g, channels)) {  // 3x3 stride 1 pads 1: one pass per output row
    // kept per thread while the parameters and shape stay: ORT's pool calls the kernel per chunk of a few planes
    // (on the heap: a thread-local's own address, propagated into its methods, is looked up at each use)
    thread_local std::unique_ptr<Rows3x3Pool<Q>> pool;
    if (!pool || !pool->made_for(g, q, channels)) pool = std::make_unique<Rows3x3Pool<Q>>(g, q, channels);
    if (pool->preferred()) {
      count_qlinear_row_kernel_units(static_cast<uint64_t>(units));
      return pool->run(static_cast<const Q*>(x), static_cast<Q*>(y), units);
    }
  }
  // One window over each whole unit: its sums at once; otherwise NCHW planes that fit in cache take QLinearPlan's
  // whole-plane passes (longer loops than rows), small ones its summed-area path; larger planes and NHWC images
  // are streamed.
  const bool streamed =
      g.axes.size() <= 2 && !summed_area_planes(g, channels) && !(channels == 1 && g.in_size <= kWholePlaneLimit);
  auto run = [&](auto sum_type) {  // the integer type of the window sums
    using I = decltype(sum_type);
    if (whole_unit_window(g)) {
      QLinearWholeWindow<Q, I>(g, q, channels).run(static_cast<const Q*>(x), static_cast<Q*>(y), units);
    } else if (streamed) {
      QLinearStreamPlan<Q, I>(g, q, channels).run(static_cast<const Q*>(x), static_cast<Q*>(y), units);
    } else {
      QLinearPlan<Q, I>(g, q, units, channels).run(static_cast<const Q*>(x), static_cast<Q*>(y), units);
    }
  };
  if (g.kernel_size <= kShortSumKernel) run(int16_t{});
  else if (g.kernel_size <= (1 << 23))  // sums of up to 2^23 bytes fit int32
    run(int32_t{});
  else run(int64_t{});
}

template <class Q>
void qlinear_nchw(const void* x, void* y, int64_t planes, int64_t, const PoolGeometry& g, const QLinearParams& q) {
  qlinear_pool<Q>(x, y, planes, 1, g, q);
}

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
