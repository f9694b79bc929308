// Counters of the kernels' slow and fast paths, for tests: they check that a path was or was not taken, which the
// outputs alone cannot show. Process-wide, relaxed: counts, not a synchronisation.
#pragma once
#include <cstdint>

namespace onnx_pools {

// LpPool windows recomputed exactly (scaled, in double) because their fast sums could not be trusted.
uint64_t lp_windows_recomputed();
void count_lp_windows_recomputed(uint64_t windows);

// QLinearAveragePool units (NCHW planes or NHWC images) pooled by the 3x3 row kernel (qlinear/rows3x3.h), which
// each path takes by its own rule.
uint64_t qlinear_row_kernel_units();
void count_qlinear_row_kernel_units(uint64_t units);

}  // namespace onnx_pools
