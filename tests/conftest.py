"""Shared helpers for the onnx-pools tests.

Test modules import the helpers directly (`from conftest import ...`); pytest puts tests/ on
sys.path (rootdir-relative "prepend" import mode), so this module is the same object pytest loaded.
"""

import collections
import contextlib
import os
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_pools
from ort_values import from_ortvalue, to_ortvalue
from reference import BF16, DTYPES

ONNX_TYPES = {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
}
ALL_DTYPES = list(ONNX_TYPES)
IR_VERSION = min(onnx.IR_VERSION, 10)

# number of randomized / generated cases actually run, reported at the end of the session
CASE_COUNTS = collections.Counter()

# --------------------------------------------------------------------------- markers and options
# The markers are registered in pyproject.toml ([tool.pytest.ini_options]).
# Opt-in markers: their tests are skipped unless the marker is named in -m (`pytest -m huge`), so a plain
# `pytest tests` reports them as skipped. wheel and matrix are also switched on by the variables that
# scripts/wheel_check.sh and scripts/ort_matrix.py read (and clear for the suites they run).
OPT_IN = {
    "huge": ("more than 2^31 elements, ~7 GB of memory, minutes", None),
    "wheel": ("builds the wheel and runs the suite from it in a fresh venv", "ONNX_POOLS_WHEEL_CHECK"),
    "matrix": ("runs the suite against several onnxruntime releases in fresh venvs", "ONNX_POOLS_ORT_MATRIX"),
}
# Mode markers: their tests run by default; naming the marker in -m selects them and switches them to a deeper mode.
MODES = ("deep",)
# test_packaging.py's slow checks, which carry no marker of their own: test name -> marker
PACKAGING_MARKERS = {"test_wheel_check_script": "wheel", "test_ort_matrix": "matrix"}
# Numeric knobs: --name on the command line, option("name") in the tests.
OPTIONS = {
    "fuzz_cases": (int, 1500, "number of generated cases in test_fuzz_invalid.py"),
    "fuzz_seed": (int, 7, "seed of the fuzz case generator (deterministic for a seed)"),
    "fuzz_timeout": (float, 60.0, "seconds without progress after which a fuzz worker counts as hung"),
    "property_examples": (int, None, "examples per property test (default: 250, or 2000 with -m deep)"),
    "concurrency_iters": (int, 30, "runs per thread in test_concurrency.py"),
}
_SELECTED = set()
_CONFIG = None


def pytest_addoption(parser):
    group = parser.getgroup("onnx-pools")
    for name, (kind, default, text) in OPTIONS.items():
        group.addoption("--" + name.replace("_", "-"), dest=name, type=kind, default=default, help=text)


def pytest_configure(config):
    global _CONFIG
    _CONFIG = config
    registered = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name in [*OPT_IN, *MODES, "fuzz"]:
        if name not in registered:  # a copy of tests/ run without pyproject.toml (scripts/wheel_check.sh)
            config.addinivalue_line("markers", f"{name}: see pyproject.toml and the README's Developers section")
    expr = config.getoption("markexpr", "") or ""
    for name in list(OPT_IN) + list(MODES):
        if re.search(rf"(?<!not )\b{name}\b", expr):  # named, and not as "not NAME"
            _SELECTED.add(name)
    for name, (_, variable) in OPT_IN.items():
        if variable and os.environ.get(variable):
            _SELECTED.add(name)
        elif variable and name in _SELECTED:
            os.environ[variable] = "1"  # read by test_packaging.py when it is imported


def selected(name):
    """Whether the marker `name` was named in -m (for the opt-in ones, also: switched on by its variable)."""
    return name in _SELECTED


def option(name):
    """The value of --name (its default outside a pytest run, e.g. in a worker subprocess)."""
    return _CONFIG.getoption(name) if _CONFIG is not None else OPTIONS[name][1]


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection, which must see the markers added here
def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = PACKAGING_MARKERS.get(item.originalname)
        if marker and item.path.name == "test_packaging.py" and not item.get_closest_marker(marker):
            item.add_marker(marker)
        for name, (why, variable) in OPT_IN.items():
            if item.get_closest_marker(name) and name not in _SELECTED:
                how = f"-m {name}" + (f" (or {variable}=1)" if variable else "")
                item.add_marker(pytest.mark.skip(reason=f"{why}: select with {how}"))


def pytest_terminal_summary(terminalreporter):
    if CASE_COUNTS:
        terminalreporter.write_sep("-", "onnx-pools generated cases run")
        for k in sorted(CASE_COUNTS):
            terminalreporter.write_line(f"{k}: {CASE_COUNTS[k]}")


# --------------------------------------------------------------------------- models


def make_model(op, opset, dtype, in_shape, attrs=None, domain="", node_name="node0"):
    """Single-node model X -> op -> Y. in_shape may contain str (symbolic) dims or be None.
    The output is declared without a shape so the session's output shape is the inferred one."""
    T = ONNX_TYPES[dtype]
    attrs = dict(attrs or {})
    empty = [k for k, v in attrs.items() if isinstance(v, (list, tuple)) and len(v) == 0]
    node = helper.make_node(
        op, ["X"], ["Y"], name=node_name, domain=domain, **{k: v for k, v in attrs.items() if k not in empty}
    )
    for k in empty:  # an empty INTS attribute (helper cannot infer its type)
        node.attribute.append(helper.make_attribute(k, [], attr_type=onnx.AttributeProto.INTS))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", T, in_shape)],
        [helper.make_tensor_value_info("Y", T, None)],
    )
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = IR_VERSION
    return model


def _bytes(model):
    return model if isinstance(model, (bytes, bytearray)) else model.SerializeToString()


# ONNX_POOLS_ROUTE=ep: make_session runs the library as a plugin execution provider (onnxruntime >= 1.24) instead
# of registering it as a custom-op library, so the whole suite can be run through either route.
ROUTE = os.environ.get("ONNX_POOLS_ROUTE", "custom-op")


# ORT's refusals at load that come before any execution provider sees the model: the type, attribute and
# shape checks of ORT's own schemas (ONNX's, com.microsoft's) when it resolves the graph.
_SCHEMA_REFUSAL = re.compile(r"INVALID_GRAPH : This is an invalid model|\[(Type|Shape)InferenceError\]")


def ort_refusal(model, error):
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


def make_session(model, library=True, ops=None, threads=1):
    """A session on `model`: with the library through ROUTE, or stock ORT (library=False). On the EP route a model
    ORT's own schemas refuse at load (which stock ORT refuses the same way) skips the test with ORT's message:
    the custom-op route replaces those schemas with the library's, the EP route cannot."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if library and ROUTE == "ep":  # the EP takes every node it has a kernel for
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
        so = onnx_pools.session_options(so, ops=ops, model=model, ort_layout=False)  # the library everywhere
    return ort.InferenceSession(_bytes(model), so, providers=["CPUExecutionProvider"])


def refused_by_ort(model):
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


def load_time_shape(model, expected):
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


def run_session(sess, feeds):
    """Runs sess on {name: numpy array}; bfloat16 (ml_dtypes) arrays go through OrtValues and
    bfloat16 outputs come back as ml_dtypes.bfloat16 arrays. Returns the list of outputs."""
    if not any(np.asarray(v).dtype == BF16 for v in feeds.values()) and not any(
        o.type == "tensor(bfloat16)" for o in sess.get_outputs()
    ):
        return sess.run(None, feeds)
    b = sess.io_binding()
    for name, v in feeds.items():
        b.bind_ortvalue_input(name, to_ortvalue(np.ascontiguousarray(v)))
    for o in sess.get_outputs():
        b.bind_output(o.name)
    sess.run_with_iobinding(b)
    return [from_ortvalue(ov) for ov in b.get_outputs()]


@contextlib.contextmanager
def counts_one_run(op, runs=1):
    """Asserts the library's call counter for op moved by exactly `runs` inside the block."""
    before = onnx_pools.call_counts()[op]
    yield
    after = onnx_pools.call_counts()[op]
    assert after == before + runs, f"{op}: library call counter moved by {after - before}, expected {runs}"


def run_op(op, opset, dtype, x, attrs=None, in_shape="static", threads=1):
    """Builds a single-node model for x, runs it with the library registered and checks that the
    library's kernel for op ran exactly once. Returns (y, session)."""
    x = np.asarray(x)
    assert x.dtype == DTYPES[dtype]
    shape = list(x.shape) if in_shape == "static" else in_shape
    sess = make_session(make_model(op, opset, dtype, shape, attrs), threads=threads)
    with counts_one_run(op):
        (y,) = run_session(sess, {"X": x})
    return y, sess


# ORT wraps run-time kernel errors as "... while running <Op> node. Name:'node0' Status Message: <msg>".
# That wrapper names the op by itself; strip it so the pattern has to match the library's own message.
_ORT_WRAPPER = re.compile(r"running \w+ node\. Name:'[^']*' Status Message: ")


def expect_error(model_bytes, feeds, pattern, ops=None):
    """Session creation + run must raise an error whose message (minus ORT's node wrapper)
    matches the regex `pattern` (searched with DOTALL)."""
    with pytest.raises(Exception) as ei:
        sess = make_session(model_bytes, ops=ops)
        run_session(sess, feeds)
    msg = _ORT_WRAPPER.sub("", str(ei.value))
    assert re.search(pattern, msg, re.DOTALL), f"error message does not match {pattern!r}:\n{ei.value}"
    return msg


def rng_for(*key):
    """Deterministic generator for a test case key."""
    import zlib

    return np.random.default_rng(zlib.crc32(repr(key).encode()))
