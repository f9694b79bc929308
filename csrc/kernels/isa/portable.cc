// Kernels built for the portable instruction set (flags in CMakeLists.txt).
#define ONNX_POOLS_ISA portable
#include "kernels/isa/table_impl.h"
