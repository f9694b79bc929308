// GetCapability's choices: which nodes of a graph the plugin EP takes, and the QDQ average-pool units it fuses.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "ort/ep/provider.h"

namespace onnx_pools::ep {

// A fused DequantizeLinear -> AveragePool -> QuantizeLinear unit: the quantized element type and the parameters
// read from its constant scalar scales and zero points (count_include_pad comes from the pool's attributes).
struct FusedAveragePool {
  ONNXTensorElementDataType type;
  QLinearParams params;
};

// The nodes of `graph`, in ORT's order.
std::vector<const OrtNode*> graph_nodes(const OrtGraph* graph);

// Adds the nodes of `graph` the EP takes to `support`: single nodes with a kernel in the EP's registry (after the
// choices of `options`), and fused QDQ units, recorded in `fused` by the name of the unit's output.
void claim_nodes(const OrtGraph* graph, OrtEpGraphSupportInfo* support, const EpOptions& options,
                 std::map<std::string, FusedAveragePool>& fused);

// Whether `graph` has an NCHW com.microsoft.QLinearAveragePool (channels_last 0) fed by or feeding a QLinearConv:
// ORT's CPU provider runs QLinearConv graphs in NHWC, so such a pool is best run in NHWC too.
bool qlinear_pool_beside_qlinear_conv(const OrtGraph* graph);

}  // namespace onnx_pools::ep
