"""onnx-pools: ONNX pooling kernels for ONNX Runtime, loaded as a custom-op library.

    import onnxruntime as ort, onnx_pools
    sess = ort.InferenceSession("model.onnx", onnx_pools.session_options())

Every GlobalAveragePool, GlobalMaxPool, GlobalLpPool, LpPool and com.microsoft.QLinearAveragePool node of the
session then runs on this library's kernels.
"""
import ctypes
import os

__version__ = "0.1.0"

_LIBRARY_NAME = "libonnx_pools.so"
# Session config entries the library reads in RegisterCustomOps: comma-separated ops it takes over, and element
# types its kernels take (float, double, float16, bfloat16, uint8, int8; default all).
OPS_CONFIG_KEY = "onnx_pools.ops"
TYPES_CONFIG_KEY = "onnx_pools.types"


def get_library_path():
    """Path of the shared library to pass to SessionOptions.register_custom_ops_library."""
    path = os.environ.get("ONNX_POOLS_LIBRARY") or os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"onnx-pools library not found at {path}; install the package with 'pip install .'")
    return path


_lib = None


def _library():
    """The library loaded into this process (the same instance ORT loads, so its counters are shared)."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(get_library_path())
        lib.onnx_pools_op_count.restype = ctypes.c_int
        lib.onnx_pools_op_name.restype = ctypes.c_char_p
        lib.onnx_pools_op_name.argtypes = [ctypes.c_int]
        lib.onnx_pools_op_domain.restype = ctypes.c_char_p
        lib.onnx_pools_op_domain.argtypes = [ctypes.c_int]
        lib.onnx_pools_call_count.restype = ctypes.c_uint64
        lib.onnx_pools_call_count.argtypes = [ctypes.c_int]
        lib.onnx_pools_isa.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def _ops():
    lib = _library()
    return [(lib.onnx_pools_op_name(i).decode(), lib.onnx_pools_op_domain(i).decode())
            for i in range(lib.onnx_pools_op_count())]


def session_options(so=None, *, ops=None, types=None, model=None):
    """Register the library into `so` (a new onnxruntime.SessionOptions when None) and return it.

    ops: "all", or names of the ops the library takes over; the others keep ORT's kernels.
    Default: the standard-domain pools (GlobalAveragePool, GlobalMaxPool, GlobalLpPool, LpPool), plus
    com.microsoft.QLinearAveragePool when `model` (a path, bytes or ModelProto) imports the com.microsoft domain.
    Why not always: ORT registers a library's custom domain at opset 1000, which breaks its own com.microsoft
    fusions (FusedConv, ...) in models that do not import com.microsoft themselves.
    types: "all", or element types the kernels take. Default: all, except float16 when `model` feeds a float16
    pooling node from a compute node: ORT's CPU provider runs such neighbours in float through casts, and a
    float16 kernel here would add a cast and can keep them in ORT's slow float16 kernels. Those nodes then run on
    this library's float kernels between ORT's casts.
    """
    import onnxruntime

    if so is None:
        so = onnxruntime.SessionOptions()
    if model is not None and (ops is None or types is None):
        model = _load(model)
        if ops is None and any(opset.domain == "com.microsoft" for opset in model.opset_import):
            ops = "all"
        if types is None and _float16_pool_fed_by_compute(model):
            types = ["float", "double", "bfloat16", "uint8", "int8"]
    for key, value in ((OPS_CONFIG_KEY, ops), (TYPES_CONFIG_KEY, types)):
        if value is not None:
            so.add_session_config_entry(key, value if isinstance(value, str) else ",".join(value))
    so.register_custom_ops_library(get_library_path())
    return so


def _load(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    return onnx.load(os.fspath(model), load_external_data=False)


def _float16_pool_fed_by_compute(model):
    """Whether a float16 pooling node of the main graph takes its input from a node other than a Cast."""
    import onnx

    graph = model.graph
    pools = [n for n in graph.node if n.op_type in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LpPool")
             and n.domain in ("", "ai.onnx") and n.input]
    if not pools:
        return False
    try:
        graph = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # a model shape inference cannot follow: keep the default
        return False
    types = {v.name: v.type.tensor_type.elem_type for v in list(graph.input) + list(graph.value_info) + list(graph.output)}
    producers = {out: n for n in graph.node for out in n.output}
    return any(types.get(n.input[0]) == onnx.TensorProto.FLOAT16 and n.input[0] in producers
               and producers[n.input[0]].op_type != "Cast" for n in pools)


def call_counts():
    """{op name: number of times this library's kernel for it ran in this process}."""
    lib = _library()
    return {name: lib.onnx_pools_call_count(i) for i, (name, _) in enumerate(_ops())}


def reset_call_counts():
    _library().onnx_pools_reset_call_counts()


def active_isa():
    """The kernel path the CPU dispatcher chose: 'avx512', 'avx2' or 'portable' (ONNX_POOLS_ISA forces one)."""
    return _library().onnx_pools_isa().decode()


def __getattr__(name):
    if name == "OPS":  # {op name: domain}, read from the library's registration table
        return dict(_ops())
    raise AttributeError(name)
