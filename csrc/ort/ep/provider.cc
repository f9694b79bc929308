// The EP factory, the EP (kernel registry, GetCapability, the fused QDQ units' compute) and the library's EP entry
// points.
#include "ort/ep/provider.h"

#include <cctype>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "kernels/kernels.h"
#include "ort/attributes.h"
#include "ort/ep/capability.h"
#include "ort/ep/node_attributes.h"
#include "ort/ops.h"

#define ONNX_POOLS_EXPORT extern "C" __attribute__((visibility("default")))

namespace onnx_pools::ep {
namespace {

const OrtApi* g_api = nullptr;
const OrtEpApi* g_ep_api = nullptr;

constexpr const char* kVendor = "onnx-pools";
constexpr const char* kVersion = "0.1.0";

// ---- kernels of the registry

// What a registered kernel makes: the op's table row and the element type; nhwc: ORT's NHWC form of the op.
struct KernelEntry {
  const OpDefinition* def;
  const ElementType* type;
  bool nhwc = false;
};

// The domain of the NHWC ops ORT's layout transformation makes for an EP that prefers NHWC
// (GetPreferredDataLayout): with the ort_layout option the EP asks for it for QLinearAveragePool alone
// (ShouldConvertDataLayoutForOp), so that a QLinearAveragePool the EP takes between QLinearConvs, which ORT's CPU
// provider runs in NHWC, stays in that layout instead of getting a Transpose on each side.
constexpr const char* kNhwcDomain = "com.ms.internal.nhwc";
constexpr const char* kNhwcOp = "QLinearAveragePool";

// A node's attributes, with channels_last = 1: the NHWC form of QLinearAveragePool keeps the NCHW node's
// attributes, its layout is its domain's.
class ChannelsLast final : public AttributeReader {
 public:
  ChannelsLast(const AttributeReader& node, std::string op) : AttributeReader(std::move(op)), node_(node) {}

 private:
  // (the node's getters have checked the attribute's type: absent here means absent there)
  std::optional<std::vector<int64_t>> get_ints(const char* name) const override { return node_.ints(name); }
  std::optional<int64_t> get_integer(const char* name) const override {
    return std::string(name) == "channels_last" ? std::optional<int64_t>(1) : node_.integer(name);
  }
  std::optional<float> get_real(const char* name) const override { return node_.real(name); }
  std::optional<std::string> get_text(const char* name) const override { return node_.text(name); }
  bool present(const char*) const override { return false; }
  const AttributeReader& node_;
};

// One node's kernel, as ORT holds it.
struct EpKernel : OrtKernelImpl {
  std::atomic<uint64_t>* calls;
  std::unique_ptr<OpKernel> kernel;

  EpKernel(std::atomic<uint64_t>* c, std::unique_ptr<OpKernel> k) : OrtKernelImpl{}, calls(c), kernel(std::move(k)) {
    ort_version_supported = kEpOrtApiVersion;
    Compute = [](OrtKernelImpl* self, OrtKernelContext* ctx) noexcept {
      return guarded([&] {
        EpKernel& me = *static_cast<EpKernel*>(self);
        me.calls->fetch_add(1, std::memory_order_relaxed);
        me.kernel->compute(ctx);
      });
    };
    Release = [](OrtKernelImpl* self) noexcept { delete static_cast<EpKernel*>(self); };
  }
};

OrtStatus* ORT_API_CALL create_ep_kernel(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) noexcept {
  *out = nullptr;
  return guarded([&] {
    const KernelEntry& entry = *static_cast<const KernelEntry*>(state);
    std::unique_ptr<OpKernel> kernel;
    if (entry.nhwc) {
      const std::string op = std::string(entry.def->name) + " (NHWC)";
      const KernelInfoAttributes node(info, op);
      kernel = entry.def->create(op, entry.type->onnx, ChannelsLast(node, op));
    } else {
      kernel = create_kernel(*entry.def, entry.type->onnx, info);
    }
    *out = new EpKernel(&call_counter(entry.def - op_table().data()), std::move(kernel));
  });
}

// The opset ranges of an op's versions ("1,2,22": [1,1], [2,21], [22,22]); the last one closed, so a future
// version of the op (which may change its meaning) is not taken before the library knows it.
std::vector<std::pair<int, int>> version_ranges(const char* versions) {
  std::vector<int> v;
  std::stringstream stream(versions);
  for (std::string item; std::getline(stream, item, ',');) v.push_back(std::stoi(item));
  std::vector<std::pair<int, int>> ranges;
  for (size_t i = 0; i < v.size(); ++i) ranges.emplace_back(v[i], i + 1 < v.size() ? v[i + 1] - 1 : v[i]);
  return ranges;
}

// Every (op, opset range, element type) of the table, for EP kernels. The entries outlive every registry.
const std::vector<KernelEntry>& kernel_entries() {
  static const std::vector<KernelEntry> entries = [] {
    std::vector<KernelEntry> v;
    for (const OpDefinition& def : op_table())
      for (const ElementType& t : kElementTypes)
        if (t.family == def.types) {
          v.push_back({&def, &t});
          if (std::string(def.name) == kNhwcOp) v.push_back({&def, &t, true});
        }
    return v;
  }();
  return entries;
}

OrtKernelRegistry* build_kernel_registry() {
  OrtKernelRegistry* registry = nullptr;
  check(g_ep_api->CreateKernelRegistry(&registry));
  try {
    for (const KernelEntry& entry : kernel_entries()) {
      const OrtDataType* data_type = nullptr;
      check(g_ep_api->GetTensorDataType(entry.type->onnx, &data_type));
      for (const auto& [first, last] : version_ranges(entry.def->versions)) {
        OrtKernelDefBuilder* builder = nullptr;
        check(g_ep_api->CreateKernelDefBuilder(&builder));
        OrtKernelDef* kernel_def = nullptr;
        OrtStatus* status = g_ep_api->KernelDefBuilder_SetOperatorType(builder, entry.def->name);
        if (!status)
          status = g_ep_api->KernelDefBuilder_SetDomain(builder, entry.nhwc ? kNhwcDomain : entry.def->domain);
        if (!status) status = g_ep_api->KernelDefBuilder_SetSinceVersion(builder, first, last);
        if (!status) status = g_ep_api->KernelDefBuilder_SetExecutionProvider(builder, kEpName);
        if (!status) status = g_ep_api->KernelDefBuilder_AddTypeConstraint(builder, "T", &data_type, 1);
        if (!status) status = g_ep_api->KernelDefBuilder_Build(builder, &kernel_def);
        g_ep_api->ReleaseKernelDefBuilder(builder);
        check(status);
        status = g_ep_api->KernelRegistry_AddKernel(registry, kernel_def, &create_ep_kernel,
                                                    const_cast<KernelEntry*>(&entry));
        g_ep_api->ReleaseKernelDef(kernel_def);
        check(status);
      }
    }
  } catch (...) {
    g_ep_api->ReleaseKernelRegistry(registry);
    throw;
  }
  return registry;
}

// ---- fused QDQ units

// The compute of one fused DequantizeLinear -> AveragePool -> QuantizeLinear node: the QLinearAveragePool kernel
// with the unit's parameters; its state is itself.
struct FusedCompute : OrtNodeComputeInfo {
  std::unique_ptr<OpKernel> kernel;

  explicit FusedCompute(std::unique_ptr<OpKernel> k) : OrtNodeComputeInfo{}, kernel(std::move(k)) {
    ort_version_supported = kEpOrtApiVersion;
    CreateState = [](OrtNodeComputeInfo* self, OrtNodeComputeContext*, void** state) noexcept -> OrtStatus* {
      *state = self;
      return nullptr;
    };
    Compute = [](OrtNodeComputeInfo*, void* state, OrtKernelContext* ctx) noexcept {
      return guarded([&] {
        call_counter(qlinear_row()).fetch_add(1, std::memory_order_relaxed);
        static_cast<FusedCompute*>(state)->kernel->compute(ctx);
      });
    };
    ReleaseState = [](OrtNodeComputeInfo*, void*) noexcept {};
  }

  static size_t qlinear_row() {
    static const size_t row = [] {
      for (size_t i = 0; i < op_table().size(); ++i)
        if (std::string(op_table()[i].name) == "QLinearAveragePool") return i;
      return size_t{0};
    }();
    return row;
  }
};

// ---- the EP

class Factory;

std::string config_value(const OrtSessionOptions* options, const std::string& key, const std::string& fallback) {
  int has = 0;
  check(g_api->HasSessionConfigEntry(options, key.c_str(), &has));
  if (!has) return fallback;
  size_t size = 0;
  OrtStatus* probe = g_api->GetSessionConfigEntry(options, key.c_str(), nullptr, &size);
  if (probe != nullptr) g_api->ReleaseStatus(probe);
  std::string value(size, '\0');
  check(g_api->GetSessionConfigEntry(options, key.c_str(), value.data(), &size));
  value.resize(size > 0 ? size - 1 : 0);
  return value;
}

// The provider options the EP reads (EpOptions), set with add_provider_for_devices / AppendExecutionProvider_V2.
EpOptions read_options(const OrtSessionOptions* session) {
  // ORT files provider options under "ep.<EP name in lower case>."
  std::string prefix = std::string("ep.") + kEpName + ".";
  for (char& c : prefix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EpOptions options;
  auto flag = [&](const char* key, bool fallback) {
    const std::string value = config_value(session, prefix + key, fallback ? "1" : "0");
    if (value != "0" && value != "1") fail("onnx-pools: provider option '", key, "' must be 0 or 1, got '", value, "'");
    return value == "1";
  };
  options.ort_layout = flag("ort_layout", true);
  options.qdq = flag("qdq", true);
  const std::string float16 = config_value(session, prefix + "float16", "auto");
  if (float16 != "auto" && float16 != "all")
    fail("onnx-pools: provider option 'float16' must be 'auto' or 'all', got '", float16, "'");
  options.float16_all = float16 == "all";
  std::set<std::string> known;
  for (const OpDefinition& def : op_table()) known.insert(def.name);
  const std::string ops = config_value(session, prefix + "ops", "all");
  if (ops == "all") {
    options.ops = known;
  } else {
    std::stringstream stream(ops);
    for (std::string op; std::getline(stream, op, ',');) {
      if (op.empty()) continue;
      if (!known.count(op)) fail("onnx-pools: provider option 'ops' names unknown op '", op, "'");
      options.ops.insert(op);
    }
  }
  return options;
}

class Ep : public OrtEp {
 public:
  Ep(Factory& factory, EpOptions options);

 private:
  static OrtStatus* ORT_API_CALL get_capability(OrtEp* self, const OrtGraph* graph,
                                                OrtEpGraphSupportInfo* support) noexcept {
    return guarded([&] {
      Ep& me = *static_cast<Ep*>(self);
      std::lock_guard<std::mutex> lock(me.mutex_);
      claim_nodes(graph, support, me.options_, me.fused_);
      me.nhwc_pools_ = me.options_.ort_layout && qlinear_pool_beside_qlinear_conv(graph);
    });
  }

  static OrtStatus* ORT_API_CALL compile(OrtEp* self, const OrtGraph** graphs, const OrtNode** fused_nodes,
                                         size_t count, OrtNodeComputeInfo** infos, OrtNode** context_nodes) noexcept {
    for (size_t i = 0; i < count; ++i) infos[i] = nullptr;
    if (context_nodes != nullptr)
      for (size_t i = 0; i < count; ++i) context_nodes[i] = nullptr;
    return guarded([&] {
      Ep& me = *static_cast<Ep*>(self);
      std::lock_guard<std::mutex> lock(me.mutex_);
      for (size_t i = 0; i < count; ++i) infos[i] = me.compile_unit(graphs[i], fused_nodes[i]);
    });
  }

  // The fused node of one QDQ unit: its AveragePool's attributes and the parameters GetCapability read.
  OrtNodeComputeInfo* compile_unit(const OrtGraph* graph, const OrtNode* fused_node) {
    size_t outputs = 0, inputs = 0;
    check(g_api->Node_GetNumOutputs(fused_node, &outputs));
    check(g_api->Node_GetNumInputs(fused_node, &inputs));
    if (outputs != 1 || inputs != 1)
      fail("onnx-pools: a fused node with ", inputs, " inputs and ", outputs, " outputs");
    const OrtValueInfo* output = nullptr;
    check(g_api->Node_GetOutputs(fused_node, &output, 1));
    const char* output_name = nullptr;
    check(g_api->GetValueInfoName(output, &output_name));
    const auto unit = fused_.find(output_name ? output_name : "");
    if (unit == fused_.end()) fail("onnx-pools: no fused unit produces '", output_name ? output_name : "", "'");
    for (const OrtNode* node : graph_nodes(graph)) {
      const char* op = nullptr;
      check(g_api->Node_GetOperatorType(node, &op));
      if (op == nullptr || std::string(op) != "AveragePool") continue;
      const char* node_name = nullptr;
      check(g_api->Node_GetName(node, &node_name));
      const std::string label = std::string("QLinearAveragePool (fused DequantizeLinear -> AveragePool '") +
                                (node_name ? node_name : "") + "' -> QuantizeLinear)";
      const NodeAttributes attrs(node, label);
      return new FusedCompute(create_fixed_qlinear_average_pool(label, unit->second.type, attrs, unit->second.params));
    }
    fail("onnx-pools: a fused unit without its AveragePool");
  }

  Factory& factory_;
  EpOptions options_;
  std::mutex mutex_;
  std::map<std::string, FusedAveragePool> fused_;  // by the unit's output name
  // the last graph GetCapability saw has QLinearAveragePool nodes to run in NHWC (ShouldConvertDataLayoutForOp)
  bool nhwc_pools_ = false;
};

class Factory : public OrtEpFactory {
 public:
  Factory() : OrtEpFactory{} {
    ort_version_supported = kEpOrtApiVersion;
    GetName = [](const OrtEpFactory*) noexcept { return kEpName; };
    GetVendor = [](const OrtEpFactory*) noexcept { return kVendor; };
    GetVendorId = [](const OrtEpFactory*) noexcept -> uint32_t { return 0; };
    GetVersion = [](const OrtEpFactory*) noexcept { return kVersion; };
    GetSupportedDevices = [](OrtEpFactory* self, const OrtHardwareDevice* const* devices, size_t count,
                             OrtEpDevice** ep_devices, size_t max_ep_devices, size_t* ep_device_count) noexcept {
      *ep_device_count = 0;
      // one EP device, on the first CPU: the kernels run on ORT's CPU memory and intra-op threads
      for (size_t i = 0; i < count && max_ep_devices > 0; ++i) {
        if (g_api->HardwareDevice_Type(devices[i]) != OrtHardwareDeviceType_CPU) continue;
        OrtEpDevice* device = nullptr;
        if (OrtStatus* status = g_ep_api->CreateEpDevice(self, devices[i], nullptr, nullptr, &device)) return status;
        ep_devices[(*ep_device_count)++] = device;
        break;
      }
      return static_cast<OrtStatus*>(nullptr);
    };
    CreateEp = [](OrtEpFactory* self, const OrtHardwareDevice* const*, const OrtKeyValuePairs* const*, size_t,
                  const OrtSessionOptions* session, const OrtLogger*, OrtEp** ep) noexcept {
      *ep = nullptr;
      return guarded([&] { *ep = new Ep(*static_cast<Factory*>(self), read_options(session)); });
    };
    ReleaseEp = [](OrtEpFactory*, OrtEp* ep) noexcept { delete static_cast<Ep*>(ep); };
    // A CPU EP: ORT's CPU memory (no allocator, data transfer or stream of its own) and no custom-op domains. ORT
    // calls some of these without checking for null.
    CreateAllocator = [](OrtEpFactory*, const OrtMemoryInfo*, const OrtKeyValuePairs*,
                         OrtAllocator** allocator) noexcept {
      *allocator = nullptr;
      return g_api->CreateStatus(ORT_NOT_IMPLEMENTED, "onnx-pools: the EP uses ONNX Runtime's CPU allocator");
    };
    ReleaseAllocator = [](OrtEpFactory*, OrtAllocator*) noexcept {};
    CreateDataTransfer = [](OrtEpFactory*, OrtDataTransferImpl** transfer) noexcept {
      *transfer = nullptr;
      return static_cast<OrtStatus*>(nullptr);
    };
    IsStreamAware = [](const OrtEpFactory*) noexcept { return false; };
    CreateSyncStreamForDevice = [](OrtEpFactory*, const OrtMemoryDevice*, const OrtKeyValuePairs*,
                                   OrtSyncStreamImpl** stream) noexcept {
      *stream = nullptr;
      return static_cast<OrtStatus*>(nullptr);
    };
    CreateExternalResourceImporterForDevice = [](OrtEpFactory*, const OrtEpDevice*,
                                                 OrtExternalResourceImporterImpl** importer) noexcept {
      *importer = nullptr;
      return static_cast<OrtStatus*>(nullptr);
    };
    GetNumCustomOpDomains = [](OrtEpFactory*, size_t* count) noexcept {
      *count = 0;
      return static_cast<OrtStatus*>(nullptr);
    };
    GetCustomOpDomains = [](OrtEpFactory*, OrtCustomOpDomain**, size_t) noexcept {
      return static_cast<OrtStatus*>(nullptr);
    };
  }
  ~Factory() {
    if (registry_ != nullptr) g_ep_api->ReleaseKernelRegistry(registry_);
  }

  // One registry for every EP of the factory, made on first use.
  const OrtKernelRegistry* registry() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (registry_ == nullptr) registry_ = build_kernel_registry();
    return registry_;
  }

 private:
  std::mutex mutex_;
  OrtKernelRegistry* registry_ = nullptr;
};

Ep::Ep(Factory& factory, EpOptions options) : OrtEp{}, factory_(factory), options_(std::move(options)) {
  ort_version_supported = kEpOrtApiVersion;
  GetName = [](const OrtEp*) noexcept { return kEpName; };
  GetCapability = &Ep::get_capability;
  Compile = &Ep::compile;
  ReleaseNodeComputeInfos = [](OrtEp*, OrtNodeComputeInfo** infos, size_t count) noexcept {
    for (size_t i = 0; i < count; ++i) delete static_cast<FusedCompute*>(infos[i]);
  };
  // NHWC only for a graph with QLinearAveragePool nodes to convert: ORT asks before GetCapability (NCHW) and
  // again after it, and only the second answer has it transform the graph. (Preferring NHWC in every session made
  // ORT drop the EP's opset-1 pools: ORT's layout transformation does not run on such old opsets.)
  GetPreferredDataLayout = [](OrtEp* self, OrtEpDataLayout* layout) noexcept {
    *layout = static_cast<Ep*>(self)->nhwc_pools_ ? OrtEpDataLayout_NHWC : OrtEpDataLayout_NCHW;
    return static_cast<OrtStatus*>(nullptr);
  };
  // (asked after GetCapability has seen the graph: the QLinearAveragePool nodes are converted only in graphs where
  // they sit beside QLinearConvs; a lone one would only gain the Transposes)
  ShouldConvertDataLayoutForOp = [](OrtEp* self, const char* domain, const char* op, OrtEpDataLayout,
                                    int* convert) noexcept {
    *convert =
        static_cast<Ep*>(self)->nhwc_pools_ && std::string(domain) == "com.microsoft" && std::string(op) == kNhwcOp;
    return static_cast<OrtStatus*>(nullptr);
  };
  GetKernelRegistry = [](OrtEp* self, const OrtKernelRegistry** registry) noexcept {
    *registry = nullptr;
    return guarded([&] { *registry = static_cast<Ep*>(self)->factory_.registry(); });
  };
}

}  // namespace

const OrtApi* ort() { return g_api; }
const OrtEpApi* ep_api() { return g_ep_api; }

}  // namespace onnx_pools::ep

using namespace onnx_pools;

// ORT >= 1.24 calls these when the library is registered as an execution provider library
// (RegisterExecutionProviderLibrary); the custom-op entry point RegisterCustomOps is independent of them.
ONNX_POOLS_EXPORT OrtStatus* CreateEpFactories(const char*, const OrtApiBase* api_base, const OrtLogger*,
                                               OrtEpFactory** factories, size_t max_factories, size_t* count) {
  *count = 0;
  if (OrtStatus* status = init_ort_api(api_base)) return status;
  int major = 0, minor = 0;
  std::sscanf(api_base->GetVersionString(), "%d.%d", &major, &minor);
  // (checked before GetApi(24): older ORT prints a message for an API version it does not have)
  if (major == 1 && minor < 24)
    return g_ort->CreateStatus(ORT_FAIL,
                               "onnx-pools: the execution provider needs ONNX Runtime 1.24 or newer (kernel "
                               "registries); with older versions register the library as a custom-op library");
  return guarded([&] {
    if (ep::g_api == nullptr) {
      const OrtApi* api = api_base->GetApi(ep::kEpOrtApiVersion);
      if (api == nullptr) fail("onnx-pools: ONNX Runtime ", api_base->GetVersionString(), " has no C API 24");
      ep::g_ep_api = api->GetEpApi();
      ep::g_api = api;
    }
    if (max_factories < 1) fail("onnx-pools: ONNX Runtime has no room for the EP factory");
    factories[0] = new ep::Factory();
    *count = 1;
  });
}

ONNX_POOLS_EXPORT OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  delete static_cast<ep::Factory*>(factory);
  return nullptr;
}

// The EP's name, for the Python loader (onnx_pools.get_ep_name()).
ONNX_POOLS_EXPORT const char* onnx_pools_ep_name() { return ep::kEpName; }
