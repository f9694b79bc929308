// Counters of the kernels' slow paths, for tests: they check that a path was or was not taken, which the outputs
// alone cannot show. Process-wide, relaxed: counts, not a synchronisation.
#pragma once
#include <cstdint>

namespace onnx_pools {

// LpPool windows recomputed exactly (scaled, in double) because their fast sums could not be trusted.
uint64_t lp_windows_recomputed();
void count_lp_windows_recomputed(uint64_t windows);

}  // namespace onnx_pools
