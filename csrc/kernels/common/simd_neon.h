// NEON intrinsics for the loops GCC's vector extensions leave slow on aarch64: float16 <-> float conversion. The `neon`
// kernel set only (kernels/isa/neon.cc defines ONNX_POOLS_NEON_INTRINSICS, and simd.h includes this); the `portable`
// set keeps the generic loops, so comparing the two (scripts/isa_digests.py) checks these bit for bit. A per-ISA
// kernel header (kernels/common/per_isa.h). Each function does the whole groups of 8 and returns how many elements it
// did; the caller's generic loop does the rest. Assumes the Linux default FPCR: round to nearest even, no flush to
// zero, IEEE half precision (AHP = 0).
#pragma once
#include <arm_neon.h>

#include <cstdint>

#include "kernels/common/per_isa.h"

namespace onnx_pools {
namespace ONNX_POOLS_ISA {
namespace {

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

}  // namespace
}  // namespace ONNX_POOLS_ISA
}  // namespace onnx_pools
