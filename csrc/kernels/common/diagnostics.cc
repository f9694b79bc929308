#include "kernels/common/diagnostics.h"

#include <atomic>

namespace onnx_pools {
namespace {

std::atomic<uint64_t>& lp_windows() {
  static std::atomic<uint64_t> count{0};
  return count;
}

std::atomic<uint64_t>& row_kernel_units() {
  static std::atomic<uint64_t> count{0};
  return count;
}

}  // namespace

uint64_t lp_windows_recomputed() { return lp_windows().load(std::memory_order_relaxed); }
void count_lp_windows_recomputed(uint64_t windows) { lp_windows().fetch_add(windows, std::memory_order_relaxed); }
uint64_t qlinear_row_kernel_units() { return row_kernel_units().load(std::memory_order_relaxed); }
void count_qlinear_row_kernel_units(uint64_t units) { row_kernel_units().fetch_add(units, std::memory_order_relaxed); }

}  // namespace onnx_pools
