// The library's user-facing error: geometry's checks and the ort layer throw it, and the ort layer hands its message
// to ORT (ort_api.h's guarded). Its message names the op and the attribute or input at fault.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace onnx_pools {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(concat(std::forward<Parts>(parts)...));
}

}  // namespace onnx_pools
