// The session config keys RegisterCustomOps reads and the default-op policy, written here only: the Python loader
// reads both from the library (onnx_pools_config_key, onnx_pools_op_taken_by_default in registration.cc).
#pragma once

namespace onnx_pools {

// The ops a session takes over: "all", or a comma-separated list of op names (default: taken_by_default).
constexpr const char* kOpsConfigKey = "onnx_pools.ops";
// The element types the kernels take: "all" (the default) or a comma-separated list of type names.
constexpr const char* kTypesConfigKey = "onnx_pools.types";
// "1" (the default): ORT's NCHWc rewrite may take GlobalAveragePool / GlobalMaxPool nodes; "0": never.
constexpr const char* kOrtLayoutConfigKey = "onnx_pools.ort_layout";

// Whether an op of this domain is taken without a session config naming it: the ops of the standard domain are,
// com.microsoft's are not (registration.cc's selected_ops says why).
inline bool taken_by_default(const char* domain) { return domain[0] == '\0'; }

}  // namespace onnx_pools
