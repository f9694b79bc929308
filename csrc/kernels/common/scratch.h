// Scratch memory of the kernels. The per-ISA kernel files keep no std containers: a template instance such as a
// std::vector member, built there with that file's instruction-set flags, is a weak symbol the linker may also hand
// to the portable path. So the memory is allocated and zeroed in scratch.cc, built without ISA flags.
#pragma once
#include <cstddef>

namespace onnx_pools {

// Whether a ScratchBuffer's bytes start as zeros or as whatever the allocator gives.
enum class ScratchFill { Uninitialised, Zeroed };

class ScratchBuffer {
 public:
  explicit ScratchBuffer(size_t bytes);  // uninitialised
  ScratchBuffer(size_t bytes, ScratchFill fill);
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  template <class U>
  U* as() {
    return static_cast<U*>(data_);
  }

 private:
  void* data_;
};

// Internal linkage, as the kernels that use it (each TU its own copy, never one built for another ISA).
namespace {

// n values of T, zero-filled.
template <class T>
class ZeroedArray {
 public:
  explicit ZeroedArray(size_t n) : memory_(sizeof(T) * n, ScratchFill::Zeroed), data_(memory_.as<T>()) {}
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }

 private:
  ScratchBuffer memory_;
  T* const data_;
};

}  // namespace
}  // namespace onnx_pools
