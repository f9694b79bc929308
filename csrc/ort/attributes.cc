#include "ort/attributes.h"

namespace onnx_pools {
namespace {

// True when the ORT call succeeded; a failure here only means "absent or another type".
bool ok(OrtStatus* status) {
  if (status == nullptr) return true;
  g_ort->ReleaseStatus(status);
  return false;
}

// A single INT or FLOAT attribute; nullopt when absent (attr null) or of another type.
template <class V>
std::optional<V> read_scalar(const OrtOpAttr* attr, OrtOpAttrType type) {
  V value{};
  size_t bytes = 0;
  if (attr == nullptr || !ok(g_ort->ReadOpAttr(attr, type, &value, sizeof value, &bytes))) return std::nullopt;
  return value;
}

// An INTS or STRING attribute's elements: asking with no buffer reports the size in bytes.
template <class V>
std::optional<V> read_array(const OrtOpAttr* attr, OrtOpAttrType type, size_t element) {
  if (attr == nullptr) return std::nullopt;
  size_t bytes = 0;
  OrtStatus* probe = g_ort->ReadOpAttr(attr, type, nullptr, 0, &bytes);
  if (probe != nullptr) g_ort->ReleaseStatus(probe);
  V value(bytes / element, typename V::value_type{});
  if (bytes > 0 && !ok(g_ort->ReadOpAttr(attr, type, value.data(), bytes, &bytes))) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::vector<int64_t>> KernelInfoAttributes::get_ints(const char* name) const {
  size_t size = 0;
  // Asking with no buffer reports the size (and an error status on some ORT versions).
  OrtStatus* probe = g_ort->KernelInfoGetAttributeArray_int64(info_, name, nullptr, &size);
  if (probe != nullptr) {
    g_ort->ReleaseStatus(probe);
    if (size == 0) return std::nullopt;
  }
  std::vector<int64_t> values(size);
  if (size > 0 && !ok(g_ort->KernelInfoGetAttributeArray_int64(info_, name, values.data(), &size))) return std::nullopt;
  values.resize(size);
  return values;
}

std::optional<int64_t> KernelInfoAttributes::get_integer(const char* name) const {
  int64_t value = 0;
  if (!ok(g_ort->KernelInfoGetAttribute_int64(info_, name, &value))) return std::nullopt;
  return value;
}

std::optional<float> KernelInfoAttributes::get_real(const char* name) const {
  float value = 0;
  if (!ok(g_ort->KernelInfoGetAttribute_float(info_, name, &value))) return std::nullopt;
  return value;
}

std::optional<std::string> KernelInfoAttributes::get_text(const char* name) const {
  size_t size = 0;
  OrtStatus* probe = g_ort->KernelInfoGetAttribute_string(info_, name, nullptr, &size);
  if (probe != nullptr) {
    g_ort->ReleaseStatus(probe);
    if (size == 0) return std::nullopt;
  }
  std::string value(size, '\0');
  if (!ok(g_ort->KernelInfoGetAttribute_string(info_, name, value.data(), &size))) return std::nullopt;
  value.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  return value;
}

// Present with any type: one of the readers ORT offers a kernel info succeeds.
bool KernelInfoAttributes::present(const char* name) const {
  if (get_integer(name) || get_real(name) || get_ints(name) || get_text(name)) return true;
  size_t size = 0;
  OrtStatus* status = g_ort->KernelInfoGetAttributeArray_float(info_, name, nullptr, &size);
  if (status == nullptr) return true;
  g_ort->ReleaseStatus(status);
  return size > 0;
}

const OrtOpAttr* ShapeInferAttributes::find(const char* name) const {
  const OrtOpAttr* attr = nullptr;
  if (!ok(g_ort->ShapeInferContext_GetAttribute(ctx_, name, &attr))) return nullptr;
  return attr;
}

std::optional<std::vector<int64_t>> OpAttrReader::get_ints(const char* name) const {
  return read_array<std::vector<int64_t>>(find(name), ORT_OP_ATTR_INTS, sizeof(int64_t));
}

std::optional<int64_t> OpAttrReader::get_integer(const char* name) const {
  return read_scalar<int64_t>(find(name), ORT_OP_ATTR_INT);
}

std::optional<float> OpAttrReader::get_real(const char* name) const {
  return read_scalar<float>(find(name), ORT_OP_ATTR_FLOAT);
}

std::optional<std::string> OpAttrReader::get_text(const char* name) const {
  std::optional<std::string> value = read_array<std::string>(find(name), ORT_OP_ATTR_STRING, 1);
  while (value && !value->empty() && value->back() == '\0') value->pop_back();
  return value;
}

PoolAttributes read_pool_attributes(const AttributeReader& attrs, const char* op) {
  PoolAttributeValues values;
  values.kernel_shape = attrs.ints("kernel_shape");
  values.strides = attrs.ints("strides");
  values.dilations = attrs.ints("dilations");
  values.pads = attrs.ints("pads");
  values.auto_pad = attrs.text("auto_pad");
  values.ceil_mode = attrs.integer("ceil_mode");
  return checked_pool_attributes(values, op);
}

}  // namespace onnx_pools
