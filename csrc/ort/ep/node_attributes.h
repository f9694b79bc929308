// Reading a graph node's attributes (OrtNode, the plugin EP's view of the model) with the library's one attribute
// parser, as kernels read theirs from OrtKernelInfo.
#pragma once
#include <string>

#include "ort/attributes.h"

namespace onnx_pools::ep {

class NodeAttributes final : public AttributeReader {
 public:
  NodeAttributes(const OrtNode* node, std::string op) : AttributeReader(std::move(op)), node_(node) {}

 private:
  std::optional<std::vector<int64_t>> get_ints(const char* name) const override;
  std::optional<int64_t> get_integer(const char* name) const override;
  std::optional<float> get_real(const char* name) const override;
  std::optional<std::string> get_text(const char* name) const override;
  bool present(const char* name) const override { return find(name) != nullptr; }
  const OrtOpAttr* find(const char* name) const;
  const OrtNode* node_;
};

}  // namespace onnx_pools::ep
