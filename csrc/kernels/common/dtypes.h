// Element types: scalar conversions and the accumulator type of each float type (the types themselves are the rows
// of element_types.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/element_types.h"

namespace onnx_pools {

// Functions below have internal linkage on purpose: this header is compiled into the per-ISA kernel files
// with different instruction-set flags, and the linker must not merge an AVX-512 copy into portable code.
namespace {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float to_float(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Round to nearest even, overflow to infinity, NaN stays NaN.
inline Float16 to_float16(float f) {
  uint32_t u = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) {
    const uint16_t nan_payload = u > 0x7f800000u ? static_cast<uint16_t>(0x200u | ((u >> 13) & 0x3ffu)) : 0;
    return {static_cast<uint16_t>(sign | 0x7c00u | nan_payload)};
  }
  if (u >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520 rounds to inf
  if (u < 0x38800000u) {  // below the smallest normal half: a multiple of 2^-24
    const float scaled = bits_to_float(u) * 16777216.0f;
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)))};
  }
  const uint32_t rounded = u + 0xfffu + ((u >> 13) & 1u);
  return {static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13))};
}

inline float to_float(BFloat16 b) { return bits_to_float(static_cast<uint32_t>(b.bits) << 16); }

inline BFloat16 to_bfloat16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  return {static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

}  // namespace

// Accumulator per float type (the table's accumulator column): float for float and the 16-bit floats, double for
// double.
template <class T>
struct ElementTraits;
#define ONNX_POOLS_ELEMENT_TRAITS(e, T, A, onnx, name) \
  template <>                                          \
  struct ElementTraits<T> {                            \
    using Acc = A;                                     \
  };
ONNX_POOLS_FLOAT_TYPES(ONNX_POOLS_ELEMENT_TRAITS)
#undef ONNX_POOLS_ELEMENT_TRAITS

template <class T>
using AccOf = typename ElementTraits<T>::Acc;

namespace {

// Conversions between an element and its accumulator.
template <class A>
inline A to_acc(float v) {
  return v;
}
template <class A>
inline A to_acc(double v) {
  return static_cast<A>(v);
}
template <class A>
inline A to_acc(Float16 v) {
  return to_float(v);
}
template <class A>
inline A to_acc(BFloat16 v) {
  return to_float(v);
}

template <class T>
inline T from_acc(double v);
template <>
inline float from_acc<float>(double v) {
  return static_cast<float>(v);
}
template <>
inline double from_acc<double>(double v) {
  return v;
}
template <>
inline Float16 from_acc<Float16>(double v) {
  return to_float16(static_cast<float>(v));
}
template <>
inline BFloat16 from_acc<BFloat16>(double v) {
  return to_bfloat16(static_cast<float>(v));
}

}  // namespace
}  // namespace onnx_pools
