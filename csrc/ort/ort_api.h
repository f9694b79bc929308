// The ONNX Runtime C API handle and the status helpers every ORT call of the ort layer goes through (ort_api.cc).
#pragma once
#include <onnxruntime_c_api.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>

#include "geometry/error.h"

namespace onnx_pools {

// The ONNX Runtime C API version the library needs (ONNX Runtime 1.21), whatever version the headers declare:
// RegisterCustomOps asks ORT for this one, so a build against newer headers still loads in ORT 1.21.
constexpr uint32_t kOrtApiVersion = 21;
static_assert(ORT_API_VERSION >= kOrtApiVersion, "onnx-pools needs ONNX Runtime headers of C API 21 (1.21) or newer");

// Set once by RegisterCustomOps (GetApi(kOrtApiVersion)); every ORT call goes through it.
extern const OrtApi* g_ort;

// GetTensorElementTypeAndShapeDataReference (ONNX Runtime >= 1.24, the last entry of OrtApi version 24): a
// tensor's type and shape without the allocation GetTensorTypeAndShape makes, which costs tiny tensors a tenth
// of their run time. Taken from GetApi(24) (by name with headers of API 24 or newer, by its table position with
// older ones) and used only after a self-test on a tensor of known shape; null otherwise.
using ShapeReferenceFn = OrtStatus*(ORT_API_CALL*)(const OrtValue* value, ONNXTensorElementDataType* type,
                                                   const int64_t** shape, size_t* rank);
extern ShapeReferenceFn g_shape_reference;

// Throws Error carrying ORT's message when an ORT call failed.
void check(OrtStatus* status);

// Runs fn and turns any exception into an OrtStatus: nothing may unwind into ORT.
template <class Fn>
OrtStatus* guarded(Fn&& fn) noexcept {
  try {
    fn();
    return nullptr;
  } catch (const Error& e) {
    return g_ort->CreateStatus(ORT_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return g_ort->CreateStatus(ORT_FAIL, "onnx-pools: out of memory");
  } catch (const std::exception& e) {
    return g_ort->CreateStatus(ORT_FAIL, e.what());
  } catch (...) {
    return g_ort->CreateStatus(ORT_FAIL, "onnx-pools: unknown error");
  }
}

}  // namespace onnx_pools
