// QLinearAveragePool whose one window holds every element of its unit (a quantized CNN's head: 7x7 over 7x7, NCHW
// planes or NHWC images, any rank): each unit's sums in one pass over its bytes, requantised with one pattern.
// A per-ISA kernel header (kernels/common/per_isa.h): compiled once per instruction set with that set's flags.
#pragma once

#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "kernels/common/byte_lanes.h"
#include "kernels/common/per_isa.h"
#include "kernels/common/scratch.h"
#include "kernels/common/simd.h"
#include "kernels/common/window_geometry.h"
#include "kernels/common/windows.h"
#include "kernels/kernels.h"
#include "kernels/qlinear/requantise.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

// Whether the pool's only window holds every element of its unit (pads around it or not).
inline bool whole_unit_window(const PoolGeometry& g) {
  if (g.out_size != 1) return false;
  for (const AxisGeometry& a : g.axes)
    if (a.dilation != 1 || a.valid_count(0) != a.in) return false;
  return true;
}

// Lanes of channel_sums' int16 scratch for `channels` channels: rows of whole positions, a multiple of the 32
// lanes add_rows_into takes at once where that row stays short, else at least 64 values.
inline int64_t channel_lanes(int64_t channels) {
  const int64_t common = std::lcm(channels, int64_t{32});
  return common <= 512 ? common : channels * max_of<int64_t>(1, (64 + channels - 1) / channels);
}

// Vectors of int16 lanes and kLanes bytes loaded into one, widened: ByteLanes' Shorts, or on AVX-512, whose
// Shorts keep AVX2's width, its WideShorts (a whole register of 32).
template <class Q>
struct ShortLanes {
#if defined(__AVX512BW__)
  static constexpr int kLanes = ByteLanes<Q>::kWideShorts;
  using Shorts = typename ByteLanes<Q>::WideShorts;
  static Shorts widened(const Q* p) { return ByteLanes<Q>::widened_wide_shorts(p); }
#else
  static constexpr int kLanes = 2 * ByteLanes<Q>::kLength;
  using Shorts = typename ByteLanes<Q>::Shorts;
  static Shorts widened(const Q* p) { return ByteLanes<Q>::widened_shorts(p); }
#endif
};

// Rows add_rows_into adds per pass over a row's columns: enough to amortise loading and storing the lanes, few
// enough that their lines (a row apart, maybe a multiple of 4 KiB) share L1's sets without evicting each other.
constexpr int64_t kRowsPerPass = 8;

// rows x width values (row r at x + r x width) added into lanes[0, width) as int16 (the caller keeps the sums
// within int16): per pass of kRowsPerPass rows, each block of columns held in registers down the rows, its lanes
// loaded and stored once (lanes loaded and stored per row would chain each row's adds through a store and a load).
template <class Q>
void add_rows_into(const Q* x, int64_t rows, int64_t width, int16_t* lanes) {
  using L = ShortLanes<Q>;
  using Shorts = typename L::Shorts;
  constexpr int64_t kLanes = L::kLanes;
  for (int64_t first = 0; first < rows; first += kRowsPerPass) {
    const Q* xp = x + first * width;
    const int64_t n = min_of(kRowsPerPass, rows - first);
    int64_t j = 0;
    auto load = [&](int64_t at) {
      Shorts v;
      std::memcpy(&v, lanes + at, sizeof v);
      return v;
    };
    auto store = [&](int64_t at, Shorts v) { std::memcpy(lanes + at, &v, sizeof v); };
    for (; j + 4 * kLanes <= width; j += 4 * kLanes) {
      // four named accumulators: an array of them GCC keeps on the stack in the AVX2 build, a store and a reload
      // per row
      Shorts a0 = load(j), a1 = load(j + kLanes), a2 = load(j + 2 * kLanes), a3 = load(j + 3 * kLanes);
      for (int64_t r = 0; r < n; ++r) {
        const Q* p = xp + r * width + j;
        a0 += L::widened(p);
        a1 += L::widened(p + kLanes);
        a2 += L::widened(p + 2 * kLanes);
        a3 += L::widened(p + 3 * kLanes);
      }
      store(j, a0), store(j + kLanes, a1), store(j + 2 * kLanes, a2), store(j + 3 * kLanes, a3);
    }
    for (; j + kLanes <= width; j += kLanes) {
      Shorts a = load(j);
      for (int64_t r = 0; r < n; ++r) a += L::widened(xp + r * width + j);
      store(j, a);
    }
    for (; j < width; ++j) {
      int16_t sum = lanes[j];
      for (int64_t r = 0; r < n; ++r) sum = static_cast<int16_t>(sum + xp[r * width + j]);
      lanes[j] = sum;
    }
  }
}

// The per-channel sums of `positions` positions of `channels` interleaved values: rows of whole positions
// (channel_lanes values) added into int16 lanes for up to kShortSumKernel rows at a time (128 x 255 fits int16),
// then folded into the channel sums. lanes: scratch of channel_lanes(channels) values.
template <class Q, class I>
void channel_sums(const Q* x, int64_t positions, int64_t channels, int16_t* lanes, I* sums) {
  const int64_t width = channel_lanes(channels), per_row = width / channels, rows = positions / per_row;
  fill(sums, channels, I(0));
  auto fold = [&](int64_t row_positions) {
    for (int64_t r = 0; r < row_positions; ++r)
      for (int64_t c = 0; c < channels; ++c) sums[c] = static_cast<I>(sums[c] + lanes[r * channels + c]);
  };
  for (int64_t r = 0; r < rows; r += kShortSumKernel) {
    fill(lanes, width, int16_t{0});
    add_rows_into(x + r * width, min_of(kShortSumKernel, rows - r), width, lanes);
    fold(per_row);
  }
  const int64_t rest = positions - rows * per_row;  // fewer than a row's positions
  if (rest == 0) return;
  fill(lanes, channels, int16_t{0});
  add_rows_into(x + rows * width, rest, channels, lanes);
  fold(1);
}

// Whether ORT takes its global-average path for this pool (a kernel the unit's shape and no pads): MLAS's integer
// sums, requantised by ort_global_output's rule rather than ort_output's.
inline bool ort_global_average(const PoolGeometry& g) {
  for (const AxisGeometry& a : g.axes)
    if (a.kernel != a.in || a.pad_begin != 0 || a.pad_end != 0) return false;
  return true;
}

// ORT's output on its global-average path (MLAS, x86 and ARM alike): the integer sum less the zero points, times
// x_scale / (y_scale x count) in float, rounded (half to even) before y_zero_point is added (an odd zero point
// moves a tie to the other even neighbour), and clamped (before or after the rounding alike: the bounds are whole).
template <class Q>
int32_t ort_global_output(int64_t sum, int64_t positions, const QLinearParams& q) {
  const int32_t difference = static_cast<int32_t>(sum - int64_t{q.x_zero_point} * positions);
  const float scale = q.x_scale / (q.y_scale * static_cast<float>(positions));
  const double value = static_cast<double>(static_cast<float>(difference) * scale);
  return static_cast<int32_t>(clamp_to<Q>(round_half_even(value) + q.y_zero_point));
}

// Pools whose one window holds each whole unit (whole_unit_window): the sums of a step of units (NCHW: a plane's
// bytes at once, ByteLanes::sum; NHWC: channel_sums), then the step's values requantised as one stretch sharing
// the pattern of a window of the whole unit. Built once per call.
template <class Q, class I>
class QLinearWholeWindow {
 public:
  using Scale = typename Requantiser<Q, I>::Scale;

  QLinearWholeWindow(const PoolGeometry& g, const QLinearParams& q, int64_t channels)
      : g_(g),
        q_(q),
        channels_(channels),
        requantiser_(q, g.kernel_size),
        ort_global_(ort_global_average(g)),
        step_units_(max_of<int64_t>(1, kRequantiseBlock / channels)),
        memory_(layout(nullptr)) {
    layout(memory_.as<char>());
    requantiser_.pattern(g.in_size, zero_sum_, scale_);
  }

  void run(const Q* x, Q* y, int64_t units) {
    const int64_t unit_values = g_.in_size * channels_;
    for (int64_t u = 0; u < units; u += step_units_) {
      const int64_t n_units = min_of(step_units_, units - u), values = n_units * channels_;
      const Q* xu = x + u * unit_values;
      Q* yu = y + u * channels_;
      for (int64_t k = 0; k < n_units; ++k) {
        if (channels_ == 1) {
          sums_[k] = static_cast<I>(ByteLanes<Q>::sum(xu + k * unit_values, g_.in_size));
        } else {
          channel_sums(xu + k * unit_values, g_.in_size, channels_, lanes_, sums_ + k * channels_);
        }
      }
      // one position of `values` channels: every value shares the pattern
      if (!requantiser_.run(sums_, &zero_sum_, &scale_, 1, values, yu, mark_)) continue;
      settle_marked(
          requantiser_, sums_, 1, values, mark_, yu, [&](int64_t) { return g_.in_size; },
          [&](int64_t, int64_t e) {
            if (ort_global_) return ort_global_output<Q>(static_cast<int64_t>(sums_[e]), g_.in_size, q_);
            return ort_output(xu + (e / channels_) * unit_values, g_, channels_, e % channels_, 0, q_, index_);
          });
    }
  }

 private:
  // Points the arrays into the scratch at base (nullptr: nowhere). Returns the bytes they take.
  size_t layout(char* base) {
    Carve c{base};
    index_ = c.take<int64_t>(static_cast<int64_t>(kVisitScratch * g_.axes.size()));
    sums_ = c.take<I>(step_units_ * channels_);
    lanes_ = c.take<int16_t>(channels_ == 1 ? 0 : channel_lanes(channels_));
    mark_ = c.take<uint8_t>(step_units_ * channels_);
    return c.bytes;
  }

  const PoolGeometry& g_;
  const QLinearParams& q_;
  const int64_t channels_;
  const Requantiser<Q, I> requantiser_;
  const bool ort_global_;     // ORT's output by ort_global_output (ort_global_average)
  const int64_t step_units_;  // units whose sums are requantised per pass
  ScratchBuffer memory_;
  int64_t* index_ = nullptr;  // visit_window's scratch (ort_output)
  I* sums_ = nullptr;         // the sums of a step: [unit][channel]
  int16_t* lanes_ = nullptr;  // channel_sums' scratch
  uint8_t* mark_ = nullptr;   // marks of a step (see Requantiser::run)
  I zero_sum_{};
  Scale scale_{};
};

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
