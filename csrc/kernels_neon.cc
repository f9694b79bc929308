// Kernels built for aarch64's Advanced SIMD (NEON), baseline on every aarch64 CPU: no flags (CMakeLists.txt).
#define ONNX_POOLS_ISA neon
#include "kernels_impl.h"
