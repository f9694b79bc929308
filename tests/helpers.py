"""The tests' shared helpers: model builders, sessions with and without the library, call-counter assertions, the
comparison of quantized outputs with the reference, the ISA paths of this CPU and the re-run of a test module's
checks with an ISA forced (in a subprocess: ONNX_POOLS_ISA is read when the library loads).

Test modules import from here (and from the references, reference.py and reference_qlinear.py), never from each
other; conftest.py holds only pytest's hooks. The package's utilities (onnx_pools.model_tools,
onnx_pools.ortvalues) are imported here and nowhere else in tests/.
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import os
import platform
import re
import signal
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import onnx_pools
from onnx_pools.model_tools import elem_name, np_dtype, pooling_nodes, random_inputs, value_types
from onnx_pools.ortvalues import from_ortvalue, run_session, to_ortvalue
from reference import DTYPES, TOLERANCES, assert_close, global_pool, input_scale, to_dtype
from reference_qlinear import QRANGE, near_tie, qlinear_average_pool

__all__ = [
    "check_float16_mean_flushed",
    "run_flushed_check",
    "ALL_DTYPES",
    "DEFAULT_TYPES_TAKE_FLOAT16",
    "CASE_COUNTS",
    "IR_VERSION",
    "ONNX_TYPES",
    "PACKAGE_ROOT",
    "QTYPES",
    "ROUTE",
    "SUBNORMAL",
    "TESTS_DIR",
    "TIE_TOL",
    "assert_close_with_subnormals",
    "assert_qlinear_matches",
    "check_qlinear_3x3_cases",
    "check_qlinear_against_reference_and_stock",
    "call_count_moves",
    "configure",
    "counts_one_run",
    "cpu_isas",
    "each_isa",
    "elem_name",
    "elf_dynamic",
    "expect_error",
    "from_ortvalue",
    "graph_model",
    "load_time_shape",
    "make_session",
    "np_dtype",
    "option",
    "ort_refusal",
    "pool_model",
    "pooling_nodes",
    "qlinear_3x3_cases",
    "qlinear_model",
    "qlinear_reference",
    "random_inputs",
    "random_lppool_case",
    "random_lppool_input",
    "refused_by_ort",
    "rerun_on_isa",
    "rng_for",
    "run_op",
    "run_session",
    "run_with_library",
    "selected",
    "short_sum_order",
    "strip_ort_wrapper",
    "subprocess_env",
    "to_ortvalue",
    "value_types",
]

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
# the folder holding the onnx_pools under test (installed package or a built checkout), for subprocesses
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(onnx_pools.__file__)))

ONNX_TYPES = {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
}
ALL_DTYPES = list(ONNX_TYPES)
QTYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
IR_VERSION = min(onnx.IR_VERSION, 10)
MODELS_DIR = Path(__file__).resolve().parent.parent / "models"  # the bundled models
# onnxruntime 1.32 matches kernels of a type registered schema-only at since-version 1, so there the library's
# default types leave float16 out and a types selection keeps ORT's NCHWc rewrite; before, neither (registration.cc)
ORT_SCHEMA_ONLY_AT_BLOCKED_START = tuple(int(v) for v in ort.__version__.split(".")[:2]) >= (1, 32)
# Whether the library's default types (no onnx_pools.types entry) take float16: before onnxruntime 1.32, and on CPUs
# where ORT runs float16 compute natively (aarch64 with FP16 arithmetic; csrc/ort/registration.cc, selected_types).
DEFAULT_TYPES_TAKE_FLOAT16 = not ORT_SCHEMA_ONLY_AT_BLOCKED_START or onnx_pools._fp16_vector_cpu()

# number of randomized / generated cases actually run, reported at the end of the session (conftest.py)
CASE_COUNTS: collections.Counter[str] = collections.Counter()

# --------------------------------------------------------------------------- options and markers of the run
# Numeric knobs: --name on the command line (registered by conftest.py), option("name") in the tests.
OPTIONS = {
    "fuzz_cases": (int, 1500, "number of generated cases in test_fuzz_invalid.py"),
    "fuzz_seed": (int, 7, "seed of the fuzz case generator (deterministic for a seed)"),
    "fuzz_timeout": (float, 60.0, "seconds without progress after which a fuzz worker counts as hung"),
    "property_examples": (int, None, "examples per property test (default: 250, or 2000 with -m deep)"),
    "concurrency_iters": (int, 30, "runs per thread in test_concurrency.py"),
}
_SELECTED: set[str] = set()
_CONFIG: Any = None


def configure(config: Any, selected_markers: set[str]) -> None:
    """Called by conftest.py's pytest_configure: the run's options and the markers named in -m."""
    global _CONFIG
    _CONFIG = config
    _SELECTED.clear()
    _SELECTED.update(selected_markers)


def selected(name: str) -> bool:
    """Whether the marker `name` was named in -m (for the opt-in ones, also: switched on by its variable)."""
    return name in _SELECTED


def option(name: str) -> Any:
    """The value of --name (its default outside a pytest run, e.g. in a worker subprocess)."""
    return _CONFIG.getoption(name) if _CONFIG is not None else OPTIONS[name][1]


def rng_for(*key: object) -> np.random.Generator:
    """Deterministic generator for a test case key."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# --------------------------------------------------------------------------- models


def _set_attribute(node: onnx.NodeProto, name: str, value: Any) -> None:
    """value: anything helper.make_attribute takes; an empty list (an empty INTS, whose type helper cannot infer); or
    an AttributeProto, added as it is under `name` (wrongly typed attributes)."""
    if isinstance(value, AttributeProto):
        value.name = name
        node.attribute.append(value)
    elif isinstance(value, (list, tuple)) and len(value) == 0:
        node.attribute.append(helper.make_attribute(name, [], attr_type=AttributeProto.INTS))
    else:
        node.attribute.append(helper.make_attribute(name, value))


def graph_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, int, Any]],
    outputs: Sequence[tuple[str, int, Any]],
    initializers: Sequence[onnx.TensorProto] = (),
    opsets: dict[str, int] | None = None,
) -> onnx.ModelProto:
    """A model of `nodes`; inputs and outputs as (name, ONNX element type, shape or None); opsets {domain: version}
    (default: the standard domain at 22)."""
    graph = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        list(initializers),
    )
    opsets = opsets or {"": 22}
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = IR_VERSION
    return model


def pool_model(
    op: str,
    opset: int,
    dtype: str,
    in_shape: Any,
    attrs: dict[str, Any] | None = None,
    *,
    x_type: int | None = None,
    domain: str = "",
    node_name: str = "node0",
) -> onnx.ModelProto:
    """Single-node model X -> op -> Y of a float pool (GlobalAveragePool, GlobalMaxPool, GlobalLpPool, LpPool).
    in_shape may hold str (symbolic) dims or be None. The output is declared without a shape so the session's output
    shape is the inferred one. Attribute values as _set_attribute takes them; x_type: another ONNX element type for
    X and Y than dtype's (invalid models)."""
    elem = x_type if x_type is not None else ONNX_TYPES[dtype]
    node = helper.make_node(op, ["X"], ["Y"], name=node_name, domain=domain)
    for name, value in (attrs or {}).items():
        _set_attribute(node, name, value)
    opsets = {"": opset, **({domain: 1} if domain else {})}
    return graph_model([node], [("X", elem, in_shape)], [("Y", elem, None)], opsets=opsets)


def qlinear_model(
    dtype: Any,
    in_shape: Any,
    attrs: dict[str, Any],
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    *,
    absent_y_zero_point: str = "omitted",
    as_inputs: Sequence[str] = (),
    node_inputs: Sequence[str] | None = None,
    node_name: str = "node0",
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One com.microsoft.QLinearAveragePool node X -> Y of element type dtype (uint8 or int8), returned with the feeds
    of its parameters that are graph inputs (X not included).

    Scales and zero points: a python or numpy scalar (a float32 / dtype tensor of shape []) or a numpy array, used as
    it is (shape [1], several elements or another element type, for the error tests). A zero point of None is absent:
    '' for x_zero_point, and for y_zero_point a trailing input left out (absent_y_zero_point="omitted") or ''
    ("empty"). The parameters are initializers, or graph inputs for the names (xs, xz, ys, yz) in as_inputs. The graph
    names them xs, xz, ys, yz, not as the spec does, so that an error message naming x_scale comes from the kernel.
    node_inputs: the node's input list as given (fuzzing: '' entries, inputs repeated or extra), over those names."""
    dtype = np.dtype(dtype)
    elem = QTYPES[dtype]
    given = {"xs": x_scale, "xz": x_zero_point, "ys": y_scale, "yz": y_zero_point}
    values: dict[str, np.ndarray] = {}
    for name, value in given.items():
        if value is not None:
            values[name] = (
                value
                if isinstance(value, np.ndarray)
                else np.array(value, np.float32 if name in ("xs", "ys") else dtype)
            )
    if node_inputs is None:
        node_inputs = ["X", "xs", "xz" if "xz" in values else "", "ys"]
        if "yz" in values:
            node_inputs.append("yz")
        elif absent_y_zero_point == "empty":
            node_inputs.append("")
    inputs, inits, feeds = [("X", elem, in_shape)], [], {}
    for name, value in values.items():
        if name not in node_inputs:
            continue
        if name in as_inputs:
            inputs.append((name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)))
            feeds[name] = value
        else:
            inits.append(numpy_helper.from_array(value, name))
    node = helper.make_node("QLinearAveragePool", list(node_inputs), ["Y"], name=node_name, domain="com.microsoft")
    for name, value in attrs.items():
        _set_attribute(node, name, value)
    model = graph_model([node], inputs, [("Y", elem, None)], inits, {"": 13, "com.microsoft": 1})
    return model, feeds


# --------------------------------------------------------------------------- sessions and the library's counters


def _bytes(model: Any) -> bytes:
    return model if isinstance(model, (bytes, bytearray)) else model.SerializeToString()


# ONNX_POOLS_ROUTE=ep: make_session runs the library as a plugin execution provider (onnxruntime >= 1.24) instead
# of registering it as a custom-op library, so the whole suite can be run through either route.
ROUTE = os.environ.get("ONNX_POOLS_ROUTE", "custom-op")


# ORT's refusals at load that come before any execution provider sees the model: the type, attribute and
# shape checks of ORT's own schemas (ONNX's, com.microsoft's) when it resolves the graph.
_SCHEMA_REFUSAL = re.compile(r"INVALID_GRAPH : This is an invalid model|\[(Type|Shape)InferenceError\]")


def ort_refusal(model: Any, error: BaseException) -> str | None:
    """ "ORT refuses ..." with ORT's message when `error` is a schema refusal at load that stock ORT (no library,
    no EP) gives for `model` word for word; None otherwise (the error is the route's, a test must see it)."""
    text = str(error)
    if "onnx-pools" in text or not _SCHEMA_REFUSAL.search(text):
        return None
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        ort.InferenceSession(_bytes(model), so, providers=["CPUExecutionProvider"])
    except Exception as stock:
        if str(stock) == text:
            return f"ORT refuses this model before any execution provider sees it (stock ORT too): {text}"
    return None


def _stock_load_dies(model: Any) -> str | None:
    """The signal stock ORT (no library, no EP) dies of while loading a model with a zero stride, in a forked child;
    None when it does not die. Some onnxruntime versions' own shape inference divides by the stride instead of
    refusing the model (1.24: SIGFPE), before any execution provider sees it."""
    nodes = (onnx.load_from_string(bytes(model)) if isinstance(model, (bytes, bytearray)) else model).graph.node
    if not hasattr(os, "fork") or not any(a.name == "strides" and 0 in a.ints for n in nodes for a in n.attribute):
        return None
    pid = os.fork()
    if pid == 0:  # the child: load, whatever happens exit normally unless a signal kills it
        faulthandler.disable()  # (pytest's traceback dump on the signal: the parent reports it)
        try:
            so = ort.SessionOptions()
            so.log_severity_level = 3
            ort.InferenceSession(_bytes(model), so, providers=["CPUExecutionProvider"])
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else None


def optimized_session(model: Any, so: ort.SessionOptions, tmp_path: Any) -> tuple[ort.InferenceSession, Any]:
    """A CPU session of model (path or bytes) with `so`, and ORT's optimised graph of it (onnx.ModelProto)."""
    so.optimized_model_filepath = str(Path(tmp_path) / "optimized.onnx")
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return sess, onnx.load(so.optimized_model_filepath)


def make_session(model: Any, library: bool = True, ops: Any = None, threads: int = 1) -> ort.InferenceSession:
    """A CPU session of model (ModelProto or bytes) with the library for every op it takes (ops: the selection;
    ORT's layout choices overridden: the library everywhere) through ROUTE, or stock ORT alone (library=False).
    On the EP route a model ORT's own schemas refuse at load (which stock ORT refuses the same way) skips the test
    with ORT's message: the custom-op route replaces those schemas with the library's, the EP route cannot."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if library and ROUTE == "ep":  # the EP takes every node it has a kernel for
        died = _stock_load_dies(model)
        if died:
            pytest.skip(f"stock onnxruntime {ort.__version__} dies of {died} loading this model, before any EP")
        try:
            return ort.InferenceSession(
                _bytes(model), onnx_pools.ep_session_options(so, ops=ops, ort_layout=False, float16="all")
            )
        except Exception as error:
            reason = ort_refusal(model, error)
            if reason:
                pytest.skip(reason)
            raise
    if library:
        so = onnx_pools.session_options(so, ops=ops, model=model, ort_layout=False)
    return ort.InferenceSession(_bytes(model), so, providers=["CPUExecutionProvider"])


def refused_by_ort(model: Any) -> str | None:
    """ort_refusal's reason when the route is the EP and ORT's schemas refuse `model` at load; None otherwise.
    For generated cases (property tests, subprocess scripts) that count such a case instead of skipping the test."""
    if ROUTE != "ep":
        return None
    try:
        make_session(model)
    except pytest.skip.Exception as skip:
        return str(skip)
    except Exception:
        return None
    return None


def load_time_shape(model: Any, expected: Sequence[Any]) -> list[Any]:
    """The output shape a session on the single-output `model` reports at load, as get_outputs()[0].shape lists it.
    Custom-op route: `expected`, the library's own shape inference. EP route: ORT infers shapes with its own
    schemas (an EP adds no inference), which onnx.shape_inference runs too: [] where that schema infers none
    (LpPool-1, GlobalLpPool-1), and its formula where it differs from the run (LpPool-18 ceil_mode with end pads,
    auto_pad VALID with pads); the output a run returns has the kernel's shape on both routes."""
    if ROUTE != "ep":
        return list(expected)
    if isinstance(model, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(model))
    output = onnx.shape_inference.infer_shapes(model).graph.output[0].type.tensor_type
    if not output.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in output.shape.dim]


@contextlib.contextmanager
def call_count_moves() -> Iterator[dict[str, int]]:
    """Yields a dict that holds, after the block, how far the library's call counter of each op moved inside it
    (the ops that moved only)."""
    moved: dict[str, int] = {}
    before = onnx_pools.call_counts()
    yield moved
    after = onnx_pools.call_counts()
    moved.update({op: after[op] - before[op] for op in after if after[op] != before[op]})


@contextlib.contextmanager
def counts_one_run(op: str, runs: int = 1) -> Iterator[None]:
    """Asserts the library's call counter for op moved by exactly `runs` inside the block."""
    before = onnx_pools.call_counts()[op]
    yield
    after = onnx_pools.call_counts()[op]
    assert after == before + runs, f"{op}: library call counter moved by {after - before}, expected {runs}"


def run_op(
    op: str,
    opset: int,
    dtype: str,
    x: Any,
    attrs: dict[str, Any] | None = None,
    in_shape: Any = "static",
    threads: int = 1,
) -> tuple[np.ndarray, ort.InferenceSession]:
    """Builds a single-node model for x, runs it with the library registered and checks that the
    library's kernel for op ran exactly once. Returns (y, session)."""
    x = np.asarray(x)
    assert x.dtype == DTYPES[dtype]
    shape = list(x.shape) if in_shape == "static" else in_shape
    sess = make_session(pool_model(op, opset, dtype, shape, attrs), threads=threads)
    with counts_one_run(op):
        (y,) = run_session(sess, {"X": x})
    return y, sess


# ORT wraps run-time kernel errors as "... while running <Op> node. Name:'node0' Status Message: <msg>".
# That wrapper names the op by itself; strip it so a pattern has to match the library's own message.
_ORT_WRAPPER = re.compile(r"running \w+ node\. Name:'[^']*' Status Message: ")


def strip_ort_wrapper(message: str) -> str:
    """The error message without ORT's "while running <Op> node" wrapper (which names the op by itself)."""
    return _ORT_WRAPPER.sub("", message)


def expect_error(model: Any, feeds: dict[str, Any], pattern: str, ops: Any = None) -> str:
    """Session creation + run must raise an error whose message (minus ORT's node wrapper)
    matches the regex `pattern` (searched with DOTALL)."""
    with pytest.raises(Exception) as ei:
        sess = make_session(model, ops=ops)
        run_session(sess, feeds)
    msg = strip_ort_wrapper(str(ei.value))
    assert re.search(pattern, msg, re.DOTALL), f"error message does not match {pattern!r}:\n{ei.value}"
    return msg


def run_with_library(model: Any, feeds: dict[str, Any], op: str, threads: int = 1, runs: int = 1) -> list[Any]:
    """Runs model on feeds in a session with the library (make_session) and asserts that the library's kernel for op
    ran `runs` times (once per node of op). Returns the outputs."""
    sess = make_session(model, threads=threads)
    with counts_one_run(op, runs):
        return run_session(sess, feeds)


# --------------------------------------------------------------------------- comparisons with the references

# Smallest positive subnormal of each type. Where the true result is itself subnormal, the output type cannot hold
# it to the relative tolerance; rounding to the type's grid costs up to one such step, which is added to atol.
SUBNORMAL = {"float32": 2.0**-149, "float64": 2.0**-1074, "float16": 2.0**-24, "bfloat16": 2.0**-133}


def assert_close_with_subnormals(y: Any, ref: np.ndarray, dtype: str, x: Any, what: str) -> None:
    """reference.assert_close at x's scale, one subnormal step of dtype more absolute tolerance."""
    af = TOLERANCES[dtype][1]
    assert_close(y, ref, dtype, input_scale(x) + SUBNORMAL[dtype] / af, what)


# within this distance of a rounding tie, float evaluation order may decide a quantized result: one step allowed
TIE_TOL = 1e-3


def assert_qlinear_matches(y: np.ndarray, ref: np.ndarray, pre: np.ndarray, what: str = "") -> None:
    """A quantized output against reference_qlinear's (ref, pre-rounding values): the same type and shape, equal
    except within TIE_TOL of a rounding tie, where one step is allowed."""
    assert y.dtype == ref.dtype and y.shape == ref.shape, (
        f"{what}: got {y.dtype}{list(y.shape)}, expected {ref.dtype}{list(ref.shape)}"
    )
    d = np.abs(y.astype(np.int32) - ref.astype(np.int32))
    bad = ((d > 0) & ~near_tie(pre, TIE_TOL)) | (d > 1)
    if bad.any():
        first = [tuple(int(v) for v in i) for i in np.argwhere(bad)[:5]]
        details = [(i, int(y[i]), int(ref[i]), float(pre[i])) for i in first]
        pytest.fail(
            f"{what}: {int(bad.sum())} of {d.size} elements differ from the reference (away from ties, or by more "
            f"than one step), max diff {int(d.max())}; first (index, got, expected, pre-rounding): {details}"
        )


def qlinear_reference(
    x: np.ndarray, x_scale: Any, x_zero_point: Any, y_scale: Any, y_zero_point: Any, attrs: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """reference_qlinear.qlinear_average_pool for a node's attributes: (y, pre-rounding values)."""
    return qlinear_average_pool(
        x,
        x_scale,
        x_zero_point,
        y_scale,
        y_zero_point,
        attrs["kernel_shape"],
        attrs.get("strides"),
        attrs.get("pads"),
        attrs.get("auto_pad", "NOTSET"),
        attrs.get("ceil_mode", 0),
        attrs.get("count_include_pad", 0),
        attrs.get("channels_last", 0),
    )


def check_qlinear_against_reference_and_stock(
    x: np.ndarray, x_scale: Any, x_zero_point: Any, y_scale: Any, y_zero_point: Any, attrs: dict[str, Any], what: str
) -> np.ndarray:
    """One QLinearAveragePool node on the library (its kernel counted) against the float64 reference away from ties
    and against stock ORT everywhere: identical, for the configurations whose ties the library evaluates as ORT
    does. Returns the library's output."""
    model, _ = qlinear_model(x.dtype, list(x.shape), attrs, x_scale, x_zero_point, y_scale, y_zero_point)
    (y,) = run_with_library(model, {"X": x}, "QLinearAveragePool")
    ref, pre = qlinear_reference(x, x_scale, x_zero_point, y_scale, y_zero_point, attrs)
    assert_qlinear_matches(y, ref, pre, what)
    stock = make_session(model, library=False).run(None, {"X": x})[0]
    differ = np.argwhere(stock != y)
    assert differ.size == 0, f"{what}: {len(differ)} elements differ from stock ORT, first {differ[:5].tolist()}"
    return y


def qlinear_3x3_cases(seed: int, shapes: Sequence[Sequence[int]], scales: Sequence[tuple[float, float, str]]) -> list:
    """Cases (x, x_scale, x_zero_point, y_scale, y_zero_point, count_include_pad) for 3x3 windows with pads 1: both
    8-bit types, each shape, each (x_scale, y_scale, zero points) of scales, both count_include_pad values. Zero
    points: "equal" (the middle of the range, both), "near middle" (3 below it, 5 above it), "low high" / "high low"
    (the range's ends), "random"."""
    rng = np.random.default_rng(seed)
    out = []
    for dtype in (np.uint8, np.int8):
        lo, hi = QRANGE[np.dtype(dtype)]
        for shape in shapes:
            for xs, ys, zps in scales:
                for cip in (0, 1):
                    if zps == "equal":
                        xz = yz = 128 if dtype == np.uint8 else 0
                    elif zps == "near middle":
                        xz, yz = (128 - 3, 128 + 5) if dtype == np.uint8 else (-3, 5)
                    elif zps == "low high":
                        xz, yz = lo, hi
                    elif zps == "high low":
                        xz, yz = hi, lo
                    else:
                        xz, yz = (int(v) for v in rng.integers(lo, hi + 1, 2))
                    x = rng.integers(lo, hi + 1, shape).astype(dtype)
                    out.append((x, xs, xz, ys, yz, cip))
    return out


def check_qlinear_3x3_cases(cases: list, channels_last: int) -> int:
    """check_qlinear_against_reference_and_stock on each case of qlinear_3x3_cases. Returns the number of cases."""
    layout = "NHWC" if channels_last else "NCHW"
    for x, xs, xz, ys, yz, cip in cases:
        attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": cip, "channels_last": channels_last}
        what = f"{x.dtype} {layout} x{list(x.shape)} scales {xs}/{ys} zero points {xz}/{yz} cip={cip}"
        check_qlinear_against_reference_and_stock(x, xs, xz, ys, yz, attrs, what)
    return len(cases)


# --------------------------------------------------------------------------- random LpPool cases


def random_lppool_case(
    rng: np.random.Generator, opset: int, stock_safe: bool = False
) -> tuple[dict[str, Any], dict[str, Any], list[int]]:
    """Random LpPool attributes + input shape. Returns (attrs, ref_kwargs for reference.lp_pool, in_shape).

    stock_safe restricts to what stock ORT does per spec: explicit pads < kernel, SAME only without
    dilation and with a non-negative raw total padding, dilations/ceil_mode only from opset 18."""
    nsp = int(rng.choice([1, 2, 3], p=[0.35, 0.45, 0.2]))
    kmax = 4 if nsp < 3 else 3
    k = [int(rng.integers(1, kmax + 1)) for _ in range(nsp)]
    s = [int(rng.integers(1, 5)) for _ in range(nsp)]
    dil_ok = (opset >= 18) or not stock_safe
    use_dil = dil_ok and rng.random() < 0.4
    d = [int(rng.integers(1, 4)) for _ in range(nsp)] if use_dil else [1] * nsp
    auto_pad = str(rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"], p=[0.55, 0.15, 0.15, 0.15]))
    if stock_safe and auto_pad.startswith("SAME") and use_dil:
        auto_pad = "NOTSET"
    ceil_mode = int(rng.random() < 0.4) if dil_ok else 0
    eff = [(k[i] - 1) * d[i] + 1 for i in range(nsp)]
    pads = None
    if auto_pad == "NOTSET" and rng.random() < 0.75:
        if stock_safe:
            pads = [int(rng.integers(0, k[i % nsp])) for i in range(2 * nsp)]
        else:
            # mostly < effective kernel, sometimes larger (a window may be all padding)
            pads = [int(rng.integers(0, eff[i % nsp] + (2 if rng.random() < 0.15 else 0))) for i in range(2 * nsp)]
    pb = pads[:nsp] if pads else [0] * nsp
    pe = pads[nsp:] if pads else [0] * nsp
    padded_min = [max(1, eff[i] - pb[i] - pe[i]) if auto_pad in ("NOTSET", "VALID") else 1 for i in range(nsp)]
    if auto_pad == "VALID":
        padded_min = [eff[i] for i in range(nsp)]
    size_max = 9 if nsp == 3 else 14
    ins = [int(rng.integers(padded_min[i], max(padded_min[i], size_max) + 1)) for i in range(nsp)]
    if stock_safe and auto_pad.startswith("SAME"):
        for i in range(nsp):  # stock ORT lets the total go negative; keep it >= 0
            while (-(-ins[i] // s[i]) - 1) * s[i] + eff[i] - ins[i] < 0:
                ins[i] += 1
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))

    if opset == 1:
        p = float(rng.choice([1.0, 2.0, 3.0, 1.5, 0.5, 4.0, 9.0]))
    else:
        p = int(rng.choice([1, 2, 3, 4, 9]))
    attrs: dict[str, Any] = {"kernel_shape": k}
    omit_p = rng.random() < 0.15
    if omit_p:
        p = 2.0 if opset == 1 else 2
    else:
        attrs["p"] = p
    if rng.random() < 0.8 or s != [1] * nsp:
        attrs["strides"] = s
    if pads is not None:
        attrs["pads"] = pads
    if auto_pad != "NOTSET" or rng.random() < 0.3:
        attrs["auto_pad"] = auto_pad
    if use_dil or (dil_ok and rng.random() < 0.2):
        attrs["dilations"] = d
    if ceil_mode or (dil_ok and rng.random() < 0.2):
        attrs["ceil_mode"] = ceil_mode
    ref_kwargs = dict(kernel_shape=k, strides=s, pads=pads, dilations=d, auto_pad=auto_pad, ceil_mode=ceil_mode, p=p)
    return attrs, ref_kwargs, [n, c] + ins


def random_lppool_input(rng: np.random.Generator, shape: list[int], dtype: str) -> np.ndarray:
    """Normal values at one of three scales, in dtype."""
    x = rng.standard_normal(shape) * float(rng.choice([1.0, 3.0, 0.25]))
    return to_dtype(x, dtype)


# --------------------------------------------------------------------------- ISA paths


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def short_sum_order(rows: np.ndarray) -> np.ndarray:
    """The sum of each row of `rows` (2-D) in the order the global pools document for short channels (short_sum in
    csrc/kernels/global/global_pools.h), in rows' type: 8 running sums over steps of 8 from +0, the tail added in
    order from +0, then ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + tail. Overflow to infinity is part of
    the model."""
    n = rows.shape[1]
    whole = n - n % 8
    s = np.zeros((rows.shape[0], 8), rows.dtype)
    tail = np.zeros(rows.shape[0], rows.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, whole, 8):
            s += rows[:, i : i + 8]
        for i in range(whole, n):
            tail += rows[:, i]
        return ((s[:, 0] + s[:, 1]) + (s[:, 2] + s[:, 3])) + ((s[:, 4] + s[:, 5]) + (s[:, 6] + s[:, 7])) + tail


def cpu_isas() -> list[str]:
    """The library's ISA paths this CPU runs (the values ONNX_POOLS_ISA may force)."""
    if platform.machine() in ("aarch64", "arm64"):
        # neon is baseline there, nothing to read (and under qemu-user /proc/cpuinfo is the x86-64 host's)
        return ["portable", "neon"]
    flags = _cpu_flags()
    isas = ["portable"]
    if {"avx2", "fma", "f16c"} <= flags:
        isas.append("avx2")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        isas.append("avx512")
    return isas


def each_isa(test: Any) -> Any:
    """Parametrizes `test` over the ISA paths this CPU runs (its `isa` argument; the test reruns a module's kernel
    checks under that path, rerun_on_isa) and marks it `isa_rerun`: a kernel check that neither the registration
    route nor the onnxruntime release changes, which CI's plugin-EP and oldest-onnxruntime runs deselect."""
    return pytest.mark.isa_rerun(pytest.mark.parametrize("isa", cpu_isas())(test))


def subprocess_env(isa: str | None = None, drop: Sequence[str] = ()) -> dict[str, str]:
    """The environment of a subprocess that imports the onnx_pools under test and the modules of tests/, with
    ONNX_POOLS_ISA=isa when given (read when the library loads), less the variables named in drop."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if isa is not None:
        env["ONNX_POOLS_ISA"] = isa
    env["PYTHONPATH"] = os.pathsep.join(
        [PACKAGE_ROOT, TESTS_DIR] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    return env


def rerun_on_isa(isa: str, module: str, function: str = "check_all") -> str:
    """Runs tests/`module`.`function`() in a subprocess with ONNX_POOLS_ISA=isa, on the onnx_pools under test, and
    returns what the function returned (as str: the test compares it, e.g. a number of cases checked). Skips the
    ISA of this process (the module's own tests ran on it)."""
    if isa == onnx_pools.active_isa():
        pytest.skip(f"{isa} is the path of this process: the module's own tests ran on it")
    script = (
        f"import onnx_pools, {module} as m\n"
        f"assert onnx_pools.active_isa() == {isa!r}, onnx_pools.active_isa()\n"
        f"print('RERUN-ON-ISA', onnx_pools.active_isa(), m.{function}())\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", script], cwd=TESTS_DIR, env=subprocess_env(isa), capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, f"{module}.{function} on ISA {isa}:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    m = re.search(rf"^RERUN-ON-ISA {isa} (.*)$", r.stdout, re.M)
    assert m, r.stdout[-3000:]
    return m.group(1)


# --------------------------------------------------------------------------- the library file


def elf_dynamic(path: Any) -> tuple[list[str], list[str]]:
    """(DT_NEEDED names, DT_RPATH + DT_RUNPATH strings) of an ELF shared object, read from its section headers."""
    data = Path(path).read_bytes()
    assert data[:4] == b"\x7fELF", f"{path}: not an ELF file"
    is64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64:
        (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        sec_fmt, dyn_fmt = end + "IIQQQQIIQQ", end + "qQ"
    else:
        (shoff,) = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        sec_fmt, dyn_fmt = end + "IIIIIIIIII", end + "iI"
    sections = [struct.unpack_from(sec_fmt, data, shoff + i * shentsize) for i in range(shnum)]
    needed, paths = [], []
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != 6:  # SHT_DYNAMIC
            continue
        str_off = sections[link][4]

        def string(i: int) -> str:
            return data[str_off + i : data.index(b"\0", str_off + i)].decode()

        for pos in range(offset, offset + size, entsize):
            tag, val = struct.unpack_from(dyn_fmt, data, pos)
            if tag == 0:  # DT_NULL
                break
            if tag == 1:  # DT_NEEDED
                needed.append(string(val))
            elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH
                paths.append(string(val))
    return needed, paths


def check_float16_mean_flushed(x: np.ndarray, what: str) -> str:
    """GlobalAveragePool-22 of float16 x with ORT's denormals-as-zero option, which sets the floating-point control
    of the thread creating the session (it runs the kernel at one thread), checked against the float64 reference
    with the library's kernel proven to run. Changes this thread's floating-point control for good: call it in a
    process of its own (run_flushed_check). Returns whether the flag was seen set, as "flushed=<bool>"."""
    model = pool_model("GlobalAveragePool", 22, "float16", list(x.shape))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.set_denormal_as_zero", "1")
    sess = ort.InferenceSession(model.SerializeToString(), onnx_pools.session_options(so, model=model))
    flushed = bool(np.float32(1e-39) * np.float32(1.0) == 0)  # numpy's float math runs under the same control
    with counts_one_run("GlobalAveragePool"):
        (y,) = sess.run(None, {"X": x})
    assert_close_with_subnormals(y, global_pool("GlobalAveragePool", x), "float16", x, what=what)
    return f"flushed={flushed}"


def run_flushed_check(module: str, isa: str) -> None:
    """module.check_flushed_subnormals() in a process of its own with `isa` forced: it passed and saw the flag set."""
    script = f"import {module} as m\nprint('RESULT', m.check_flushed_subnormals())\n"
    r = subprocess.run(
        [sys.executable, "-c", script], cwd=TESTS_DIR, env=subprocess_env(isa), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    assert "RESULT flushed=True" in r.stdout, r.stdout[-3000:]
