// The ops: what each reads from the node, how it checks its inputs, and how it splits work over ORT's
// intra-op threads. The arithmetic lives in the kernels (kernels.h).
#pragma once
#include <memory>

#include "ort_api.h"

namespace onnx_pools {

enum class OpKind { GlobalAveragePool, GlobalMaxPool, GlobalLpPool, LpPool, QLinearAveragePool, Count };

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual void compute(OrtKernelContext* ctx) = 0;
};

// Reads and checks the node's attributes; throws Error (reported when the session is created).
std::unique_ptr<OpKernel> create_kernel(OpKind kind, const char* op_name, ONNXTensorElementDataType type,
                                        const OrtKernelInfo* info);

// Exact output shape at load time; leaves the shape unknown when the input's is or the attributes don't fit.
void infer_output_shape(OpKind kind, const char* op_name, OrtShapeInferContext* ctx);

}  // namespace onnx_pools
