"""onnx-pools: ONNX pooling kernels for ONNX Runtime, loaded as a custom-op library.

    import onnxruntime as ort, onnx_pools
    sess = ort.InferenceSession("model.onnx", onnx_pools.session_options())

Every GlobalAveragePool, GlobalMaxPool, GlobalLpPool, LpPool and com.microsoft.QLinearAveragePool node of the
session then runs on this library's kernels.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import onnxruntime

__version__ = "0.1.0"

__all__ = [
    "OPS",
    "ep_session_options",
    "get_ep_name",
    "register_ep_library",
    "OPS_CONFIG_KEY",
    "ORT_LAYOUT_CONFIG_KEY",
    "TYPES",
    "TYPES_CONFIG_KEY",
    "__version__",
    "active_isa",
    "call_counts",
    "get_library_path",
    "lp_windows_recomputed",
    "qlinear_row_kernel_units",
    "reset_call_counts",
    "session_options",
]

_LIBRARY_NAME = "libonnx_pools.so"

# A model given to session_options: a path, its bytes, or an onnx.ModelProto.
Model = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]


def get_library_path() -> str:
    """Path of the shared library to pass to SessionOptions.register_custom_ops_library."""
    path = os.environ.get("ONNX_POOLS_LIBRARY") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME
    )
    if not os.path.isfile(path):
        raise FileNotFoundError(f"onnx-pools library not found at {path}; install the package with 'pip install .'")
    return path


_lib: ctypes.CDLL | None = None

# The library's C entry points: name -> (result type, argument types).
_C, _I, _U64 = ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64
_ENTRY_POINTS: dict[str, tuple[Any, list[Any]]] = {
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
    "onnx_pools_config_key": (_C, [_C]),
    "onnx_pools_op_taken_by_default": (_I, [_I]),
    "onnx_pools_ort_runs_float16_natively": (_I, []),
    "onnx_pools_lp_windows_recomputed": (_U64, []),
    "onnx_pools_qlinear_row_kernel_units": (_U64, []),
}
# Entry points a build of the library may lack: builds that predate them (e.g. one timed by bench --baseline).
_LATER_ENTRY_POINTS = (
    "onnx_pools_config_key",
    "onnx_pools_op_taken_by_default",
    "onnx_pools_ort_runs_float16_natively",
    "onnx_pools_lp_windows_recomputed",
    "onnx_pools_qlinear_row_kernel_units",
)


def _library() -> ctypes.CDLL:
    """The library loaded into this process (the same instance ORT loads, so its counters are shared)."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(get_library_path())
        for name, (result, arguments) in _ENTRY_POINTS.items():
            if name in _LATER_ENTRY_POINTS and not hasattr(lib, name):
                continue
            function = getattr(lib, name)
            function.restype, function.argtypes = result, arguments
        _lib = lib
    return _lib


def _ops() -> list[tuple[str, str]]:
    """[(op name, domain)] in the order of the library's op table."""
    return [(name, domain) for name, domain, _, _ in _op_table()]


def _types() -> list[str]:
    """The element type names of the library's type table (csrc/kernels/common/element_types.h), in its order."""
    lib = _library()
    return [lib.onnx_pools_type_name(j).decode() for j in range(lib.onnx_pools_type_count())]


def _op_table() -> list[tuple[str, str, tuple[int, ...], tuple[str, ...]]]:
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


def _config_key(what: str) -> str:
    """The session config key the library reads for `what` ("ops", "types", "ort_layout")."""
    lib = _library()
    if not hasattr(lib, "onnx_pools_config_key"):  # a build that predates the entry point: its keys were these
        return f"onnx_pools.{what}"
    key = lib.onnx_pools_config_key(what.encode())
    if key is None:
        raise RuntimeError(f"onnx-pools: the library has no session config key for {what!r}")
    return str(key.decode())


def _taken_by_default() -> list[str]:
    """Names of the ops the library takes without a session config naming them (its default-op policy)."""
    lib = _library()
    if not hasattr(lib, "onnx_pools_op_taken_by_default"):  # a build that predates the entry point
        return [name for name, domain in _ops() if domain == ""]
    return [name for i, (name, _) in enumerate(_ops()) if lib.onnx_pools_op_taken_by_default(i)]


def _read_library_tables() -> tuple[dict[str, str], tuple[str, ...], str, str, str, list[str]]:
    """OPS, TYPES, the three config keys and the default-op policy, read from the library once, at import. Empty
    when the library cannot be loaded: the package still imports (its command line reports the problem), and
    every call that needs the library raises get_library_path()'s error."""
    try:
        return (
            dict(_ops()),
            tuple(_types()),
            _config_key("ops"),
            _config_key("types"),
            _config_key("ort_layout"),
            _taken_by_default(),
        )
    except OSError:
        return {}, (), "", "", "", []


# OPS: {op name: domain} of the library's op table; TYPES: its element type names (for `types=`).
# OPS_CONFIG_KEY / TYPES_CONFIG_KEY: session config entries the library reads in RegisterCustomOps:
# comma-separated ops it takes over (names in OPS), element types its kernels take (names in TYPES); default all.
# ORT_LAYOUT_CONFIG_KEY: "1" (the library's default): ORT's NCHWc layout rewrite may take float32
# GlobalAveragePool / GlobalMaxPool nodes (the library registers them with since-version 1, which the rewrite
# matches); "0": the library's kernels for every node of the ops it takes.
OPS, TYPES, OPS_CONFIG_KEY, TYPES_CONFIG_KEY, ORT_LAYOUT_CONFIG_KEY, _DEFAULT_OPS = _read_library_tables()


def session_options(
    so: onnxruntime.SessionOptions | None = None,
    *,
    ops: str | Sequence[str] | None = None,
    types: str | Sequence[str] | None = None,
    model: Model | None = None,
    ort_layout: bool = True,
) -> onnxruntime.SessionOptions:
    """Register the library into `so` (a new onnxruntime.SessionOptions when None) and return it.

    ops: "all", or names of the ops the library takes over; the others keep ORT's kernels.
    Default: the ops the library takes by default (its policy, onnx_pools_op_taken_by_default: the
    standard-domain pools GlobalAveragePool, GlobalMaxPool, GlobalLpPool, LpPool), plus the others
    (com.microsoft.QLinearAveragePool) when `model` (a path, bytes or ModelProto) imports their domain.
    Why not always: ORT registers a library's com.microsoft domain at opset version 1000, and a model that does
    not import com.microsoft itself then fails to load wherever ORT's optimizations add com.microsoft nodes
    (QLinearAdd, QLinearGlobalAveragePool, ... from QDQ units, FusedConv from Conv + Relu). So QLinearAveragePool
    is taken only with a `model` that imports com.microsoft: "all" means every op that model allows, and "all"
    or a list naming QLinearAveragePool without such a model raises ValueError (see _check_selection).
    types: "all", or element types the kernels take (names in TYPES). Default: every type but float16, and with
    `model`, float16 too unless the model feeds a pooling node from a compute node (not a Cast): ORT's CPU provider
    runs float16 neighbours in float through casts, and a float16 kernel here would add a cast of the pool's input
    and can keep them in ORT's slow float16 kernels. float16 pools then run on this library's float kernels between
    ORT's casts. (With onnxruntime before 1.32 the default without `model` is every type: leaving one out there
    costs ORT's NCHWc rewrite of float32 global pools. On aarch64 CPUs with FP16 vector arithmetic, where ORT runs
    float16 Conv and pools natively, the default is every type too, with or without `model`.) A selection must keep
    float while a standard-domain op is taken, and uint8 and int8 while QLinearAveragePool is: ORT's own kernels do
    not match the library's schemas, so nodes of those types would find no kernel at all (ValueError).
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
    domains: set[str] | None = None
    nodes: list[_Node] | None = None
    if model is not None:
        domains, nodes = _read_model(model)
    if model is not None and ops is None:
        assert domains is not None and nodes is not None
        # QLinearAveragePool only where the model imports com.microsoft and the types keep its kernels
        quantized = types is None or types == "all" or {"uint8", "int8"} <= set(_names(types))
        ops = [name for name, domain in OPS.items() if name in _DEFAULT_OPS or (domain in domains and quantized)]
        if ort_layout and _ort_blocked_layout(so):
            ops = [name for name in ops if not _fed_by_blocked_layout(nodes, name)]
    if model is not None and types is None and nodes is not None:
        # the library's default leaves float16 out; with a model, float16 is taken where it pays (everywhere on a CPU
        # where ORT runs float16 compute natively: the pool's neighbours are float16 nodes there)
        fed_by_float_compute = _pool_fed_by_compute(nodes) and not _fp16_vector_cpu()
        types = [t for t in TYPES if t != "float16"] if fed_by_float_compute else "all"
    ops = _check_selection(ops, types, domains)
    for key, value in ((OPS_CONFIG_KEY, ops), (TYPES_CONFIG_KEY, types)):
        if value is not None:
            so.add_session_config_entry(key, value if isinstance(value, str) else ",".join(value))
    if not ort_layout or model is not None:  # with a model, the op choice above already left those pools to ORT
        so.add_session_config_entry(ORT_LAYOUT_CONFIG_KEY, "0")
    if _takes_float16(types) and _nhwc_fp16_choice(ops, forced, model, nodes):
        _disable_optimizer(so, "NhwcTransformer")
    so.register_custom_ops_library(get_library_path())
    return so


def _check_selection(
    ops: str | Sequence[str] | None, types: str | Sequence[str] | None, domains: set[str] | None
) -> str | Sequence[str] | None:
    """The op selection to register (ops, with "all" resolved against the model's imports), or ValueError for a
    selection with which the custom-op route would make a model fail inside ORT. domains: the model's opset
    domains, None without a model."""
    microsoft = [name for name, domain in OPS.items() if domain == "com.microsoft"]
    if ops == "all" and domains is not None:
        ops = [name for name, domain in OPS.items() if name in _DEFAULT_OPS or domain in domains]
    if ops == "all":
        chosen = list(OPS)
    else:
        chosen = _names(ops) if ops is not None else list(_DEFAULT_OPS)
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


def _names(selection: str | Sequence[str]) -> list[str]:
    """The names of an ops= / types= selection other than "all": a comma-separated string or a sequence."""
    items = selection.split(",") if isinstance(selection, str) else selection
    return [name.strip() for name in items if name.strip()]


# Ops onnxruntime's NhwcTransformer rewrites to its NHWC kernels (besides float16 GlobalAveragePool).
_NHWC_REWRITTEN_OPS = ("Conv", "FusedConv", "QLinearConv", "MaxPool", "AveragePool")


def _takes_float16(types: str | Sequence[str] | None) -> bool:
    """Whether a session registered with this `types` selection runs float16 nodes on the library's kernels. The
    library's default (None) leaves float16 out, except with onnxruntime before 1.32 and on CPUs where ORT runs
    float16 compute natively (see selected_types in csrc/ort/registration.cc)."""
    if types is None:
        return _onnxruntime_version() < (1, 32) or _fp16_vector_cpu()
    return types == "all" or "float16" in _names(types)


def _onnxruntime_version() -> tuple[int, int]:
    """(major, minor) of the onnxruntime Python package in use."""
    import onnxruntime

    major, minor = (int(part) for part in onnxruntime.__version__.split(".")[:2])
    return major, minor


def _nhwc_fp16_choice(
    ops: str | Sequence[str] | None, forced: bool, model: Model | None, nodes: list[_Node] | None
) -> bool:
    """Whether to disable ORT's NhwcTransformer so that float16 GlobalAveragePool runs on the library.

    On aarch64 CPUs with FP16 vector arithmetic (armv8.2-a FP16: Graviton 2 and later, Ampere, Apple) ORT has an
    NHWC float16 GlobalAveragePool and its NhwcTransformer moves every such node there, wrapped in transposes.
    Disabling the transformer is per session, so it also stops ORT's NHWC rewrite of float16/quantized Convs and
    pools. So: when the kernels are forced (no model, explicit ops, ort_layout=False) always; with a model only
    if it has none of those other ops, where the transposes around a lone pool (a full pass over its input) can
    only cost. In a model with Convs, ORT keeps its NHWC float16 chain: float16 GlobalAveragePool goes to ORT's NHWC
    kernel, as in stock ORT, and the other float16 pools run on the library's float16 kernels without the casts
    stock ORT puts around its float kernels (checked under emulation, QEMU_CPU=max; not measured on ARM hardware).
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


def _fp16_vector_cpu() -> bool:
    """aarch64 with FP16 vector arithmetic (HWCAP_ASIMDHP), the CPUs on which ORT registers its float16 kernels: the
    library's own test (onnx_pools_ort_runs_float16_natively), so that its default types and this loader agree."""
    lib = _library()
    if not hasattr(lib, "onnx_pools_ort_runs_float16_natively"):  # a build that predates it (bench --baseline)
        return False
    return bool(lib.onnx_pools_ort_runs_float16_natively())


def _disable_optimizer(so: onnxruntime.SessionOptions, name: str) -> None:
    """Adds name to the session's optimization.disable_specified_optimizers, keeping what is already there."""
    key = "optimization.disable_specified_optimizers"
    try:
        current = so.get_session_config_entry(key)
    except Exception:  # not set: onnxruntime raises
        current = ""
    names = [n for n in current.split(",") if n]
    if name not in names:
        so.add_session_config_entry(key, ",".join([*names, name]))


# A node of a model's main graph as _read_model gives it: (op_type, domain, inputs, outputs).
_Node = tuple[str, str, list[str], list[str]]
_POOLS = ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LpPool")


def _read_model(model: Model) -> tuple[set[str], list[_Node]]:
    """(opset domains, [(op_type, domain, inputs)] of the main graph) of a path, bytes or ModelProto, read straight
    from the protobuf wire format, so that the onnx package is not needed at run time."""
    if hasattr(model, "SerializeToString"):
        data = model.SerializeToString()
    elif isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    else:
        with open(os.fspath(model), "rb") as file:
            data = file.read()
    try:
        domains: set[str] = set()
        nodes: list[_Node] = []
        for field, value in _fields(memoryview(data)):
            if field == 8:  # ModelProto.opset_import: OperatorSetIdProto.domain = 1
                domains |= {bytes(v).decode() for f, v in _fields(value) if f == 1}
            elif field == 7:  # ModelProto.graph: GraphProto.node = 1
                for f, node in _fields(value):
                    if f == 1:  # NodeProto: input 1, output 2 (repeated), op_type 4, domain 7
                        strings: dict[int, list[str]] = {1: [], 2: [], 4: [""], 7: [""]}
                        for g, v in _fields(node):
                            if g in strings:
                                strings[g].append(bytes(v).decode())
                        nodes.append((strings[4][-1], strings[7][-1], strings[1], strings[2]))
        return domains, nodes
    except (IndexError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"onnx-pools: cannot read the model: {e}") from None


def _fields(buf: memoryview) -> Iterator[tuple[int, Any]]:
    """(field number, value) of each field of a protobuf message: ints for varints, memoryviews for the rest."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        wire = key & 7
        value: Any
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


def _varint(buf: memoryview, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _pool_fed_by_compute(nodes: list[_Node]) -> bool:
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


def _ort_blocked_layout(so: onnxruntime.SessionOptions) -> bool:
    """Whether ORT may rewrite this session's float32 convolutions and global pools into its NCHWc layout."""
    import platform

    import onnxruntime

    return (
        platform.machine().lower() in ("x86_64", "amd64")
        and so.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    )


def _fed_by_blocked_layout(nodes: list[_Node], op_name: str) -> bool:
    """Whether op_name occurs and every node of it takes its input from a Conv, directly or through ops that keep
    ORT's blocked layout."""
    producers = {out: (op, inputs) for op, _, inputs, outputs in nodes for out in outputs}

    def from_conv(tensor: str, depth: int = 0) -> bool:
        op, inputs = producers.get(tensor, (None, []))
        if op in ("Conv", "FusedConv"):
            return True
        return op in _BLOCKED_LAYOUT_OPS and depth < 16 and bool(inputs) and from_conv(inputs[0], depth + 1)

    pools = [inputs for op, domain, inputs, _ in nodes if op == op_name and domain in ("", "ai.onnx")]
    return op_name in _LEFT_TO_ORT_LAYOUT and bool(pools) and all(inputs and from_conv(inputs[0]) for inputs in pools)


def call_counts() -> dict[str, int]:
    """{op name: number of times this library's kernel for it ran in this process}."""
    lib = _library()
    return {name: int(lib.onnx_pools_call_count(i)) for i, name in enumerate(OPS)}


def reset_call_counts() -> None:
    """Sets every call counter of call_counts() to 0."""
    _library().onnx_pools_reset_call_counts()


def lp_windows_recomputed() -> int:
    """LpPool windows this process's kernels recomputed exactly (scaled, in double) because their fast sums could not
    be trusted (subnormal, huge or non-finite values): a diagnostic of that slow path, which zeros do not take."""
    return int(_library().onnx_pools_lp_windows_recomputed())


def qlinear_row_kernel_units() -> int:
    """QLinearAveragePool units (NCHW planes, NHWC images) this process's kernels pooled with the 3x3 stride-1 pads-1
    row kernel: a diagnostic of that fast path, which each ISA takes by its own rule."""
    return int(_library().onnx_pools_qlinear_row_kernel_units())


def active_isa() -> str:
    """The kernel path the CPU dispatcher chose: 'avx512', 'avx2' or 'portable' (ONNX_POOLS_ISA forces one)."""
    return str(_library().onnx_pools_isa().decode())


# the plugin-EP route (needs _library above)
from .ep import ep_session_options as ep_session_options  # noqa: E402
from .ep import get_ep_name as get_ep_name  # noqa: E402
from .ep import register_ep_library as register_ep_library  # noqa: E402
