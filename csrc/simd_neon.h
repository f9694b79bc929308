// NEON intrinsics for the loops GCC's vector extensions leave slow on aarch64: float16 <-> float conversion and
// QLinearAveragePool's requantisation. The `neon` kernel set only (kernels_neon.cc defines
// ONNX_POOLS_NEON_INTRINSICS and includes <arm_neon.h>); the `portable` set keeps the generic loops, so comparing
// the two (scripts/isa_digests.py) checks these bit for bit. Included by simd.h inside
// namespace onnx_pools::neon::{anon}. Each function does the whole groups of 8 and returns how many elements it
// did; the caller's generic loop does the rest. Assumes the Linux default FPCR: round to nearest even, no flush to
// zero, IEEE half precision (AHP = 0).
#pragma once

// float16 -> float with the conversion instruction (FCVTL): armv8.0 has FP16 conversion, though not FP16
// arithmetic. Exact for every value, as halves_to_floats; a signalling NaN comes out quiet (as with x86's F16C),
// which no output can tell apart: every path quiets NaN when it converts back.
inline int64_t neon_halves_to_floats(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
    vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
    vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
  }
  return i;
}

// float -> float16 (FCVTN): round to nearest even, overflow to inf, subnormal halves, NaN quiet with the top of
// its payload: the same bits as floats_to_halves / to_float16.
inline int64_t neon_floats_to_halves(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x4_t low = vcvt_f16_f32(vld1q_f32(src + i));
    vst1q_u16(dst + i, vreinterpretq_u16_f16(vcvt_high_f16_f32(low, vld1q_f32(src + i + 4))));
  }
  return i;
}

// QLinearAveragePool's requantisation (Requantiser::run) of n int32 window sums, 8 at a time:
//   v = clamp(double(sums[i] - zero_sum[i]) * scale[i] + y_zero) to Q's range, y[i] = round_half_even(v),
//   tie[i] = |v - round_half_even(v)| > 0.5 - 1e-4, ties += tie[i].
// The same operations in the same order (multiply, then add: no fused multiply-add), two doubles per instruction.
// Where it differs from the generic code the outputs cannot tell: FMAX/FMIN make a clamped -0 +0, and FRINTN
// keeps the sign of a zero that (v + 1.5 * 2^52) - 1.5 * 2^52 makes +0; both give the same y and tie. A NaN stays
// NaN through both and converts to 0 as the generic code's FCVTZS does. kBroadcast: one zero_sum and scale for all
// n (the channels of an NHWC position), else one per value.
template <class Q, bool kBroadcast>
int64_t neon_requantise(const int32_t* sums, const int32_t* zero_sum, const double* scale, double y_zero, int64_t n,
                        Q* y, uint8_t* tie, int64_t& ties) {
  const float64x2_t qmin = vdupq_n_f64(static_cast<double>(std::numeric_limits<Q>::min()));
  const float64x2_t qmax = vdupq_n_f64(static_cast<double>(std::numeric_limits<Q>::max()));
  const float64x2_t zero_point = vdupq_n_f64(y_zero);
  const float64x2_t noise = vdupq_n_f64(0.5 - 1e-4);  // near_tie's bound
  const int32x4_t common_zero = vdupq_n_s32(kBroadcast ? zero_sum[0] : 0);
  const float64x2_t common_scale = vdupq_n_f64(kBroadcast ? scale[0] : 0.0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    int32x4_t centred[2];
    for (int h = 0; h < 2; ++h) {
      const int32x4_t z = kBroadcast ? common_zero : vld1q_s32(zero_sum + i + 4 * h);
      centred[h] = vsubq_s32(vld1q_s32(sums + i + 4 * h), z);
    }
    int64x2_t quantised[4];
    uint64x2_t near[4];
    for (int k = 0; k < 4; ++k) {
      const int32x4_t c = centred[k / 2];
      const int64x2_t wide = k % 2 == 0 ? vmovl_s32(vget_low_s32(c)) : vmovl_high_s32(c);
      const float64x2_t s = kBroadcast ? common_scale : vld1q_f64(scale + i + 2 * k);
      float64x2_t v = vaddq_f64(vmulq_f64(vcvtq_f64_s64(wide), s), zero_point);
      v = vminq_f64(vmaxq_f64(v, qmin), qmax);
      const float64x2_t rounded = vrndnq_f64(v);
      near[k] = vcgtq_f64(vabdq_f64(v, rounded), noise);
      quantised[k] = vcvtq_s64_f64(rounded);
    }
    const int16x8_t q16 = vcombine_s16(vmovn_s32(vcombine_s32(vmovn_s64(quantised[0]), vmovn_s64(quantised[1]))),
                                       vmovn_s32(vcombine_s32(vmovn_s64(quantised[2]), vmovn_s64(quantised[3]))));
    vst1_u8(reinterpret_cast<uint8_t*>(y + i), vreinterpret_u8_s8(vmovn_s16(q16)));
    const uint16x8_t n16 = vcombine_u16(vmovn_u32(vcombine_u32(vmovn_u64(near[0]), vmovn_u64(near[1]))),
                                        vmovn_u32(vcombine_u32(vmovn_u64(near[2]), vmovn_u64(near[3]))));
    const uint8x8_t marks = vand_u8(vmovn_u16(n16), vdup_n_u8(1));
    vst1_u8(tie + i, marks);
    ties += vaddv_u8(marks);
  }
  return i;
}
