// onnx-pools from C++: register libonnx_pools.so into Ort::SessionOptions, run bundled models, check the outputs
// against stock ONNX Runtime (the same model in a session without the library) and check that the library's
// kernel ran (its call counter, read from the copy of the library ORT loaded). Both routes: the custom-op library
// (every ONNX Runtime from 1.21) and, with ONNX Runtime 1.24 or newer, the same file as a plugin execution provider.
//
//   onnx_pools_example /path/to/libonnx_pools.so /path/to/models
//
// Exit status 0 when every check passed.
#include <dlfcn.h>

// The headers may be newer than the runtime (the EP calls need headers of C API 24 or newer): the C++ wrappers are
// initialised with the newest C API the running ONNX Runtime has that this program needs (main()), and every call
// made on a runtime older than 1.24 must be one of C API 21 (ONNX Runtime 1.21): a newer function's slot lies past
// the end of an older runtime's OrtApi table, so calling it is undefined (garbage results or SIGSEGV).
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// The library's C entry points for its counters (see csrc/ort/registration.cc).
struct Counters {
  void* handle = nullptr;
  int (*op_count)() = nullptr;
  const char* (*op_name)(int) = nullptr;
  uint64_t (*call_count)(int) = nullptr;

  // The library as ORT loaded it (RTLD_NOLOAD: no second copy), kept loaded while we read it.
  explicit Counters(const std::string& library) {
    handle = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) throw std::runtime_error("the library is not loaded: " + library);
    op_count = reinterpret_cast<int (*)()>(dlsym(handle, "onnx_pools_op_count"));
    op_name = reinterpret_cast<const char* (*)(int)>(dlsym(handle, "onnx_pools_op_name"));
    call_count = reinterpret_cast<uint64_t (*)(int)>(dlsym(handle, "onnx_pools_call_count"));
    if (!op_count || !op_name || !call_count) throw std::runtime_error("counter entry points not found");
  }
  uint64_t calls(const std::string& op) const {
    for (int i = 0; i < op_count(); ++i)
      if (op == op_name(i)) return call_count(i);
    throw std::runtime_error("unknown op " + op);
  }
};

std::vector<float> run(Ort::Env& env, const std::string& model, const Ort::SessionOptions& options,
                       std::vector<float>& x, const std::vector<int64_t>& shape) {
  Ort::Session session(env, model.c_str(), options);
  Ort::AllocatorWithDefaultOptions allocator;
  Ort::AllocatedStringPtr input_name = session.GetInputNameAllocated(0, allocator);
  Ort::AllocatedStringPtr output_name = session.GetOutputNameAllocated(0, allocator);
  const char* inputs[] = {input_name.get()};
  const char* outputs[] = {output_name.get()};
  Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  Ort::Value input = Ort::Value::CreateTensor<float>(memory, x.data(), x.size(), shape.data(), shape.size());
  std::vector<Ort::Value> y = session.Run(Ort::RunOptions{nullptr}, inputs, &input, 1, outputs, 1);
  // GetTensorMutableData (C API 1), not GetTensorData: that one is C API 23, and with an older runtime the C++
  // wrapper would call through a slot past the end of the runtime's OrtApi table.
  const float* data = y[0].GetTensorMutableData<float>();
  return std::vector<float>(data, data + y[0].GetTensorTypeAndShapeInfo().GetElementCount());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LIBRARY (libonnx_pools.so) MODELS_DIR\n", argv[0]);
    return 2;
  }
  const std::string library = argv[1], models = argv[2];
  struct Case {
    const char* file;
    const char* op;
    std::vector<int64_t> shape;
  };
  const Case cases[] = {{"cnn_gap_f32.onnx", "GlobalAveragePool", {1, 8, 16, 16}},
                        {"cnn_lppool2d_f32.onnx", "LpPool", {1, 8, 16, 16}}};
  int major = 0, minor = 0;
  std::sscanf(OrtGetApiBase()->GetVersionString(), "%d.%d", &major, &minor);
  const bool ep_route = major > 1 || minor >= 24;  // plugin EPs with kernel registries: ONNX Runtime 1.24
  const OrtApi* api = OrtGetApiBase()->GetApi(ep_route ? 24 : 21);
  if (api == nullptr) {
    std::fprintf(stderr, "needs ONNX Runtime 1.21 or newer\n");
    return 1;
  }
  Ort::InitApi(api);
  try {
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "onnx-pools-example");
    // The plugin-EP route: the library registered once per process as an execution provider library; its device
    // is then appended to a session's options (with provider options, all optional).
    std::vector<Ort::ConstEpDevice> ep_device;
    if (ep_route) {
      env.RegisterExecutionProviderLibrary("onnx_pools", library);
      for (const Ort::ConstEpDevice& device : env.GetEpDevices())
        if (std::string(device.EpName()) == "OnnxPoolsExecutionProvider") ep_device = {device};
      if (ep_device.empty()) throw std::runtime_error("no OnnxPoolsExecutionProvider device");
    }
    std::printf("onnxruntime %s\n", Ort::GetVersionString().c_str());
    std::mt19937 rng(0);
    std::normal_distribution<float> normal;
    int failures = 0;
    for (const Case& c : cases) {
      // The two calls every runtime has (C, C++, C#, Java, Python): a config entry, then the library.
      Ort::SessionOptions with_library;
      with_library.AddConfigEntry("onnx_pools.ops", c.op);  // optional: the ops the library takes over
      // optional: the library's kernel even where ORT's NCHWc layout rewrite would take a Conv-fed float32
      // GlobalAveragePool / GlobalMaxPool (the default leaves those to ORT, which is faster there)
      with_library.AddConfigEntry("onnx_pools.ort_layout", "0");
      with_library.RegisterCustomOpsLibrary(library.c_str());
      Ort::SessionOptions stock;

      size_t n = 1;
      for (int64_t d : c.shape) n *= static_cast<size_t>(d);
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng);

      const std::vector<float> expected = run(env, models + "/" + c.file, stock, x, c.shape);
      struct Route {
        const char* name;
        const Ort::SessionOptions* options;
      };
      std::vector<Route> routes = {{"custom-op library", &with_library}};
      Ort::SessionOptions with_ep;
      if (ep_route) {
        // optional provider options: "ort_layout" = "0" takes Conv-fed float32 global pools too (as above),
        // "ops" a comma-separated list, "float16" = "auto" | "all", "qdq" = "1" | "0"
        with_ep.AppendExecutionProvider_V2(env, ep_device, std::unordered_map<std::string, std::string>{
                                                               {"ort_layout", "0"}});
        routes.push_back({"execution provider", &with_ep});
      }
      for (const Route& route : routes) {
        Counters counters(library);
        const uint64_t before = counters.calls(c.op);
        const std::vector<float> y = run(env, models + "/" + c.file, *route.options, x, c.shape);
        const uint64_t ran = counters.calls(c.op) - before;
        float diff = y.size() == expected.size() ? 0.0f : INFINITY, scale = 0.0f;
        for (size_t i = 0; i < y.size() && i < expected.size(); ++i) {
          diff = std::max(diff, std::fabs(y[i] - expected[i]));
          scale = std::max(scale, std::fabs(expected[i]));
        }
        const bool ok = ran == 1 && diff <= 1e-5f * std::max(scale, 1.0f);
        std::printf("%s (%s): %s, %zu outputs, library %s kernel runs %llu, max |diff| vs stock ORT %.3g: %s\n",
                    c.file, route.name, c.op, y.size(), c.op, static_cast<unsigned long long>(ran), diff,
                    ok ? "ok" : "FAILED");
        failures += !ok;
      }
    }
    if (failures) return 1;
    std::printf("all ok\n");
    return 0;
  } catch (const Ort::Exception& e) {
    std::fprintf(stderr, "onnxruntime error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
