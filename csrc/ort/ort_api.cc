#include "ort/ort_api.h"

#include <string>

namespace onnx_pools {

const OrtApi* g_ort = nullptr;
ShapeReferenceFn g_shape_reference = nullptr;

void check(OrtStatus* status) {
  if (status == nullptr) return;
  std::string message = g_ort->GetErrorMessage(status);
  g_ort->ReleaseStatus(status);
  throw Error(message);
}

}  // namespace onnx_pools
