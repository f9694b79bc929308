#include "ort/ep/capability.h"

#include <cmath>
#include <optional>
#include <set>
#include <vector>

#include "geometry/pool_geometry.h"
#include "ort/ep/node_attributes.h"
#include "ort/ops.h"

namespace onnx_pools::ep {
namespace {

// ---- the graph, through ORT's C API (every call checked: a failure is reported to ORT as GetCapability's error)

std::string op_type(const OrtNode* node) {
  const char* s = nullptr;
  check(ort()->Node_GetOperatorType(node, &s));
  return s ? s : "";
}

// "" for the ONNX domain (also spelled "ai.onnx").
std::string domain(const OrtNode* node) {
  const char* s = nullptr;
  check(ort()->Node_GetDomain(node, &s));
  const std::string d = s ? s : "";
  return d == "ai.onnx" ? "" : d;
}

bool is(const OrtNode* node, const char* dom, const char* op) {
  return node != nullptr && domain(node) == dom && op_type(node) == op;
}

// A node's inputs (nullptr for an absent optional one) or outputs.
std::vector<const OrtValueInfo*> inputs(const OrtNode* node) {
  size_t n = 0;
  check(ort()->Node_GetNumInputs(node, &n));
  std::vector<const OrtValueInfo*> v(n);
  if (n > 0) check(ort()->Node_GetInputs(node, v.data(), n));
  return v;
}

std::vector<const OrtValueInfo*> outputs(const OrtNode* node) {
  size_t n = 0;
  check(ort()->Node_GetNumOutputs(node, &n));
  std::vector<const OrtValueInfo*> v(n);
  if (n > 0) check(ort()->Node_GetOutputs(node, v.data(), n));
  return v;
}

// The node computing `value`; nullptr for a graph input or an initializer.
const OrtNode* producer(const OrtValueInfo* value) {
  if (value == nullptr) return nullptr;
  const OrtNode* node = nullptr;
  check(ort()->ValueInfo_GetValueProducer(value, &node, nullptr));
  return node;
}

// The nodes reading `value` (one per input that reads it), and whether it is also a graph output.
std::vector<const OrtNode*> consumers(const OrtValueInfo* value) {
  size_t n = 0;
  check(ort()->ValueInfo_GetValueNumConsumers(value, &n));
  std::vector<const OrtNode*> nodes(n);
  std::vector<int64_t> indices(n);
  if (n > 0) check(ort()->ValueInfo_GetValueConsumers(value, nodes.data(), indices.data(), n));
  return nodes;
}

bool graph_output(const OrtValueInfo* value) {
  bool out = false;
  check(ort()->ValueInfo_IsGraphOutput(value, &out));
  return out;
}

std::string name(const OrtValueInfo* value) {
  const char* s = nullptr;
  check(ort()->GetValueInfoName(value, &s));
  return s ? s : "";
}

// A tensor value's element type; UNDEFINED when not a tensor or not known.
ONNXTensorElementDataType element_type(const OrtValueInfo* value) {
  if (value == nullptr) return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  const OrtTypeInfo* type = nullptr;
  check(ort()->GetValueInfoTypeInfo(value, &type));
  const OrtTensorTypeAndShapeInfo* tensor = nullptr;
  if (type == nullptr || ort()->CastTypeInfoToTensorInfo(type, &tensor) != nullptr || tensor == nullptr)
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  ONNXTensorElementDataType t = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  check(ort()->GetTensorElementType(tensor, &t));
  return t;
}

// The value of a constant scalar initializer (shape [] or [1]) of type `type`, as a double; nullopt otherwise.
std::optional<double> constant_scalar(const OrtValueInfo* value, ONNXTensorElementDataType type) {
  if (value == nullptr) return std::nullopt;
  bool constant = false;
  check(ort()->ValueInfo_IsConstantInitializer(value, &constant));
  if (!constant) return std::nullopt;
  const OrtValue* tensor = nullptr;
  check(ort()->ValueInfo_GetInitializerValue(value, &tensor));
  if (tensor == nullptr) return std::nullopt;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check(ort()->GetTensorTypeAndShape(tensor, &info));
  ONNXTensorElementDataType t = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0, count = 0;
  OrtStatus* status = ort()->GetTensorElementType(info, &t);
  if (status == nullptr) status = ort()->GetDimensionsCount(info, &rank);
  if (status == nullptr) status = ort()->GetTensorShapeElementCount(info, &count);
  ort()->ReleaseTensorTypeAndShapeInfo(info);
  check(status);
  if (t != type || rank > 1 || count != 1) return std::nullopt;
  void* data = nullptr;
  check(ort()->GetTensorMutableData(const_cast<OrtValue*>(tensor), &data));
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return *static_cast<const float*>(data);
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return *static_cast<const uint8_t*>(data);
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return *static_cast<const int8_t*>(data);
    default: return std::nullopt;
  }
}

// ---- the per-node choices

// ORT's NCHWc rewrite keeps these in its blocked layout after a Conv; a global pool behind a chain of them is
// pooled in that layout by ORT's own kernel.
bool keeps_blocked_layout(const std::string& op) {
  static const std::set<std::string> ops = {"Conv",   "FusedConv",          "Relu",        "Clip",       "Sigmoid",
                                            "Tanh",   "LeakyRelu",          "HardSigmoid", "Add",        "Sum",
                                            "Concat", "BatchNormalization", "MaxPool",     "AveragePool"};
  return ops.count(op) > 0;
}

bool fed_by_conv(const OrtNode* pool) {
  const OrtNode* node = producer(inputs(pool).at(0));
  for (int depth = 0; node != nullptr && depth < 16; ++depth) {
    const std::string op = op_type(node);
    if (op == "Conv" || op == "FusedConv") return true;
    if (!keeps_blocked_layout(op)) return false;
    const std::vector<const OrtValueInfo*> in = inputs(node);
    if (in.empty()) return false;
    node = producer(in[0]);
  }
  return false;
}

constexpr bool kX86_64 =
#if defined(__x86_64__)
    true;
#else
    false;
#endif

// The number of elements of a pool's window (kernel_shape's product); 0 when the attributes cannot be read.
int64_t window_elements(const OrtNode* pool, const char* op) {
  try {
    const PoolAttributes attrs = read_pool_attributes(NodeAttributes(pool, op), op);
    int64_t n = 1;
    for (const int64_t k : attrs.kernel_shape) n *= k;
    return n;
  } catch (const Error&) {
    return 0;
  }
}

// A quantized average pool with a window of at most this many elements is left to ORT: its NHWC kernel (ORT turns
// QLinearConv graphs and their quantized pools to NHWC) is as fast there, and a node the EP takes stays NCHW, so
// ORT puts a Transpose on each side of it (resnet_qdq_*: 2x2 shortcut pools, 0.92-0.94x stock when taken).
constexpr int64_t kSmallQuantizedWindow = 4;

const OrtNode* sole_consumer(const OrtValueInfo* value);

// A float node between a DequantizeLinear and a QuantizeLinear: a QDQ group ORT fuses into one of its QLinear ops
// (GlobalAveragePool -> com.microsoft.QLinearGlobalAveragePool) when the node stays with ORT.
bool inside_qdq_group(const OrtNode* node) {
  const std::vector<const OrtValueInfo*> in = inputs(node), out = outputs(node);
  if (in.empty() || out.size() != 1) return false;
  return is(producer(in[0]), "", "DequantizeLinear") && is(sole_consumer(out[0]), "", "QuantizeLinear");
}

// Whether a node the registry has a kernel for is left to ORT (EpOptions says why).
bool left_to_ort(const OrtNode* node, const std::string& op, const EpOptions& options) {
  if (!options.ops.count(op)) return true;
  if (op == "QLinearAveragePool")
    return options.ort_layout && window_elements(node, "QLinearAveragePool") <= kSmallQuantizedWindow;
  if (domain(node) != "") return false;
  if (options.ort_layout && inside_qdq_group(node)) return true;
  const ONNXTensorElementDataType type = element_type(inputs(node).at(0));
  if (options.ort_layout && kX86_64 && type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT &&
      (op == "GlobalAveragePool" || op == "GlobalMaxPool") && fed_by_conv(node))
    return true;
  // The float16 policy: only for the ops whose float kernel in ORT is fast. ORT's LpPool and GlobalLpPool are
  // one to two orders of magnitude slower than the library's, so taking their float16 nodes wins even with a Cast
  // added in front of the node feeding them.
  if (!options.float16_all && type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 &&
      (op == "GlobalAveragePool" || op == "GlobalMaxPool")) {
    const OrtNode* from = producer(inputs(node).at(0));
    if (from != nullptr && op_type(from) != "Cast") return true;
  }
  return false;
}

// ---- QDQ units

// Scale and zero point of a DequantizeLinear / QuantizeLinear node (inputs 1 and 2) when both are constant
// scalars (an absent zero point is 0) of the quantized type.
bool scalar_parameters(const OrtNode* node, ONNXTensorElementDataType type, float& scale, int32_t& zero_point) {
  const std::vector<const OrtValueInfo*> in = inputs(node);
  if (in.size() < 2) return false;
  const std::optional<double> s = constant_scalar(in[1], ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT);
  if (!s || !(*s > 0) || !std::isfinite(*s)) return false;
  scale = static_cast<float>(*s);
  zero_point = 0;
  if (in.size() > 2 && in[2] != nullptr) {
    const std::optional<double> z = constant_scalar(in[2], type);
    if (!z) return false;
    zero_point = static_cast<int32_t>(*z);
  }
  return true;
}

// The only consumer of `value`, when it has exactly one and is not a graph output.
const OrtNode* sole_consumer(const OrtValueInfo* value) {
  if (value == nullptr || graph_output(value)) return nullptr;
  const std::vector<const OrtNode*> nodes = consumers(value);
  return nodes.size() == 1 ? nodes[0] : nullptr;
}

// DequantizeLinear -> AveragePool -> QuantizeLinear around `pool`, each the only reader of the previous one's
// output, int8/uint8 in and out (the same type), scalar constant parameters, and pool attributes the
// QLinearAveragePool kernel takes. Fills the three nodes and the unit.
bool match_qdq_unit(const OrtNode* pool, const EpOptions& options, const OrtNode* (&nodes)[3], FusedAveragePool& unit) {
  const std::vector<const OrtValueInfo*> pool_in = inputs(pool), pool_out = outputs(pool);
  if (pool_in.size() != 1 || pool_out.size() != 1) return false;
  const OrtNode* dq = producer(pool_in[0]);
  if (!is(dq, "", "DequantizeLinear") || sole_consumer(pool_in[0]) != pool) return false;
  const OrtNode* q = sole_consumer(pool_out[0]);
  if (!is(q, "", "QuantizeLinear")) return false;
  const std::vector<const OrtValueInfo*> dq_in = inputs(dq), q_out = outputs(q);
  if (dq_in.empty() || q_out.size() != 1) return false;
  bool constant_x = false;
  check(ort()->ValueInfo_IsConstantInitializer(dq_in[0], &constant_x));
  if (constant_x) return false;  // the fused node would lose it with the dropped initializers
  const ONNXTensorElementDataType type = element_type(dq_in[0]);
  if (type != ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 && type != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8) return false;
  if (element_type(q_out[0]) != type) return false;
  if (!scalar_parameters(dq, type, unit.params.x_scale, unit.params.x_zero_point)) return false;
  if (!scalar_parameters(q, type, unit.params.y_scale, unit.params.y_zero_point)) return false;
  // int8 on x86-64: ORT rewrites int8 QuantizeLinear -> DequantizeLinear pairs to uint8 so that the Convs
  // around run as QLinearConv (its x86 kernels take uint8 activations); a fused unit hides its QuantizeLinear from
  // that rewrite and the Conv it feeds stays a float Conv behind a DequantizeLinear (inception_qdq_int8: 9 Convs,
  // 0.92x stock when taken). ORT runs these pools in float in its blocked layout.
  if (options.ort_layout && kX86_64 && type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8) return false;
  if (options.ort_layout && window_elements(pool, "AveragePool") <= kSmallQuantizedWindow) return false;
  // the pool's attributes must be ones the kernel takes (it reads them again when it is made)
  try {
    const NodeAttributes attrs(pool, "AveragePool");
    read_pool_attributes(attrs, "AveragePool");
    const int64_t count_include_pad = attrs.integer("count_include_pad").value_or(0);
    if (count_include_pad != 0 && count_include_pad != 1) return false;
  } catch (const Error&) {
    return false;
  }
  unit.type = type;
  nodes[0] = dq;
  nodes[1] = pool;
  nodes[2] = q;
  return true;
}

bool is_qlinear_conv(const OrtNode* node) { return node != nullptr && op_type(node) == "QLinearConv"; }

}  // namespace

std::vector<const OrtNode*> graph_nodes(const OrtGraph* graph) {
  size_t count = 0;
  check(ort()->Graph_GetNumNodes(graph, &count));
  std::vector<const OrtNode*> nodes(count);
  if (count > 0) check(ort()->Graph_GetNodes(graph, nodes.data(), count));
  return nodes;
}

bool qlinear_pool_beside_qlinear_conv(const OrtGraph* graph) {
  for (const OrtNode* node : graph_nodes(graph)) {
    if (!is(node, "com.microsoft", "QLinearAveragePool")) continue;
    try {
      if (NodeAttributes(node, "QLinearAveragePool").integer("channels_last").value_or(0) != 0) continue;
    } catch (const Error&) {
      continue;
    }
    const std::vector<const OrtValueInfo*> in = inputs(node), out = outputs(node);
    if (!in.empty() && is_qlinear_conv(producer(in[0]))) return true;
    if (out.size() == 1 && !graph_output(out[0]))
      for (const OrtNode* reader : consumers(out[0]))
        if (is_qlinear_conv(reader)) return true;
  }
  return false;
}

void claim_nodes(const OrtGraph* graph, OrtEpGraphSupportInfo* support, const EpOptions& options,
                 std::map<std::string, FusedAveragePool>& fused) {
  for (const OrtNode* node : graph_nodes(graph)) {
    const std::string op = op_type(node);
    if (options.qdq && options.ops.count("QLinearAveragePool") && op == "AveragePool" && domain(node) == "") {
      const OrtNode* unit_nodes[3] = {};
      FusedAveragePool unit{};
      if (match_qdq_unit(node, options, unit_nodes, unit)) {
        OrtNodeFusionOptions fusion{};
        fusion.ort_version_supported = kEpOrtApiVersion;
        // the unit's parameters are read here: its fused node takes only X
        fusion.drop_constant_initializers = true;
        check(ep_api()->EpGraphSupportInfo_AddNodesToFuse(support, unit_nodes, 3, &fusion));
        fused[name(outputs(unit_nodes[2]).at(0))] = unit;
      }
      continue;
    }
    const OrtKernelDef* def = nullptr;
    check(ep_api()->EpGraphSupportInfo_LookUpKernel(support, node, &def));
    if (def != nullptr && !left_to_ort(node, op, options))
      check(ep_api()->EpGraphSupportInfo_AddSingleNode(support, node));
  }
}

}  // namespace onnx_pools::ep
