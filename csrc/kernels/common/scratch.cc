#include "kernels/common/scratch.h"

#include <cstdlib>
#include <new>

namespace onnx_pools {

ScratchBuffer::ScratchBuffer(size_t bytes) : ScratchBuffer(bytes, ScratchFill::Uninitialised) {}
ScratchBuffer::ScratchBuffer(size_t bytes, ScratchFill fill)
    : data_(fill == ScratchFill::Zeroed ? std::calloc(bytes > 0 ? bytes : 1, 1) : std::malloc(bytes > 0 ? bytes : 1)) {
  if (data_ == nullptr) throw std::bad_alloc();
}
ScratchBuffer::~ScratchBuffer() { std::free(data_); }

}  // namespace onnx_pools
