// Kernels built for the avx512 instruction set (flags in CMakeLists.txt).
#define ONNX_POOLS_ISA avx512
#include "kernels/isa/table_impl.h"
