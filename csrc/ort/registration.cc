// Registration: the op table (ops.cc) x the element types of each op's family (onnx_types.h), turned into ORT
// custom ops. Also the C entry points the Python loader reads (the tables, call counters, chosen instruction set).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "geometry/error.h"
#include "kernels/common/diagnostics.h"
#include "kernels/kernels.h"
#include "ort/config.h"
#include "ort/onnx_types.h"
#include "ort/ops.h"
#include "ort/ort_api.h"

#define ONNX_POOLS_EXPORT extern "C" __attribute__((visibility("default")))

namespace onnx_pools {

// ONNX Runtime before 1.24 dereferences a null input type while building the shape-inference context of a custom
// op node that omits an optional input (OrtShapeInferContext's constructor): no shape inference there for ops
// with optional inputs.
bool g_shape_inference_with_optional_inputs = true;

// ONNX Runtime before 1.32 fails to match kernels for a node whose type is registered only schema-only under a
// custom op of since-version 1 (ORT's NCHWc rewrite's version). There, leaving a type out costs that rewrite.
bool g_schema_only_types_at_blocked_start = true;

// Whether ORT's CPU provider runs float16 Conv and pools in float16 itself (its NHWC float16 kernels): on aarch64
// CPUs with FP16 vector arithmetic (HWCAP_ASIMDHP), as ORT decides. There a float16 pool's neighbours are float16
// nodes, not float ones between casts, so leaving float16 out of the kernels would add casts instead of saving them,
// and would keep ORT's NhwcTransformer from taking float16 GlobalAveragePool as it does in stock ORT.
static bool ort_runs_float16_natively() {
#if defined(__aarch64__) && defined(__linux__)
  static const bool native = (getauxval(AT_HWCAP) & (1UL << 10)) != 0;  // HWCAP_ASIMDHP
  return native;
#else
  return false;
#endif
}

// Calls of each op of op_table(), by row.
static std::atomic<uint64_t>* call_counters() {
  static const std::unique_ptr<std::atomic<uint64_t>[]> counters(new std::atomic<uint64_t>[op_table().size()]());
  return counters.get();
}

std::atomic<uint64_t>& call_counter(size_t row) { return call_counters()[row]; }

namespace {

// What ORT holds for one node: the kernel and the op it counts as.
struct NodeKernel {
  std::atomic<uint64_t>* calls;
  std::unique_ptr<OpKernel> kernel;
};

// An ORT custom op for one (op, element type) of the table.
// An execution provider no session has. A type left out by `onnx_pools.types` is still registered for it: ORT
// builds a custom op's schema from the types of every kernel registered under its name, so the model still
// validates, while no kernel for the CPU provider matches, and ORT casts the node to float as it does for ops
// without a float16 kernel of its own.
constexpr const char* kSchemaOnlyProvider = "onnx_pools.SchemaOnly";

struct CustomOp : OrtCustomOp {
  const OpDefinition* def;
  const ElementType* element;
  ONNXTensorElementDataType type;
  bool schema_only;
  int start_version;  // 0, or 1 to let ORT's NCHWc rewrite take the node (OpDefinition::ort_blocked_layout)

  CustomOp(const OpDefinition* d, const ElementType* t, bool schema, int start)
      : OrtCustomOp{}, def(d), element(t), type(t->onnx), schema_only(schema), start_version(start) {
    version = kOrtApiVersion;  // ORT reads only the OrtCustomOp members of that version
    GetName = [](const OrtCustomOp* op) { return self(op).def->name; };
    GetExecutionProviderType = [](const OrtCustomOp* op) -> const char* {
      return self(op).schema_only ? kSchemaOnlyProvider : nullptr;  // nullptr: CPU
    };
    GetInputTypeCount = [](const OrtCustomOp* op) { return self(op).def->inputs.size(); };
    GetInputType = [](const OrtCustomOp* op, size_t i) {
      return self(op).def->inputs[i].type == InputType::Element ? self(op).type : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    };
    GetInputCharacteristic = [](const OrtCustomOp* op, size_t i) {
      return self(op).def->inputs[i].presence == Presence::Optional ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
    };
    GetOutputTypeCount = [](const OrtCustomOp*) -> size_t { return 1; };
    GetOutputType = [](const OrtCustomOp* op, size_t) { return self(op).type; };
    GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
    GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
    // One kernel serves every opset of the op: version differences are handled inside it.
    GetStartVersion = [](const OrtCustomOp* op) { return self(op).start_version; };
    GetEndVersion = [](const OrtCustomOp*) { return INT_MAX; };
    CreateKernelV2 = [](const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info, void** kernel) {
      return guarded([&] {
        const CustomOp& me = self(op);
        *kernel = new NodeKernel{&call_counter(me.def - op_table().data()), create_kernel(*me.def, me.type, info)};
      });
    };
    KernelComputeV2 = [](void* kernel, OrtKernelContext* ctx) {
      return guarded([&] {
        NodeKernel* node = static_cast<NodeKernel*>(kernel);
        node->calls->fetch_add(1, std::memory_order_relaxed);
        node->kernel->compute(ctx);
      });
    };
    KernelDestroy = [](void* kernel) { delete static_cast<NodeKernel*>(kernel); };
    bool has_optional = false;
    for (const OpInput& input : d->inputs) has_optional = has_optional || input.presence == Presence::Optional;
    if (has_optional && !g_shape_inference_with_optional_inputs) return;
    InferOutputShapeFn = [](const OrtCustomOp* op, OrtShapeInferContext* ctx) -> OrtStatus* {
      // Best effort: a model the kernel would reject still loads here, and the kernel names the problem.
      try {
        infer_output_shape(*self(op).def, ctx);
      } catch (...) {
      }
      return nullptr;
    };
  }

  static const CustomOp& self(const OrtCustomOp* op) { return *static_cast<const CustomOp*>(op); }
};

// Every (op, type) custom op, for the CPU provider and schema-only, built once and alive for the life of the process;
// the ops ORT's NCHWc rewrite has twice, with start version 0 and 1.
const std::vector<CustomOp>& all_custom_ops() {
  static const std::vector<CustomOp> ops = [] {
    std::vector<CustomOp> v;
    for (int start : {0, 1})
      for (bool schema_only : {false, true})
        for (const OpDefinition& def : op_table())
          for (const ElementType& t : kElementTypes)
            if (t.family == def.types && (start == 0 || def.ort_blocked_layout))
              v.emplace_back(&def, &t, schema_only, start);
    return v;
  }();
  return ops;
}

// Domains handed to sessions must outlive them: they are kept, one set per selection, until the library is
// unloaded (ORT unloads it with the last SessionOptions that registered it, or the process ends).
struct Domains {
  std::map<std::string, std::vector<OrtCustomOpDomain*>> by_selection;
  ~Domains() {
    for (auto& entry : by_selection)
      for (OrtCustomOpDomain* domain : entry.second) g_ort->ReleaseCustomOpDomain(domain);
  }
};
std::mutex g_domains_mutex;
Domains g_domains;

// The session config entry `key`, or nullptr-like false when absent.
bool config_entry(const OrtSessionOptions* options, const char* key, std::string& value) {
  int has = 0;
  check(g_ort->HasSessionConfigEntry(options, key, &has));
  if (!has) return false;
  size_t size = 0;
  OrtStatus* probe = g_ort->GetSessionConfigEntry(options, key, nullptr, &size);
  if (probe != nullptr) g_ort->ReleaseStatus(probe);
  value.assign(size, '\0');
  check(g_ort->GetSessionConfigEntry(options, key, value.data(), &size));
  value.resize(size > 0 ? size - 1 : 0);
  return true;
}

// The names of a comma-separated list, each checked against `known`.
std::set<std::string> name_list(const std::string& value, const std::set<std::string>& known, const char* key,
                                const char* what) {
  std::set<std::string> chosen;
  std::stringstream stream(value);
  for (std::string name; std::getline(stream, name, ',');) {
    const size_t b = name.find_first_not_of(" \t"), e = name.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    name = name.substr(b, e - b + 1);
    if (!known.count(name)) fail("onnx-pools: session config '", key, "' names unknown ", what, " '", name, "'");
    chosen.insert(name);
  }
  return chosen;
}

// The ops this session takes over. Default: the ops of the standard domain. "all", or a comma-separated list of
// names, in the session config entry also takes com.microsoft's, which only a model that imports com.microsoft
// survives: ORT's CreateCustomRegistry registers a custom op domain for opset versions 1 to 1000, a model that
// does not import com.microsoft then gets version 1000 for it, and the com.microsoft nodes ORT's own optimizations
// create at level EXTENDED and above (QLinearGlobalAveragePool, QLinearAdd, ... from QDQ units, FusedConv) are
// looked up at that version and not found. Nothing a library registers changes that version, and this function
// cannot see the model: the Python loader refuses such selections without a model that imports the domain.
std::set<std::string> selected_ops(const OrtSessionOptions* options) {
  std::set<std::string> all, standard;
  for (const OpDefinition& def : op_table()) {
    all.insert(def.name);
    if (taken_by_default(def.domain)) standard.insert(def.name);
  }
  std::string value;
  if (!config_entry(options, kOpsConfigKey, value)) return standard;
  if (value == "all") return all;
  return name_list(value, all, kOpsConfigKey, "op");
}

// The element types this session's kernels take. Leaving float16 out makes ORT run float16 nodes through its own
// casts on the float kernels. That is the default: ORT's CPU provider runs float16 compute nodes in float, and a
// float16 pool behind one would add a cast of the pool's whole input, so a Conv -> Relu -> pool float16 model would
// run slower than stock ORT. "all" takes float16 too (session_options(model=...) asks for it when every float16
// pool is fed by a graph input or a Cast). Before ORT 1.32 the default is every type: leaving one out there
// costs ORT's NCHWc rewrite of float32 global pools (see g_schema_only_types_at_blocked_start). Where ORT runs
// float16 natively (ort_runs_float16_natively) the default is every type too.
std::set<std::string> selected_types(const OrtSessionOptions* options) {
  std::set<std::string> all;
  for (const ElementType& t : kElementTypes) all.insert(t.name);
  std::string value;
  if (!config_entry(options, kTypesConfigKey, value)) {
    if (g_schema_only_types_at_blocked_start && !ort_runs_float16_natively()) all.erase("float16");
    return all;
  }
  if (value == "all") return all;
  return name_list(value, all, kTypesConfigKey, "element type");
}

// Whether ORT's NCHWc rewrite may take GlobalAveragePool / GlobalMaxPool nodes (start version 1; the default): a
// Conv-fed pool then stays in ORT's blocked layout, where the library's kernel would make ORT convert the pool's
// whole input back to NCHW first, which costs more than the pool. "0": the library's kernels for every node (the
// tests, call_counts, and session_options(ort_layout=False)).
bool ort_layout(const OrtSessionOptions* options) {
  std::string value;
  if (!config_entry(options, kOrtLayoutConfigKey, value)) return true;
  if (value != "0" && value != "1") fail("onnx-pools: session config '", kOrtLayoutConfigKey, "' must be 0 or 1");
  return value == "1";
}

void register_ops(OrtSessionOptions* options) {
  const std::set<std::string> chosen = selected_ops(options);
  const std::set<std::string> types = selected_types(options);
  // Since-version 1 before ORT 1.32 only when every type is taken: a type left schema-only with since-version 1
  // makes the kernel matching of those versions fail on such nodes (the ONNX schema's type string against the
  // custom op's), so a types selection there keeps the library's kernels for every node, as with
  // onnx_pools.ort_layout=0.
  const bool every_type = types.size() == std::size(kElementTypes);
  const int blocked_start = ort_layout(options) && (every_type || g_schema_only_types_at_blocked_start) ? 1 : 0;
  // An op taken registers every type: the chosen ones for the CPU provider, the others schema-only.
  auto taken = [&](const CustomOp& op) {
    const int start = op.def->ort_blocked_layout ? blocked_start : 0;
    return op.start_version == start && chosen.count(op.def->name) &&
           types.count(op.element->name) != static_cast<size_t>(op.schema_only);
  };
  // One set of domains per selection, made once and shared by every session that asks for it: ORT keeps only
  // pointers, and a domain made per registration would be held (leaked) for the life of the process.
  std::string key;
  for (const std::string& name : chosen) key += name + ",";
  key += ";";
  for (const std::string& type : types) key += type + ",";
  key += ";" + std::to_string(blocked_start);
  std::lock_guard<std::mutex> lock(g_domains_mutex);
  std::vector<OrtCustomOpDomain*>& domains = g_domains.by_selection[key];
  if (domains.empty()) {
    std::vector<std::string> names;
    for (const CustomOp& op : all_custom_ops()) {
      if (taken(op) && std::find(names.begin(), names.end(), op.def->domain) == names.end())
        names.push_back(op.def->domain);
    }
    for (const std::string& name : names) {
      OrtCustomOpDomain* domain = nullptr;
      check(g_ort->CreateCustomOpDomain(name.c_str(), &domain));
      domains.push_back(domain);
      for (const CustomOp& op : all_custom_ops()) {
        if (op.def->domain == name && taken(op)) check(g_ort->CustomOpDomain_Add(domain, const_cast<CustomOp*>(&op)));
      }
    }
  }
  for (OrtCustomOpDomain* domain : domains) check(g_ort->AddCustomOpDomain(options, domain));
}

// g_shape_reference when the running ONNX Runtime has it and it answers correctly for a tensor of known shape.
ShapeReferenceFn find_shape_reference(const OrtApiBase* api_base) {
  constexpr uint32_t kVersion = 24;  // the C API version that declares GetTensorElementTypeAndShapeDataReference
  const OrtApi* api = api_base->GetApi(kVersion);
  if (api == nullptr) return nullptr;
  ShapeReferenceFn fn;
#if ORT_API_VERSION >= 24
  fn = api->GetTensorElementTypeAndShapeDataReference;
#else
  // These headers predate API 24, so OrtApi has no member to name: the entry is read at its place in ORT's
  // (append-only) function table, index 414 (byte offset 3312), and trusted only after the self-test below.
  constexpr size_t kEntry = 414;
  std::memcpy(&fn, reinterpret_cast<const char*>(api) + kEntry * sizeof(void*), sizeof fn);
#endif
  if (fn == nullptr) return nullptr;
  OrtMemoryInfo* memory = nullptr;
  if (g_ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &memory) != nullptr) return nullptr;
  float data[30] = {};
  const int64_t shape[3] = {2, 3, 5};
  OrtValue* value = nullptr;
  OrtStatus* status = g_ort->CreateTensorWithDataAsOrtValue(memory, data, sizeof data, shape, 3,
                                                            ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &value);
  bool ok = status == nullptr;
  if (ok) {
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    const int64_t* dims = nullptr;
    size_t rank = 0;
    OrtStatus* s = fn(value, &type, &dims, &rank);
    ok = s == nullptr && type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT && rank == 3 && dims != nullptr && dims[0] == 2 &&
         dims[1] == 3 && dims[2] == 5;
    if (s != nullptr) g_ort->ReleaseStatus(s);
  } else {
    g_ort->ReleaseStatus(status);
  }
  if (value != nullptr) g_ort->ReleaseValue(value);
  g_ort->ReleaseMemoryInfo(memory);
  return ok ? fn : nullptr;
}

}  // namespace

OrtStatus* init_ort_api(const OrtApiBase* api_base) {
  // The C API version the library needs (kOrtApiVersion, 21), not the one of the headers it was built against:
  // newer functions are asked for only through GetApi(N) of the version that declares them.
  const OrtApi* api = api_base->GetApi(kOrtApiVersion);
  if (api == nullptr) {
    const OrtApi* oldest = api_base->GetApi(1);
    return oldest ? oldest->CreateStatus(ORT_FAIL, "onnx-pools needs ONNX Runtime 1.21 or newer") : nullptr;
  }
  g_ort = api;
  int major = 0, minor = 0;
  std::sscanf(api_base->GetVersionString(), "%d.%d", &major, &minor);
  const bool ort_1_24 = major > 1 || (major == 1 && minor >= 24);
  g_shape_inference_with_optional_inputs = ort_1_24;
  g_schema_only_types_at_blocked_start = major > 1 || (major == 1 && minor >= 32);
  // (asked only where it exists: older ORT prints a message for an API version it does not have)
  static const ShapeReferenceFn shape_reference = ort_1_24 ? find_shape_reference(api_base) : nullptr;
  g_shape_reference = shape_reference;
  return nullptr;
}

}  // namespace onnx_pools

using namespace onnx_pools;

ONNX_POOLS_EXPORT OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  if (OrtStatus* status = init_ort_api(api_base)) return status;
  return guarded([&] { register_ops(options); });
}

// The tables, for the Python loader (onnx_pools.OPS, onnx_pools.TYPES and the tests of the README's tables).
ONNX_POOLS_EXPORT int onnx_pools_op_count() { return static_cast<int>(op_table().size()); }
ONNX_POOLS_EXPORT const char* onnx_pools_op_name(int i) { return op_table().at(static_cast<size_t>(i)).name; }
ONNX_POOLS_EXPORT const char* onnx_pools_op_domain(int i) { return op_table().at(static_cast<size_t>(i)).domain; }
ONNX_POOLS_EXPORT const char* onnx_pools_op_versions(int i) { return op_table().at(static_cast<size_t>(i)).versions; }
ONNX_POOLS_EXPORT int onnx_pools_type_count() { return static_cast<int>(std::size(kElementTypes)); }
ONNX_POOLS_EXPORT const char* onnx_pools_type_name(int j) {
  return j >= 0 && j < onnx_pools_type_count() ? kElementTypes[j].name : nullptr;
}
// Whether op i has a kernel for element type j (numbered as by onnx_pools_type_name).
ONNX_POOLS_EXPORT int onnx_pools_op_takes_type(int i, int j) {
  return j >= 0 && j < onnx_pools_type_count() &&
         op_table().at(static_cast<size_t>(i)).types == kElementTypes[j].family;
}
// Whether the default types take float16 on this CPU whatever ORT's version (ort_runs_float16_natively): the one
// test, for the Python loader's choices too.
ONNX_POOLS_EXPORT int onnx_pools_ort_runs_float16_natively() { return ort_runs_float16_natively() ? 1 : 0; }
ONNX_POOLS_EXPORT uint64_t onnx_pools_call_count(int i) {
  op_table().at(static_cast<size_t>(i));  // the same range check as the names
  return call_counters()[i].load();
}
ONNX_POOLS_EXPORT void onnx_pools_reset_call_counts() {
  for (size_t i = 0; i < op_table().size(); ++i) call_counters()[i].store(0);
}
ONNX_POOLS_EXPORT const char* onnx_pools_isa() { return kernels().isa; }
ONNX_POOLS_EXPORT uint64_t onnx_pools_lp_windows_recomputed() { return lp_windows_recomputed(); }
ONNX_POOLS_EXPORT uint64_t onnx_pools_qlinear_row_kernel_units() { return qlinear_row_kernel_units(); }
// The session config keys RegisterCustomOps reads, by what they select ("ops", "types", "ort_layout"); nullptr for
// anything else.
ONNX_POOLS_EXPORT const char* onnx_pools_config_key(const char* what) {
  if (what == nullptr) return nullptr;
  const std::string name(what);
  if (name == "ops") return kOpsConfigKey;
  if (name == "types") return kTypesConfigKey;
  if (name == "ort_layout") return kOrtLayoutConfigKey;
  return nullptr;
}
// 1 when op i is taken without a session config naming it (taken_by_default), 0 when only on request.
ONNX_POOLS_EXPORT int onnx_pools_op_taken_by_default(int i) {
  return taken_by_default(op_table().at(static_cast<size_t>(i)).domain) ? 1 : 0;
}
