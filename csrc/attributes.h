// Reading node attributes the same way at kernel creation (OrtKernelInfo) and in shape inference
// (OrtShapeInferContext), so both share one parser.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ort_api.h"

namespace onnx_pools {

class AttributeReader {
 public:
  virtual ~AttributeReader() = default;
  // Each returns nullopt when the attribute is absent or of another type.
  virtual std::optional<std::vector<int64_t>> ints(const char* name) const = 0;
  virtual std::optional<int64_t> integer(const char* name) const = 0;
  virtual std::optional<float> real(const char* name) const = 0;
  virtual std::optional<std::string> text(const char* name) const = 0;
};

class KernelInfoAttributes final : public AttributeReader {
 public:
  explicit KernelInfoAttributes(const OrtKernelInfo* info) : info_(info) {}
  std::optional<std::vector<int64_t>> ints(const char* name) const override;
  std::optional<int64_t> integer(const char* name) const override;
  std::optional<float> real(const char* name) const override;
  std::optional<std::string> text(const char* name) const override;

 private:
  const OrtKernelInfo* info_;
};

class ShapeInferAttributes final : public AttributeReader {
 public:
  explicit ShapeInferAttributes(OrtShapeInferContext* ctx) : ctx_(ctx) {}
  std::optional<std::vector<int64_t>> ints(const char* name) const override;
  std::optional<int64_t> integer(const char* name) const override;
  std::optional<float> real(const char* name) const override;
  std::optional<std::string> text(const char* name) const override;

 private:
  const OrtOpAttr* find(const char* name) const;
  OrtShapeInferContext* ctx_;
};

}  // namespace onnx_pools
