#include "ort/ops.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "geometry/pool_geometry.h"
#include "kernels/kernels.h"

namespace onnx_pools {
namespace {

// ---- tensors ------------------------------------------------------------------------------------------------

// A tensor's dims: ORT's own array when ORT lends it (no allocation per run), else a copy.
class Shape {
 public:
  Shape() = default;
  Shape(Shape&& other) noexcept { *this = std::move(other); }
  Shape& operator=(Shape&& other) noexcept {
    const bool owned = other.dims_ == other.owned_.data();
    owned_ = std::move(other.owned_);  // a moved vector keeps its buffer
    dims_ = owned ? owned_.data() : other.dims_;
    rank_ = other.rank_;
    return *this;
  }
  void borrow(const int64_t* dims, size_t rank) {
    dims_ = dims;
    rank_ = rank;
  }
  void own(std::vector<int64_t> dims) {
    owned_ = std::move(dims);
    dims_ = owned_.data();
    rank_ = owned_.size();
  }
  size_t size() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t back() const { return dims_[rank_ - 1]; }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + rank_; }
  std::vector<int64_t> vector() const { return std::vector<int64_t>(begin(), end()); }

 private:
  std::vector<int64_t> owned_;
  const int64_t* dims_ = nullptr;
  size_t rank_ = 0;
};

struct Tensor {
  const void* data = nullptr;
  Shape shape;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
};

void read_type_and_shape(const OrtTensorTypeAndShapeInfo* info, Tensor& t) {
  size_t rank = 0;
  check(g_ort->GetDimensionsCount(info, &rank));
  std::vector<int64_t> dims(rank);
  check(g_ort->GetDimensions(info, dims.data(), rank));
  t.shape.own(std::move(dims));
  check(g_ort->GetTensorElementType(info, &t.type));
}

// nullopt-like: data == nullptr and empty type when an optional input is absent.
Tensor input(OrtKernelContext* ctx, size_t index, bool optional = false) {
  Tensor t;
  if (optional) {
    size_t count = 0;
    check(g_ort->KernelContext_GetInputCount(ctx, &count));
    if (index >= count) return t;
  }
  const OrtValue* value = nullptr;
  check(g_ort->KernelContext_GetInput(ctx, index, &value));
  if (value == nullptr) return t;
  if (g_shape_reference != nullptr) {
    const int64_t* dims = nullptr;
    size_t rank = 0;
    check(g_shape_reference(value, &t.type, &dims, &rank));
    t.shape.borrow(dims, rank);
  } else {
    OrtTensorTypeAndShapeInfo* info = nullptr;
    check(g_ort->GetTensorTypeAndShape(value, &info));
    read_type_and_shape(info, t);
    g_ort->ReleaseTensorTypeAndShapeInfo(info);
  }
  void* data = nullptr;
  check(g_ort->GetTensorMutableData(const_cast<OrtValue*>(value), &data));
  t.data = data;
  return t;
}

void* output(OrtKernelContext* ctx, const int64_t* dims, size_t rank) {
  OrtValue* value = nullptr;
  check(g_ort->KernelContext_GetOutput(ctx, 0, dims, rank, &value));
  void* data = nullptr;
  check(g_ort->GetTensorMutableData(value, &data));
  return data;
}

// Kernels read and write elements through typed pointers, which must be aligned to the element size. ORT's own
// buffers are; a user's (IOBinding over memory at any offset) may not be. Such a tensor goes through an aligned copy.
class AlignedIo {
 public:
  AlignedIo(const void* x, size_t x_bytes, void* y, size_t y_bytes, size_t element)
      : x_(x), y_(y), user_y_(y), y_bytes_(y_bytes) {
    if (reinterpret_cast<uintptr_t>(x) % element != 0) {
      x_copy_ = std::make_unique<ScratchBuffer>(x_bytes);
      std::memcpy(x_copy_->as<char>(), x, x_bytes);
      x_ = x_copy_->as<char>();
    }
    if (reinterpret_cast<uintptr_t>(y) % element != 0) {
      y_copy_ = std::make_unique<ScratchBuffer>(y_bytes);
      y_ = y_copy_->as<char>();
    }
  }
  const char* x() const { return static_cast<const char*>(x_); }
  char* y() const { return static_cast<char*>(y_); }
  void finish() const {
    if (y_copy_) std::memcpy(user_y_, y_, y_bytes_);
  }

 private:
  const void* x_;
  void* y_;
  void* user_y_;
  size_t y_bytes_;
  std::unique_ptr<ScratchBuffer> x_copy_, y_copy_;
};

template <class Dims>
std::string shape_text(const Dims& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void require_rank(const Tensor& x, const std::string& op) {
  if (x.shape.size() < 3) {
    fail(op, ": input 'X' must have rank >= 3 (N x C x D1 x ...), got shape ", shape_text(x.shape));
  }
}

// ---- threading ------------------------------------------------------------------------------------------------

// Cost weights of the work split, in elements read: an LpPool window element comes out of separable or streamed
// partial sums (about a quarter of a read each), and a QLinearAveragePool output (requantisation, tie marks) costs
// about four reads. Only the ratio to kMinChunkCost matters: it decides how many chunks a job is worth.
constexpr int64_t kLpWindowElementsPerRead = 4;
constexpr int64_t kQLinearOutputCost = 4;

// Splits [0, units) into chunks on the session's intra-op pool. Small jobs run inline: waking threads costs more.
// A template, so the inline case (every tiny tensor) costs no type erasure or allocation.
template <class Body>
void parallel_for(OrtKernelContext* ctx, int64_t units, int64_t cost_per_unit, const Body& body) {
  constexpr int64_t kMinChunkCost = 1 << 15;
  const int64_t total_cost = units * std::max<int64_t>(cost_per_unit, 1);
  int64_t chunks = std::min<int64_t>(units, std::max<int64_t>(1, total_cost / kMinChunkCost));
  chunks = std::min<int64_t>(chunks, 256);
  if (chunks <= 1) {
    body(int64_t{0}, units);
    return;
  }
  struct Job {
    const Body* body = nullptr;
    int64_t units = 0, chunks = 0;
    std::exception_ptr error;  // the first chunk's exception, rethrown as it was (an Error stays INVALID_ARGUMENT)
    std::atomic_flag error_taken = ATOMIC_FLAG_INIT;
  } job;
  job.body = &body;
  job.units = units;
  job.chunks = chunks;
  auto run_chunk = [](void* data, size_t i) {
    Job& j = *static_cast<Job*>(data);
    const int64_t begin = j.units * static_cast<int64_t>(i) / j.chunks;
    const int64_t end = j.units * (static_cast<int64_t>(i) + 1) / j.chunks;
    try {
      (*j.body)(begin, end);
    } catch (...) {  // nothing may unwind into ORT's threads
      if (!j.error_taken.test_and_set()) j.error = std::current_exception();
    }
  };
  check(g_ort->KernelContext_ParallelFor(ctx, run_chunk, static_cast<size_t>(chunks), 0, &job));
  if (job.error) std::rethrow_exception(job.error);
}

// ---- attributes shared by the ops --------------------------------------------------------------------------------

// The table row of a kernel's element type (registration only makes kernels for the types of the op's family).
const ElementType& element_type(ONNXTensorElementDataType onnx, TypeFamily family) {
  const ElementType* type = find_element_type(onnx);
  if (type == nullptr || type->family != family) throw Error("onnx-pools: unsupported element type");
  return *type;
}

// p is a FLOAT in version 1 of GlobalLpPool and LpPool and an INT from version 2; both are accepted.
LpNorm read_lp_norm(const AttributeReader& attrs, const std::string& op) {
  LpNorm lp;
  if (auto p = attrs.integer_if_int("p")) {
    lp.p = static_cast<double>(*p);
  } else if (auto p_real = attrs.real("p")) {
    lp.p = *p_real;
  }
  if (!(std::isfinite(lp.p) && lp.p > 0)) fail(op, ": attribute 'p' must be a finite number > 0, got ", lp.p);
  lp.integer_p = (lp.p == std::floor(lp.p) && lp.p >= 1 && lp.p <= 16) ? static_cast<int>(lp.p) : 0;
  return lp;
}

bool read_flag(const AttributeReader& attrs, const char* name, const std::string& op) {
  const int64_t value = attrs.integer(name).value_or(0);
  if (value != 0 && value != 1) fail(op, ": attribute '", name, "' must be 0 or 1, got ", value);
  return value == 1;
}

std::vector<int64_t> spatial_dims(const Shape& shape, bool channels_last) {
  return channels_last ? std::vector<int64_t>(shape.begin() + 1, shape.end() - 1)
                       : std::vector<int64_t>(shape.begin() + 2, shape.end());
}

// ---- the ops
// ----------------------------------------------------------------------------------------------------------

class GlobalPool final : public OpKernel {
 public:
  GlobalPool(Reduction reduction, std::string op, const ElementType& type, const AttributeReader& attrs)
      : reduction_(reduction), op_(std::move(op)), type_(type) {
    if (reduction == Reduction::Lp) lp_ = read_lp_norm(attrs, op_);
  }

  void compute(OrtKernelContext* ctx) override {
    const Tensor x = input(ctx, 0);
    require_rank(x, op_);
    const int64_t channels = checked_product({x.shape[0], x.shape[1]}, op_.c_str(), "input 'X'");
    const int64_t size = checked_product(x.shape.begin() + 2, x.shape.end(), op_.c_str(), "input 'X'");
    if (size == 0 && channels > 0) {
      fail(op_, ": input 'X' has an empty spatial dimension, shape ", shape_text(x.shape),
           "; there is nothing to pool");
    }
    // N x C x 1 x ... x 1, on the stack for the usual ranks (no allocation per run)
    int64_t small[8];
    std::vector<int64_t> large;
    int64_t* out_shape = small;
    if (x.shape.size() > 8) {
      large.resize(x.shape.size());
      out_shape = large.data();
    }
    out_shape[0] = x.shape[0];
    out_shape[1] = x.shape[1];
    for (size_t i = 2; i < x.shape.size(); ++i) out_shape[i] = 1;
    void* y = output(ctx, out_shape, x.shape.size());
    if (channels == 0) return;
    const GlobalPoolFn fn = kernels().global_pool[static_cast<int>(reduction_)][type_.index];
    const size_t bytes = type_.bytes;
    const AlignedIo io(x.data, static_cast<size_t>(channels * size) * bytes, y, static_cast<size_t>(channels) * bytes,
                       bytes);
    parallel_for(ctx, channels, size, [&](int64_t begin, int64_t end) {
      fn(io.x() + begin * size * bytes, io.y() + begin * bytes, end - begin, size, lp_);
    });
    io.finish();
  }

 private:
  Reduction reduction_;
  std::string op_;
  const ElementType& type_;  // a row of kElementTypes: its index is the FloatType
  LpNorm lp_;
};

class LpPool final : public OpKernel {
 public:
  LpPool(std::string op, const ElementType& type, const AttributeReader& attrs)
      : op_(std::move(op)),
        type_(type),
        attrs_(read_pool_attributes(attrs, op_.c_str())),
        lp_(read_lp_norm(attrs, op_)) {}

  void compute(OrtKernelContext* ctx) override {
    const Tensor x = input(ctx, 0);
    require_rank(x, op_);
    const PoolGeometry g = windowed_geometry(attrs_, spatial_dims(x.shape, false), op_.c_str());
    std::vector<int64_t> out_shape{x.shape[0], x.shape[1]};
    for (const AxisGeometry& axis : g.axes) out_shape.push_back(axis.out);
    const int64_t planes = checked_product({x.shape[0], x.shape[1]}, op_.c_str(), "input 'X'");
    // in bytes too: ORT's allocator would otherwise fail on the size without naming the op
    checked_product({checked_product(out_shape, op_.c_str(), "output 'Y'"), static_cast<int64_t>(type_.bytes)},
                    op_.c_str(), "output 'Y' (in bytes)");
    void* y = output(ctx, out_shape.data(), out_shape.size());
    if (planes == 0 || g.out_size == 0) return;
    const LpPoolFn fn = kernels().lp_pool[type_.index];
    const size_t bytes = type_.bytes;
    // cost per plane: a window costs at most its in-bounds elements (no overflow with huge kernels)
    const int64_t window_cost = std::min(g.kernel_size, g.in_size);
    const int64_t cost = g.out_size > (int64_t{1} << 40) / std::max<int64_t>(window_cost, 1)
                             ? (int64_t{1} << 40)
                             : g.in_size + g.out_size * window_cost / kLpWindowElementsPerRead;
    const AlignedIo io(x.data, static_cast<size_t>(planes * g.in_size) * bytes, y,
                       static_cast<size_t>(planes * g.out_size) * bytes, bytes);
    parallel_for(ctx, planes, cost, [&](int64_t begin, int64_t end) {
      fn(io.x() + begin * g.in_size * bytes, io.y() + begin * g.out_size * bytes, end - begin, g, lp_);
    });
    io.finish();
  }

 private:
  std::string op_;
  const ElementType& type_;  // its index is the FloatType
  PoolAttributes attrs_;
  LpNorm lp_;
};

class QLinearAveragePool final : public OpKernel {
 public:
  QLinearAveragePool(std::string op, const ElementType& type, const AttributeReader& attrs,
                     std::optional<QLinearParams> fixed = std::nullopt)
      : op_(std::move(op)),
        type_(type),
        attrs_(read_pool_attributes(attrs, op_.c_str())),
        count_include_pad_(read_flag(attrs, "count_include_pad", op_)),
        channels_last_(read_flag(attrs, "channels_last", op_)),
        fixed_(fixed) {}

  void compute(OrtKernelContext* ctx) override {
    const Tensor x = input(ctx, 0);
    require_rank(x, op_);
    QLinearParams q{};
    if (fixed_) {
      q = *fixed_;
    } else {
      q.x_scale = scale(ctx, 1, "x_scale");
      q.x_zero_point = zero_point(ctx, 2, "x_zero_point");
      q.y_scale = scale(ctx, 3, "y_scale");
      q.y_zero_point = zero_point(ctx, 4, "y_zero_point");
    }
    q.count_include_pad = count_include_pad_;

    const PoolGeometry g = windowed_geometry(attrs_, spatial_dims(x.shape, channels_last_), op_.c_str());
    const int64_t n = x.shape[0];
    const int64_t c = channels_last_ ? x.shape.back() : x.shape[1];
    std::vector<int64_t> out_shape{n};
    if (!channels_last_) out_shape.push_back(c);
    for (const AxisGeometry& axis : g.axes) out_shape.push_back(axis.out);
    if (channels_last_) out_shape.push_back(c);
    checked_product(out_shape, op_.c_str(), "output 'Y'");
    checked_product({g.largest_intermediate, std::max<int64_t>(c, 1), 8}, op_.c_str(), "an intermediate of the pool");
    void* y = output(ctx, out_shape.data(), out_shape.size());
    if (n == 0 || c == 0 || g.out_size == 0) return;

    const int k = type_.index;
    const int64_t bytes = static_cast<int64_t>(type_.bytes);
    if (channels_last_) {
      const QLinearPoolFn fn = kernels().qlinear_nhwc[k];
      parallel_for(ctx, n, (g.in_size + g.out_size * kQLinearOutputCost) * c, [&](int64_t begin, int64_t end) {
        fn(static_cast<const char*>(x.data) + begin * g.in_size * c * bytes,
           static_cast<char*>(y) + begin * g.out_size * c * bytes, end - begin, c, g, q);
      });
    } else {
      const QLinearPoolFn fn = kernels().qlinear_nchw[k];
      parallel_for(ctx, n * c, g.in_size + g.out_size * kQLinearOutputCost, [&](int64_t begin, int64_t end) {
        fn(static_cast<const char*>(x.data) + begin * g.in_size * bytes,
           static_cast<char*>(y) + begin * g.out_size * bytes, end - begin, 1, g, q);
      });
    }
  }

 private:
  static bool is_scalar(const Tensor& t) { return t.shape.empty() || (t.shape.size() == 1 && t.shape[0] == 1); }

  float scale(OrtKernelContext* ctx, size_t index, const char* name) const {
    const Tensor t = input(ctx, index, true);
    if (t.data == nullptr) fail(op_, ": input '", name, "' is required");
    if (!is_scalar(t))
      fail(op_, ": input '", name, "' must be a scalar (shape [] or [1]), got shape ", shape_text(t.shape));
    const float v = *static_cast<const float*>(t.data);
    if (!(std::isfinite(v) && v > 0)) fail(op_, ": input '", name, "' must be a finite number > 0, got ", v);
    return v;
  }

  int32_t zero_point(OrtKernelContext* ctx, size_t index, const char* name) const {
    const Tensor t = input(ctx, index, true);
    if (t.data == nullptr) return 0;  // an absent zero point is 0
    if (!is_scalar(t))
      fail(op_, ": input '", name, "' must be a scalar (shape [] or [1]), got shape ", shape_text(t.shape));
    switch (static_cast<QuantType>(type_.index)) {
#define ONNX_POOLS_READ_ZERO_POINT(e, T, onnx, name) \
  case QuantType::e: return *static_cast<const T*>(t.data);
      ONNX_POOLS_QUANT_TYPES(ONNX_POOLS_READ_ZERO_POINT)
#undef ONNX_POOLS_READ_ZERO_POINT
      default: fail(op_, ": unsupported element type");
    }
  }

  std::string op_;
  const ElementType& type_;  // its index is the QuantType
  PoolAttributes attrs_;
  bool count_include_pad_, channels_last_;
  std::optional<QLinearParams> fixed_;
};

// ---- the op table ---------------------------------------------------------------------------------------------

template <Reduction R>
std::unique_ptr<OpKernel> make_global_pool(const std::string& op, ONNXTensorElementDataType type,
                                           const AttributeReader& attrs) {
  return std::make_unique<GlobalPool>(R, op, element_type(type, TypeFamily::Float), attrs);
}
std::unique_ptr<OpKernel> make_lp_pool(const std::string& op, ONNXTensorElementDataType type,
                                       const AttributeReader& attrs) {
  return std::make_unique<LpPool>(op, element_type(type, TypeFamily::Float), attrs);
}
std::unique_ptr<OpKernel> make_qlinear_average_pool(const std::string& op, ONNXTensorElementDataType type,
                                                    const AttributeReader& attrs) {
  return std::make_unique<QLinearAveragePool>(op, element_type(type, TypeFamily::Quant), attrs);
}

const std::vector<OpInput> kPoolInputs = {{true, false}};
// X, x_scale, x_zero_point?, y_scale, y_zero_point?
const std::vector<OpInput> kQLinearInputs = {{true, false}, {false, false}, {true, true}, {false, false}, {true, true}};

std::atomic<uint64_t> g_unknown_dims{0};

// ---- shape inference ------------------------------------------------------------------------------------------------

void set_output_shape(OrtShapeInferContext* ctx, ONNXTensorElementDataType type, const std::vector<int64_t>& dims,
                      const std::vector<std::string>& names) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check(g_ort->CreateTensorTypeAndShapeInfo(&info));
  std::vector<const char*> name_ptrs;
  for (const std::string& s : names) name_ptrs.push_back(s.c_str());
  OrtStatus* status = g_ort->SetTensorElementType(info, type);
  if (status == nullptr) status = g_ort->SetDimensions(info, dims.data(), dims.size());
  if (status == nullptr) status = g_ort->SetSymbolicDimensions(info, name_ptrs.data(), name_ptrs.size());
  if (status == nullptr) status = g_ort->ShapeInferContext_SetOutputTypeShape(ctx, 0, info);
  g_ort->ReleaseTensorTypeAndShapeInfo(info);
  check(status);
}

}  // namespace

// One row per op (order: the Python loader's OPS and call_counts). Adding an op = a row + its kernel class and
// factory above; a row's types are every element type of its family.
const std::vector<OpDefinition>& op_table() {
  static const std::vector<OpDefinition> table = {
      {"", "GlobalAveragePool", "1,22", TypeFamily::Float, kPoolInputs, OutputShape::Global,
       &make_global_pool<Reduction::Average>, true},
      {"", "GlobalMaxPool", "1,22", TypeFamily::Float, kPoolInputs, OutputShape::Global,
       &make_global_pool<Reduction::Max>, true},
      {"", "GlobalLpPool", "1,2,22", TypeFamily::Float, kPoolInputs, OutputShape::Global,
       &make_global_pool<Reduction::Lp>},
      {"", "LpPool", "1,2,11,18,22", TypeFamily::Float, kPoolInputs, OutputShape::Windowed, &make_lp_pool},
      {"com.microsoft", "QLinearAveragePool", "1", TypeFamily::Quant, kQLinearInputs, OutputShape::WindowedNhwc,
       &make_qlinear_average_pool},
  };
  return table;
}

std::unique_ptr<OpKernel> create_kernel(const OpDefinition& def, ONNXTensorElementDataType type,
                                        const OrtKernelInfo* info) {
  std::string op = def.name;
  size_t size = 0;
  OrtStatus* probe = g_ort->KernelInfo_GetNodeName(info, nullptr, &size);
  if (probe != nullptr) g_ort->ReleaseStatus(probe);
  if (size > 1) {
    std::string node(size, '\0');
    if (OrtStatus* s = g_ort->KernelInfo_GetNodeName(info, node.data(), &size)) {
      g_ort->ReleaseStatus(s);
    } else {
      node.resize(size - 1);
      op += " (node '" + node + "')";
    }
  }
  const KernelInfoAttributes attrs(info, op);
  return def.create(op, type, attrs);
}

std::unique_ptr<OpKernel> create_fixed_qlinear_average_pool(const std::string& op, ONNXTensorElementDataType type,
                                                            const AttributeReader& attrs, const QLinearParams& params) {
  return std::make_unique<QLinearAveragePool>(op, element_type(type, TypeFamily::Quant), attrs, params);
}

void infer_output_shape(const OpDefinition& def, OrtShapeInferContext* ctx) {
  const char* op_name = def.name;
  // The input's type-and-shape info belongs to the context: read it, never release it.
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check(g_ort->ShapeInferContext_GetInputTypeShape(ctx, 0, &info));
  Tensor x;
  read_type_and_shape(info, x);
  std::vector<const char*> raw(x.shape.size(), nullptr);
  if (!raw.empty()) check(g_ort->GetSymbolicDimensions(info, raw.data(), raw.size()));
  std::vector<std::string> names;
  for (const char* s : raw) names.emplace_back(s ? s : "");
  if (x.shape.size() < 3) return;  // unknown rank, or an error the kernel reports

  const size_t rank = x.shape.size();
  std::vector<int64_t> dims = x.shape.vector();
  std::vector<std::string> out_names(rank);
  if (def.output_shape == OutputShape::Global) {
    for (size_t i = 2; i < rank; ++i) dims[i] = 1;
    out_names[0] = names[0];
    out_names[1] = names[1];
  } else {
    const ShapeInferAttributes attrs(ctx, op_name);
    const PoolAttributes pool = read_pool_attributes(attrs, op_name);
    const bool channels_last =
        def.output_shape == OutputShape::WindowedNhwc && read_flag(attrs, "channels_last", op_name);
    const size_t first = channels_last ? 1 : 2;
    for (size_t i = 0; i < rank; ++i) {
      const bool spatial = i >= first && i < first + (rank - 2);
      if (spatial) {
        dims[i] = infer_output_dim(pool, i - first, x.shape[i], op_name);
        // ORT stores an unnamed dim as its value: an unknown one needs a name, unique so no two are taken as equal.
        if (dims[i] < 0) out_names[i] = "onnx_pools_unk_" + std::to_string(g_unknown_dims.fetch_add(1));
      } else {
        out_names[i] = names[i];
      }
    }
  }
  set_output_shape(ctx, x.type, dims, out_names);
}

}  // namespace onnx_pools
