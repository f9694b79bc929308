// The ops: one row each in op_table() (ops.cc), with what each reads from the node, how it checks its inputs, and
// how it splits work over ORT's intra-op threads. The arithmetic lives in the kernels (kernels.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/element_types.h"
#include "ort/attributes.h"
#include "ort/ort_api.h"

namespace onnx_pools {

struct QLinearParams;

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual void compute(OrtKernelContext* ctx) = 0;
};

// One input of an op: its element type is the kernel's type ("T") or always float; optional or not.
struct OpInput {
  bool element_typed;
  bool optional;
};

// How shape inference gets the output shape from the input's.
enum class OutputShape {
  Global,        // N x C x 1 x ... x 1
  Windowed,      // N x C x (the pool geometry of each spatial axis)
  WindowedNhwc,  // as Windowed, or N x (spatial axes) x C when the attribute channels_last is 1
};

// Makes the kernel of one node: reads and checks its attributes; throws Error (reported when the session is created).
// `op` names the op and the node for messages.
using KernelFactory = std::unique_ptr<OpKernel> (*)(const std::string& op, ONNXTensorElementDataType type,
                                                    const AttributeReader& attrs);

struct OpDefinition {
  const char* domain;
  const char* name;
  const char* versions;  // the op's versions in its domain ("1,22"): one kernel serves them all
  TypeFamily types;      // one kernel per element type of that family (element_types.h)
  std::vector<OpInput> inputs;
  OutputShape output_shape;
  KernelFactory create;
  // ORT's NCHWc layout rewrite (x86-64, level ALL) has its own blocked kernel for this op and takes nodes whose
  // schema says since-version 1: registered so by default (see registration.cc), ORT keeps Conv-fed pools in its
  // blocked layout instead of converting their whole input back to NCHW for a custom kernel.
  bool ort_blocked_layout = false;
};

// The ops the library implements; registration, the call counters and the Python loader all read this table.
const std::vector<OpDefinition>& op_table();

std::unique_ptr<OpKernel> create_kernel(const OpDefinition& def, ONNXTensorElementDataType type,
                                        const OrtKernelInfo* info);

// Exact output shape at load time; leaves the shape unknown when the input's is or the attributes don't fit.
void infer_output_shape(const OpDefinition& def, OrtShapeInferContext* ctx);

// Sets g_ort (GetApi(kOrtApiVersion)) and the optional entry points of newer ORT versions; both entry points (custom
// ops, plugin EP) call it first. nullptr, or the error to return to ORT.
OrtStatus* init_ort_api(const OrtApiBase* api_base);

// The calls of op_table()[row] in this process, counted by both entry points.
std::atomic<uint64_t>& call_counter(size_t row);

// QLinearAveragePool with its quantization parameters fixed at load (the plugin EP's fused DequantizeLinear ->
// AveragePool -> QuantizeLinear): reads only input X. attrs are AveragePool's.
std::unique_ptr<OpKernel> create_fixed_qlinear_average_pool(const std::string& op, ONNXTensorElementDataType type,
                                                            const AttributeReader& attrs, const QLinearParams& params);

}  // namespace onnx_pools
