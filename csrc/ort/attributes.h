// Reading node attributes the same way at kernel creation (OrtKernelInfo) and in shape inference
// (OrtShapeInferContext), so both share one parser.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "geometry/error.h"
#include "geometry/pool_geometry.h"
#include "ort/ort_api.h"

namespace onnx_pools {

// Each getter returns nullopt when the attribute is absent, and throws Error naming the op and the attribute when
// it is present with another type (a FLOAT where an INT belongs is a model error, never silently the default).
class AttributeReader {
 public:
  explicit AttributeReader(std::string op) : op_(std::move(op)) {}
  virtual ~AttributeReader() = default;
  std::optional<std::vector<int64_t>> ints(const char* name) const { return typed(get_ints(name), name, "INTS"); }
  std::optional<int64_t> integer(const char* name) const { return typed(get_integer(name), name, "INT"); }
  std::optional<float> real(const char* name) const { return typed(get_real(name), name, "FLOAT"); }
  std::optional<std::string> text(const char* name) const { return typed(get_text(name), name, "STRING"); }
  // For an attribute that may be either INT or FLOAT (LpPool's p): nullopt when absent or of another type.
  std::optional<int64_t> integer_if_int(const char* name) const { return get_integer(name); }

 protected:
  virtual std::optional<std::vector<int64_t>> get_ints(const char* name) const = 0;
  virtual std::optional<int64_t> get_integer(const char* name) const = 0;
  virtual std::optional<float> get_real(const char* name) const = 0;
  virtual std::optional<std::string> get_text(const char* name) const = 0;
  virtual bool present(const char* name) const = 0;

 private:
  template <class V>
  std::optional<V> typed(std::optional<V> value, const char* name, const char* type) const {
    if (!value && present(name)) fail(op_, ": attribute '", name, "' must be of type ", type, " but has another type");
    return value;
  }
  std::string op_;
};

class KernelInfoAttributes final : public AttributeReader {
 public:
  KernelInfoAttributes(const OrtKernelInfo* info, std::string op) : AttributeReader(std::move(op)), info_(info) {}

 private:
  std::optional<std::vector<int64_t>> get_ints(const char* name) const override;
  std::optional<int64_t> get_integer(const char* name) const override;
  std::optional<float> get_real(const char* name) const override;
  std::optional<std::string> get_text(const char* name) const override;
  bool present(const char* name) const override;
  const OrtKernelInfo* info_;
};

// An attribute reader over OrtOpAttr (shape inference, the plugin EP's graph nodes): the readers differ only in
// how they find an attribute.
class OpAttrReader : public AttributeReader {
 public:
  using AttributeReader::AttributeReader;

 protected:
  // nullptr when the node has no such attribute.
  virtual const OrtOpAttr* find(const char* name) const = 0;

 private:
  std::optional<std::vector<int64_t>> get_ints(const char* name) const final;
  std::optional<int64_t> get_integer(const char* name) const final;
  std::optional<float> get_real(const char* name) const final;
  std::optional<std::string> get_text(const char* name) const final;
  bool present(const char* name) const final { return find(name) != nullptr; }
};

class ShapeInferAttributes final : public OpAttrReader {
 public:
  ShapeInferAttributes(OrtShapeInferContext* ctx, std::string op) : OpAttrReader(std::move(op)), ctx_(ctx) {}

 private:
  const OrtOpAttr* find(const char* name) const override;
  OrtShapeInferContext* ctx_;
};

// A windowed pool's attributes: read here (a wrongly typed one is an error), their values checked by
// checked_pool_attributes (geometry/pool_geometry.h).
PoolAttributes read_pool_attributes(const AttributeReader& attrs, const char* op);

}  // namespace onnx_pools
