// Reading a graph node's attributes (OrtNode, the plugin EP's view of the model) with the library's one attribute
// parser, as kernels read theirs from OrtKernelInfo.
#pragma once
#include <string>
#include <utility>

#include "ort/attributes.h"

namespace onnx_pools::ep {

class NodeAttributes final : public OpAttrReader {
 public:
  NodeAttributes(const OrtNode* node, std::string op) : OpAttrReader(std::move(op)), node_(node) {}

 private:
  const OrtOpAttr* find(const char* name) const override;
  const OrtNode* node_;
};

}  // namespace onnx_pools::ep
