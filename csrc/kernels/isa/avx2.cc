// Kernels built for the avx2 instruction set (flags in CMakeLists.txt).
#define ONNX_POOLS_ISA avx2
#include "kernels/isa/table_impl.h"
