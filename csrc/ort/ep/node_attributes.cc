#include "ort/ep/node_attributes.h"

#include "ort/ep/provider.h"

namespace onnx_pools::ep {

const OrtOpAttr* NodeAttributes::find(const char* name) const {
  const OrtOpAttr* attr = nullptr;
  OrtStatus* status = ort()->Node_GetAttributeByName(node_, name, &attr);
  if (status == nullptr) return attr;
  ort()->ReleaseStatus(status);  // absent
  return nullptr;
}

}  // namespace onnx_pools::ep
