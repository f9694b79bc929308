// The per-ISA kernel headers (kernels/common/simd.h, simd_neon.h, lp_math.h, windows.h and the kernels of
// kernels/global/, kernels/lp/, kernels/qlinear/) are compiled once per instruction set: each kernels/isa/<isa>.cc
// defines ONNX_POOLS_ISA (portable, avx2, avx512, neon), includes kernels/isa/table_impl.h and is built with that
// set's flags. Each header puts its code in namespace onnx_pools::ONNX_POOLS_ISA::{anonymous}: internal linkage, so
// the linker never hands a copy built for a wide instruction set to another file's code. They allocate only through
// ScratchBuffer (kernels/common/scratch.h says why).
#pragma once

#if !defined(ONNX_POOLS_ISA)
#error "a per-ISA kernel header: define ONNX_POOLS_ISA (the instruction set's namespace) before including it"
#endif
