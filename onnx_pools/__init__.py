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
# Session config entries the library reads in RegisterCustomOps: comma-separated ops it takes over (names in OPS),
# and element types its kernels take (names in TYPES); default all.
OPS_CONFIG_KEY = "onnx_pools.ops"
TYPES_CONFIG_KEY = "onnx_pools.types"
# "1" (the library's default): ORT's NCHWc layout rewrite may take float32 GlobalAveragePool / GlobalMaxPool nodes
# (the library registers them with since-version 1, which the rewrite matches); "0": the library's kernels for
# every node of the ops it takes.
ORT_LAYOUT_CONFIG_KEY = "onnx_pools.ort_layout"


def get_library_path():
    """Path of the shared library to pass to SessionOptions.register_custom_ops_library."""
    path = os.environ.get("ONNX_POOLS_LIBRARY") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME
    )
    if not os.path.isfile(path):
        raise FileNotFoundError(f"onnx-pools library not found at {path}; install the package with 'pip install .'")
    return path


_lib = None

# The library's C entry points: name -> (result type, argument types).
_C, _I, _U64 = ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64
_ENTRY_POINTS = {
    "onnx_pools_op_count": (_I, []),
    "onnx_pools_op_name": (_C, [_I]),
    "onnx_pools_op_domain": (_C, [_I]),
    "onnx_pools_op_versions": (_C, [_I]),
    "onnx_pools_op_takes_type": (_I, [_I, _I]),
    "onnx_pools_type_count": (_I, []),
    "onnx_pools_type_name": (_C, [_I]),
    "onnx_pools_call_count": (_U64, [_I]),
    "onnx_pools_reset_call_counts": (None, []),
    "onnx_pools_isa": (_C, []),
}


def _library():
    """The library loaded into this process (the same instance ORT loads, so its counters are shared)."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(get_library_path())
        for name, (result, arguments) in _ENTRY_POINTS.items():
            function = getattr(lib, name)
            function.restype, function.argtypes = result, arguments
        _lib = lib
    return _lib


def _ops():
    """[(op name, domain)] in the order of the library's op table."""
    return [(name, domain) for name, domain, _, _ in _op_table()]


def _types():
    """The element type names of the library's type table (csrc/kernels/common/element_types.h), in its order."""
    lib = _library()
    return [lib.onnx_pools_type_name(j).decode() for j in range(lib.onnx_pools_type_count())]


def _op_table():
    """[(op name, domain, (opset versions), (element type names))], one row per op of the library's table."""
    lib = _library()
    types = _types()
    return [
        (
            lib.onnx_pools_op_name(i).decode(),
            lib.onnx_pools_op_domain(i).decode(),
            tuple(int(v) for v in lib.onnx_pools_op_versions(i).decode().split(",")),
            tuple(t for j, t in enumerate(types) if lib.onnx_pools_op_takes_type(i, j)),
        )
        for i in range(lib.onnx_pools_op_count())
    ]


def session_options(so=None, *, ops=None, types=None, model=None, ort_layout=True):
    """Register the library into `so` (a new onnxruntime.SessionOptions when None) and return it.

    ops: "all", or names of the ops the library takes over; the others keep ORT's kernels.
    Default: the standard-domain pools (GlobalAveragePool, GlobalMaxPool, GlobalLpPool, LpPool), plus
    com.microsoft.QLinearAveragePool when `model` (a path, bytes or ModelProto) imports the com.microsoft domain.
    Why not always: ORT registers a library's com.microsoft domain at opset version 1000, and a model that does
    not import com.microsoft itself then fails to load wherever ORT's optimizations add com.microsoft nodes
    (QLinearAdd, QLinearGlobalAveragePool, ... from QDQ units, FusedConv from Conv + Relu). So QLinearAveragePool
    is taken only with a `model` that imports com.microsoft: "all" means every op that model allows, and "all"
    or a list naming QLinearAveragePool without such a model raises ValueError (see _check_selection).
    types: "all", or element types the kernels take (names in TYPES). Default: all, except float16 when `model`
    feeds a pooling node from a compute node (not a Cast): ORT's CPU provider runs float16 neighbours in float
    through casts, and a float16 kernel here would add a cast and can keep them in ORT's slow float16 kernels.
    float16 pools then run on this library's float kernels between ORT's casts; models without float16 are not
    affected. A selection must keep float while a standard-domain op is taken, and uint8 and int8 while
    QLinearAveragePool is: ORT's own kernels do not match the library's schemas, so nodes of those types would
    find no kernel at all (ValueError).
    ort_layout: with `model` and ops=None, GlobalAveragePool / GlobalMaxPool are left to ORT when every node of the
    op takes its input from a Conv (directly or through ops ORT keeps in its blocked NCHWc layout) and the session
    runs ORT's layout optimisations (level ALL, x86-64): ORT then pools in that layout, where a custom kernel makes
    it convert the pool's whole input back to NCHW first, which costs more than the pool; the other nodes stay on
    the library. Without `model` (and with plain registration), ORT's layout rewrite may take every float32
    GlobalAveragePool / GlobalMaxPool node, as in stock ORT. False: the library's kernels everywhere (session
    config onnx_pools.ort_layout=0).
    On aarch64 CPUs with FP16 arithmetic, ORT's NhwcTransformer takes float16 GlobalAveragePool nodes to its own
    NHWC kernel; the session then disables that transformer (optimization.disable_specified_optimizers) when the
    library takes GlobalAveragePool and the kernels are forced (no `model`, an explicit `ops`,
    ort_layout=False) or the model has nothing else the transformer rewrites (see _nhwc_fp16_choice).
    """
    import onnxruntime

    if so is None:
        so = onnxruntime.SessionOptions()
    forced = model is None or ops is not None or not ort_layout
    domains, nodes = _read_model(model) if model is not None else (None, None)
    if model is not None and ops is None:
        # QLinearAveragePool only where the model imports com.microsoft and the types keep its kernels
        quantized = types is None or types == "all" or {"uint8", "int8"} <= set(_names(types))
        ops = [name for name, domain in _ops() if domain == "" or ("com.microsoft" in domains and quantized)]
        if ort_layout and _ort_blocked_layout(so):
            ops = [name for name in ops if not _fed_by_blocked_layout(nodes, name)]
    if model is not None and types is None and _pool_fed_by_compute(nodes):
        types = [t for t in _types() if t != "float16"]
    ops = _check_selection(ops, types, domains)
    for key, value in ((OPS_CONFIG_KEY, ops), (TYPES_CONFIG_KEY, types)):
        if value is not None:
            so.add_session_config_entry(key, value if isinstance(value, str) else ",".join(value))
    if not ort_layout or model is not None:  # with a model, the op choice above already left those pools to ORT
        so.add_session_config_entry(ORT_LAYOUT_CONFIG_KEY, "0")
    if _nhwc_fp16_choice(ops, forced, model, nodes):
        _disable_optimizer(so, "NhwcTransformer")
    so.register_custom_ops_library(get_library_path())
    return so


def _check_selection(ops, types, domains):
    """The op selection to register (ops, with "all" resolved against the model's imports), or ValueError for a
    selection with which the custom-op route would make a model fail inside ORT. domains: the model's opset
    domains, None without a model."""
    microsoft = [name for name, domain in _ops() if domain == "com.microsoft"]
    if ops == "all" and domains is not None:
        ops = [name for name, domain in _ops() if domain == "" or "com.microsoft" in domains]
    if ops == "all":
        chosen = [name for name, _ in _ops()]
    else:
        chosen = _names(ops) if ops is not None else [name for name, domain in _ops() if domain == ""]
    asked = [n for n in chosen if n in microsoft]
    if asked and (domains is None or "com.microsoft" not in domains):
        why = (
            "ONNX Runtime registers a custom-op library's com.microsoft domain at opset version 1000 (its "
            "CreateCustomRegistry), so in a model that does not import com.microsoft itself the com.microsoft nodes "
            "ORT's own optimizations create (QLinearAdd, QLinearGlobalAveragePool, ... from QDQ units, FusedConv "
            "from Conv + Relu) are looked up at version 1000 and not found, and the model fails to load"
        )
        if domains is None:
            raise ValueError(
                f"onnx-pools: ops={ops!r} takes {', '.join(asked)}, which needs model=... to check that the model "
                f"imports the com.microsoft domain: {why}. Pass model= (then ops='all' or None take "
                "QLinearAveragePool exactly when the model imports com.microsoft), or leave it out of ops."
            )
        raise ValueError(
            f"onnx-pools: ops={ops!r} takes {', '.join(asked)}, but the model does not import the com.microsoft "
            f"domain: {why}. Leave it out of ops (session_options(model=...) without ops chooses a selection that "
            "loads; ORT's kernel then runs those nodes), or, to have this library run them, add an opset import "
            "of com.microsoft version 1 to the model (onnxruntime.quantization.quant_pre_process adds one) or use "
            "the plugin execution provider route."
        )
    if types is not None and types != "all":
        needs = {"float": [n for n in chosen if n not in microsoft], "uint8": asked, "int8": asked}
        for t, takers in needs.items():
            if takers and t not in _names(types):
                raise ValueError(
                    f"onnx-pools: types={types!r} leaves out {t} while the library takes {', '.join(takers)}: the "
                    "library's schema replaces ONNX's for an op it takes, and ORT's own kernels do not match it, "
                    f"so {t} nodes of those ops would find no kernel and the model would fail to load. Keep {t} "
                    "in types, or leave the op to ORT with ops=..."
                )
    return ops


def _names(selection):
    """The names of an ops= / types= selection other than "all": a comma-separated string or a sequence."""
    items = selection.split(",") if isinstance(selection, str) else selection
    return [name.strip() for name in items if name.strip()]


# Ops onnxruntime's NhwcTransformer rewrites to its NHWC kernels (besides float16 GlobalAveragePool).
_NHWC_REWRITTEN_OPS = ("Conv", "FusedConv", "QLinearConv", "MaxPool", "AveragePool")


def _nhwc_fp16_choice(ops, forced, model, nodes):
    """Whether to disable ORT's NhwcTransformer so that float16 GlobalAveragePool runs on the library.

    On aarch64 CPUs with FP16 vector arithmetic (armv8.2-a FP16: Graviton 2 and later, Ampere, Apple) ORT has an
    NHWC float16 GlobalAveragePool and its NhwcTransformer moves every such node there, wrapped in transposes.
    Disabling the transformer is per session, so it also stops ORT's NHWC rewrite of float16/quantized Convs and
    pools. So: when the kernels are forced (no model, explicit ops, ort_layout=False) always; with a model only
    if it has none of those other ops, where the transposes around a lone pool (a full pass over its input) can
    only cost. In a model with Convs, ORT keeps its NHWC float16 chain (a pool fed by a Conv gets the library's
    float kernel between casts all the same, as float16 is then left out of `types`); not measured on ARM hardware.
    """
    if ops is not None and ops != "all" and "GlobalAveragePool" not in ops:
        return False
    if not _fp16_vector_cpu():
        return False
    if forced:
        return True
    if nodes is None:
        nodes = _read_model(model)[1]
    return not any(op in _NHWC_REWRITTEN_OPS for op, *_ in nodes)


def _fp16_vector_cpu():
    """aarch64 with FP16 vector arithmetic (HWCAP_ASIMDHP), the CPUs on which ORT registers its float16 kernels."""
    import platform

    if platform.machine().lower() not in ("aarch64", "arm64"):
        return False
    try:
        getauxval = ctypes.CDLL(None).getauxval
    except (OSError, AttributeError):
        return False
    getauxval.restype = ctypes.c_ulong
    getauxval.argtypes = [ctypes.c_ulong]
    at_hwcap, hwcap_asimdhp = 16, 1 << 10
    return bool(getauxval(at_hwcap) & hwcap_asimdhp)


def _disable_optimizer(so, name):
    """Adds name to the session's optimization.disable_specified_optimizers, keeping what is already there."""
    key = "optimization.disable_specified_optimizers"
    try:
        current = so.get_session_config_entry(key)
    except Exception:  # not set: onnxruntime raises
        current = ""
    names = [n for n in current.split(",") if n]
    if name not in names:
        so.add_session_config_entry(key, ",".join([*names, name]))


_POOLS = ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LpPool")


def _read_model(model):
    """(opset domains, [(op_type, domain, inputs)] of the main graph) of a path, bytes or ModelProto, read straight
    from the protobuf wire format, so that the onnx package is not needed at run time."""
    if hasattr(model, "SerializeToString"):
        data = model.SerializeToString()
    elif isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    else:
        with open(os.fspath(model), "rb") as f:
            data = f.read()
    try:
        domains, nodes = set(), []
        for field, value in _fields(memoryview(data)):
            if field == 8:  # ModelProto.opset_import: OperatorSetIdProto.domain = 1
                domains |= {bytes(v).decode() for f, v in _fields(value) if f == 1}
            elif field == 7:  # ModelProto.graph: GraphProto.node = 1
                for f, node in _fields(value):
                    if f == 1:  # NodeProto: input 1, output 2 (repeated), op_type 4, domain 7
                        strings = {1: [], 2: [], 4: [""], 7: [""]}
                        for g, v in _fields(node):
                            if g in strings:
                                strings[g].append(bytes(v).decode())
                        nodes.append((strings[4][-1], strings[7][-1], strings[1], strings[2]))
        return domains, nodes
    except (IndexError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"onnx-pools: cannot read the model: {e}") from None


def _fields(buf):
    """(field number, value) of each field of a protobuf message: ints for varints, memoryviews for the rest."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i : i + size], i + size
        elif wire in (1, 5):
            value, i = None, i + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"wire type {wire}")
        yield key >> 3, value


def _varint(buf, i):
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _pool_fed_by_compute(nodes):
    """Whether a standard-domain pooling node takes its input from a node other than a Cast."""
    producers = {out: op for op, _, _, outputs in nodes for out in outputs}
    return any(
        op in _POOLS and domain in ("", "ai.onnx") and inputs and producers.get(inputs[0], "Cast") != "Cast"
        for op, domain, inputs, _ in nodes
    )


# ORT's NCHWc transformer keeps these in its blocked layout after a Conv; a global pool behind a chain of them
# would be taken into that layout by ORT's own kernel.
_BLOCKED_LAYOUT_OPS = {
    "Conv",
    "FusedConv",
    "Relu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "HardSigmoid",
    "Add",
    "Sum",
    "Concat",
    "BatchNormalization",
    "MaxPool",
    "AveragePool",
}
_LEFT_TO_ORT_LAYOUT = ("GlobalAveragePool", "GlobalMaxPool")


def _ort_blocked_layout(so):
    """Whether ORT may rewrite this session's float32 convolutions and global pools into its NCHWc layout."""
    import platform

    import onnxruntime

    return (
        platform.machine().lower() in ("x86_64", "amd64")
        and so.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    )


def _fed_by_blocked_layout(nodes, op_name):
    """Whether op_name occurs and every node of it takes its input from a Conv, directly or through ops that keep
    ORT's blocked layout."""
    producers = {out: (op, inputs) for op, _, inputs, outputs in nodes for out in outputs}

    def from_conv(tensor, depth=0):
        op, inputs = producers.get(tensor, (None, []))
        if op in ("Conv", "FusedConv"):
            return True
        return op in _BLOCKED_LAYOUT_OPS and depth < 16 and bool(inputs) and from_conv(inputs[0], depth + 1)

    pools = [inputs for op, domain, inputs, _ in nodes if op == op_name and domain in ("", "ai.onnx")]
    return op_name in _LEFT_TO_ORT_LAYOUT and bool(pools) and all(inputs and from_conv(inputs[0]) for inputs in pools)


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
    if name == "OPS":  # {op name: domain}, read from the library's op table
        return dict(_ops())
    if name == "TYPES":  # element type names (for `types=`), read from the library's type table
        return tuple(_types())
    raise AttributeError(name)


# the plugin-EP route (needs _library above)
from .ep import ep_session_options as ep_session_options  # noqa: E402
from .ep import get_ep_name as get_ep_name  # noqa: E402
from .ep import register_ep_library as register_ep_library  # noqa: E402
