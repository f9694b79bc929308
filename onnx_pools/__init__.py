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
# Session config entry the library reads in RegisterCustomOps: comma-separated ops it takes over.
OPS_CONFIG_KEY = "onnx_pools.ops"


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


def session_options(so=None, *, ops=None, model=None):
    """Register the library into `so` (a new onnxruntime.SessionOptions when None) and return it.

    ops: "all", or names of the ops the library takes over; the others keep ORT's kernels.
    Default: the standard-domain pools (GlobalAveragePool, GlobalMaxPool, GlobalLpPool, LpPool), plus
    com.microsoft.QLinearAveragePool when `model` (a path, bytes or ModelProto) imports the com.microsoft domain.
    Why not always: ORT registers a library's custom domain at opset 1000, which breaks its own com.microsoft
    fusions (FusedConv, ...) in models that do not import com.microsoft themselves.
    """
    import onnxruntime

    if so is None:
        so = onnxruntime.SessionOptions()
    if ops is None and model is not None and _imports_com_microsoft(model):
        ops = "all"
    if ops is not None:
        ops = ops if isinstance(ops, str) else ",".join(ops)
        so.add_session_config_entry(OPS_CONFIG_KEY, ops)
    so.register_custom_ops_library(get_library_path())
    return so


def _imports_com_microsoft(model):
    import onnx

    if isinstance(model, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(model))
    elif not isinstance(model, onnx.ModelProto):
        model = onnx.load(os.fspath(model), load_external_data=False)
    return any(opset.domain == "com.microsoft" for opset in model.opset_import)


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
