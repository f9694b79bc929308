// The p of an Lp norm as the kernels take it: shared by the kernel table (kernels.h) and the Lp arithmetic
// (lp_math.h), which sits below the table.
#pragma once

namespace onnx_pools {

// p of an Lp norm, with the integer value when p is a small whole number (the fast paths).
struct LpNorm {
  double p = 2.0;
  int integer_p = 2;  // 0 when p is not a whole number in [1, 16]
};

}  // namespace onnx_pools
