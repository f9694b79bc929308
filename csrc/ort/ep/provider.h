// The plugin execution provider (ONNX Runtime >= 1.24): the library's kernels in an EP kernel registry, and the
// QDQ average-pool units it fuses. The library exports CreateEpFactories / ReleaseEpFactory (provider.cc) beside
// RegisterCustomOps; ORT below 1.24 never calls them.
#pragma once
#include <onnxruntime_c_api.h>
// (onnxruntime_c_api.h includes onnxruntime_ep_c_api.h, which has no include guard of its own)

#include <cstdint>
#include <set>
#include <string>

namespace onnx_pools::ep {

// The EP's name: what get_ep_devices() lists and kernels are registered for.
inline constexpr const char* kEpName = "OnnxPoolsExecutionProvider";

// The C API version whose functions the EP calls and whose structs it fills: 24 (ONNX Runtime 1.24), the first
// with kernel registries, whatever version the headers declare.
inline constexpr uint32_t kEpOrtApiVersion = 24;

// GetApi(kEpOrtApiVersion) and its EP API, set by CreateEpFactories.
const OrtApi* ort();
const OrtEpApi* ep_api();

// The EP's choices, from its provider options (session config entries "ep.onnxpoolsexecutionprovider.<key>").
struct EpOptions {
  // "ort_layout" (default 1): nodes that ORT's own graph rewrites run faster are left to ORT: on x86-64, a float32
  // GlobalAveragePool / GlobalMaxPool fed by a Conv (directly or through ops ORT keeps in its blocked NCHWc layout),
  // which ORT's layout rewrite (level ALL) pools in that layout, and int8 QDQ average-pool units (ORT's int8 ->
  // uint8 QDQ rewrite needs their QuantizeLinear); everywhere, a quantized average pool (QDQ unit or
  // QLinearAveragePool) of at most 4 window elements, which ORT's NHWC quantized layout runs without the Transposes
  // a node the EP takes would get, and a float pool inside a DequantizeLinear -> pool -> QuantizeLinear group,
  // which ORT fuses into its QLinear op. And a QLinearAveragePool beside QLinearConvs (which ORT runs in NHWC) is
  // taken in ORT's NHWC form (the EP prefers NHWC in such a graph, for that op alone). 0: taken like any other node, in
  // its own layout (for sessions below level ALL).
  bool ort_layout = true;
  // "float16" (default "auto"): a float16 GlobalAveragePool / GlobalMaxPool fed by a compute node (not a Cast) is
  // left to ORT, which runs it in float between the casts it puts around its float16 neighbours anyway (float16
  // LpPool / GlobalLpPool are taken: ORT's float kernels for them are slow); "all": every float16 node is taken.
  bool float16_all = false;
  // "qdq" (default 1): DequantizeLinear -> AveragePool -> QuantizeLinear units (int8/uint8, scalar parameters) run
  // as one fused node on the QLinearAveragePool kernel.
  bool qdq = true;
  // "ops" (default all): comma-separated op names (op_table()) the EP takes.
  std::set<std::string> ops;
};

}  // namespace onnx_pools::ep
