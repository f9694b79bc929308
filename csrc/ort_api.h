// Access to the ONNX Runtime C API and the library's error type.
#pragma once
#include <onnxruntime_c_api.h>

#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace onnx_pools {

// Set once by RegisterCustomOps; every ORT call goes through it.
extern const OrtApi* g_ort;

// GetTensorElementTypeAndShapeDataReference (ONNX Runtime >= 1.24, the last entry of OrtApi version 24): a
// tensor's type and shape without the allocation GetTensorTypeAndShape makes, which costs tiny tensors a tenth
// of their run time. The headers this builds against are older, so the entry is found by its position and used
// only after a self-test on a tensor of known shape; null otherwise.
using ShapeReferenceFn = OrtStatus*(ORT_API_CALL*)(const OrtValue* value, ONNXTensorElementDataType* type,
                                                  const int64_t** shape, size_t* rank);
extern ShapeReferenceFn g_shape_reference;

// A user-facing error: its message names the op and the attribute or input at fault.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(concat(std::forward<Parts>(parts)...));
}

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
