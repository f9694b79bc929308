"""Models and sessions for the command line, the benchmark and the tests: loading and inspecting an ONNX model
(its pooling nodes and tensor types), sessions with or without the library, random inputs, output comparison.
Needs onnx (the `cli` extra) for everything that reads a model; ml_dtypes for bfloat16 inputs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import onnx_pools
from onnx_pools.ortvalues import bfloat16, is_bfloat16, run_session

if TYPE_CHECKING:
    import onnx
    import onnxruntime

__all__ = [
    "ModelError",
    "default_models_dir",
    "elem_name",
    "first_line",
    "load_model",
    "make_session",
    "max_abs_diff",
    "np_dtype",
    "opsets",
    "ort_session_options",
    "pooling_nodes",
    "random_inputs",
    "run_session",
    "short_reason",
    "value_types",
]

PACKAGE_DIR = Path(__file__).resolve().parent


class ModelError(Exception):
    """A model file that is missing or not ONNX, an input type without a numpy type, no models to run."""


def load_model(path: str | Path) -> onnx.ModelProto:
    """onnx.ModelProto from a path; ModelError for a missing file or a file that is not an ONNX model."""
    import onnx

    p = Path(path)
    if not p.exists():
        raise ModelError(f"{path}: no such file")
    if p.is_dir():
        raise ModelError(f"{path}: is a directory, not an ONNX model")
    try:
        model = onnx.load(str(p))
    except Exception as e:  # protobuf DecodeError and friends
        raise ModelError(f"{path}: not an ONNX model ({first_line(e)})") from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.node:
        raise ModelError(f"{path}: not an ONNX model (no graph)")
    return model


def first_line(e: object, limit: int = 160) -> str:
    """The first line of an error's message (its type's name when empty), cut to `limit` characters."""
    s = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return s if len(s) <= limit else s[: limit - 3] + "..."


def short_reason(e: object, limit: int = 90) -> str:
    """ONNX Runtime's error message cut down to a short reason."""
    msg = str(e)
    msg = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", msg)
    msg = re.sub(r"Load model from .*? failed:", "", msg)
    msg = msg.replace("This is an invalid model. ", "").strip()
    m = re.search(r"Could not find an implementation for (\w+)\((\d+)\)", msg)
    if m:
        return f"no kernel for {m.group(1)}-{m.group(2)}"
    m = re.search(r"Type '(tensor\(\w+\))' of input parameter \(.*?\) of operator \((\w+)\)", msg)
    if m:
        return f"{m.group(2)} does not accept {m.group(1)}"
    m = re.search(r"\(op_type:(\w+)[^)]*\): (.*)", msg)
    if m:
        msg = f"{m.group(1)}: {m.group(2)}"
    return first_line(msg, limit)


def _domain(d: str) -> str:
    return "" if d in ("", "ai.onnx") else d


def opsets(model: onnx.ModelProto) -> dict[str, int]:
    """{domain ("" for ai.onnx): opset version} of the model's imports."""
    return {_domain(o.domain): o.version for o in model.opset_import}


def pooling_nodes(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, int | None]]:
    """[(node, opset)] of the nodes the library implements (onnx_pools.OPS), subgraphs included."""
    ops = onnx_pools.OPS
    versions = opsets(model)
    found: list[tuple[onnx.NodeProto, int | None]] = []

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            d = _domain(node.domain)
            if node.op_type in ops and ops[node.op_type] == d:
                found.append((node, versions.get(d)))
            for a in node.attribute:
                if a.type == a.GRAPH:
                    walk(a.g)
                elif a.type == a.GRAPHS:
                    for g in a.graphs:
                        walk(g)

    walk(model.graph)
    return found


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:
        return model


def value_types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """{tensor name: onnx ValueInfoProto} after shape inference (initializers included as type-only entries)."""
    from onnx import helper

    inf = _inferred(model)
    vis = {}
    for init in model.graph.initializer:
        vis[init.name] = helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
    for vi in list(inf.graph.input) + list(inf.graph.value_info) + list(inf.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            vis[vi.name] = vi
    # onnx's inference does not know com.microsoft ops: X of a QLinearAveragePool has its zero point's type
    inits = {i.name: i for i in model.graph.initializer}
    for node, _ in pooling_nodes(model):
        if (
            node.op_type == "QLinearAveragePool"
            and node.input[0] not in vis
            and len(node.input) > 2
            and node.input[2] in inits
        ):
            vis[node.input[0]] = helper.make_tensor_value_info(node.input[0], inits[node.input[2]].data_type, None)
    return vis


def elem_name(vi: onnx.ValueInfoProto | None) -> str:
    """ONNX's name of the element type, lower case ("float", "bfloat16"): the names of onnx_pools.TYPES."""
    from onnx import TensorProto

    if vi is None:
        return "?"
    t = vi.type.tensor_type.elem_type
    return str(TensorProto.DataType.Name(t).lower()) if t in TensorProto.DataType.values() else str(t)


def ort_session_options(library: bool, threads: int = 1, model: Any = None) -> onnxruntime.SessionOptions:
    """Options of a session with the library (onnx_pools.session_options(model=model)) or of a stock one, at
    `threads` intra-op threads, one inter-op thread, ORT's warnings silenced."""
    import onnxruntime

    so = onnx_pools.session_options(model=model) if library else onnxruntime.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


def make_session(model_bytes: bytes, library: bool, threads: int = 1) -> onnxruntime.InferenceSession:
    """A CPU session over the serialized model, with the library (chosen for this model) or stock."""
    import onnxruntime

    return onnxruntime.InferenceSession(
        model_bytes, ort_session_options(library, threads, model_bytes), providers=["CPUExecutionProvider"]
    )


_NP_TYPES: dict[str, Any] = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def np_dtype(ort_type: str) -> np.dtype[Any]:
    """The numpy dtype of an ORT type string ("tensor(float)"); ModelError for types without one."""
    if ort_type == "tensor(bfloat16)":
        return bfloat16()
    if ort_type not in _NP_TYPES:
        raise ModelError(f"unsupported input type {ort_type}")
    return np.dtype(_NP_TYPES[ort_type])


def random_inputs(
    sess: onnxruntime.InferenceSession, rng: np.random.Generator | None = None, sym_dim: int = 1
) -> dict[str, np.ndarray]:
    """Random feeds of the right shape and type for every input of sess (symbolic dims -> sym_dim)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else sym_dim for d in (i.shape or [])]
        dt = np_dtype(i.type)
        if dt.kind == "f" or is_bfloat16(dt):
            if "scale" in i.name.lower():
                x = rng.uniform(0.01, 0.1, size=shape)
            else:
                x = rng.standard_normal(size=shape)
            feeds[i.name] = np.asarray(x).astype(dt)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            lo, hi = max(int(info.min), -128), min(int(info.max), 255)
            if "zero_point" in i.name.lower():
                lo, hi = (0, 0) if dt.kind == "i" else (128, 128)
            feeds[i.name] = rng.integers(lo, hi + 1, size=shape).astype(dt)
        else:
            feeds[i.name] = rng.integers(0, 2, size=shape).astype(dt)
    return feeds


def max_abs_diff(a: Any, b: Any) -> float:
    """max |a - b| over the elements (NaN against NaN counts as equal); inf when the shapes differ."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    if a.dtype.kind in "iub":
        return float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
    a, b = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    d = np.abs(a - b)
    d[both_nan] = 0.0
    return float(np.max(d))


def default_models_dir() -> Path:
    """models/ of the source checkout, else ./models, else the models installed with the package (onnx_pools/models)."""
    candidates = []
    repo = PACKAGE_DIR.parent
    if (repo / "models" / "make_models.py").exists():
        candidates.append(repo / "models")
    candidates += [Path.cwd() / "models", PACKAGE_DIR / "models"]
    for c in candidates:
        if c.is_dir() and any(c.glob("*.onnx")):
            return c
    raise ModelError(
        "no bundled models found (looked in " + ", ".join(str(c) for c in candidates) + "); pass --models DIR"
    )
