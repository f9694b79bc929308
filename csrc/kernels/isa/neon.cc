// Kernels built for aarch64's Advanced SIMD (NEON), baseline on every aarch64 CPU: no flags (CMakeLists.txt).
// The generic kernels (GCC vector extensions, which GCC maps to NEON) plus the intrinsics of simd_neon.h.
#define ONNX_POOLS_NEON_INTRINSICS 1
#define ONNX_POOLS_ISA neon
#include "kernels/isa/table_impl.h"
