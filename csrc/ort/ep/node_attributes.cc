#include "ort/ep/node_attributes.h"

#include "ort/ep/provider.h"

namespace onnx_pools::ep {
namespace {

bool ok(OrtStatus* status) {
  if (status == nullptr) return true;
  ort()->ReleaseStatus(status);
  return false;
}

template <class V>
std::optional<V> read_scalar(const OrtOpAttr* attr, OrtOpAttrType type) {
  V value{};
  size_t bytes = 0;
  if (attr == nullptr || !ok(ort()->ReadOpAttr(attr, type, &value, sizeof value, &bytes))) return std::nullopt;
  return value;
}

// The attribute's bytes (INTS, STRING): asking with no buffer reports the size.
template <class V>
std::optional<V> read_array(const OrtOpAttr* attr, OrtOpAttrType type, size_t element) {
  if (attr == nullptr) return std::nullopt;
  size_t bytes = 0;
  OrtStatus* probe = ort()->ReadOpAttr(attr, type, nullptr, 0, &bytes);
  if (probe != nullptr) ort()->ReleaseStatus(probe);
  V value(bytes / element, typename V::value_type{});
  if (bytes > 0 && !ok(ort()->ReadOpAttr(attr, type, value.data(), bytes, &bytes))) return std::nullopt;
  return value;
}

}  // namespace

const OrtOpAttr* NodeAttributes::find(const char* name) const {
  const OrtOpAttr* attr = nullptr;
  if (!ok(ort()->Node_GetAttributeByName(node_, name, &attr))) return nullptr;
  return attr;
}

std::optional<std::vector<int64_t>> NodeAttributes::get_ints(const char* name) const {
  return read_array<std::vector<int64_t>>(find(name), ORT_OP_ATTR_INTS, sizeof(int64_t));
}

std::optional<int64_t> NodeAttributes::get_integer(const char* name) const {
  return read_scalar<int64_t>(find(name), ORT_OP_ATTR_INT);
}

std::optional<float> NodeAttributes::get_real(const char* name) const {
  return read_scalar<float>(find(name), ORT_OP_ATTR_FLOAT);
}

std::optional<std::string> NodeAttributes::get_text(const char* name) const {
  std::optional<std::string> value = read_array<std::string>(find(name), ORT_OP_ATTR_STRING, 1);
  while (value && !value->empty() && value->back() == '\0') value->pop_back();
  return value;
}

}  // namespace onnx_pools::ep
