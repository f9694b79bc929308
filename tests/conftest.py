"""Shared helpers for the onnx-pools tests.

Test modules import the helpers directly (`from conftest import ...`); pytest puts tests/ on
sys.path (rootdir-relative "prepend" import mode), so this module is the same object pytest loaded.
"""

import collections
import contextlib
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
    node = helper.make_node(op, ["X"], ["Y"], name=node_name, domain=domain,
                            **{k: v for k, v in attrs.items() if k not in empty})
    for k in empty:  # an empty INTS attribute (helper cannot infer its type)
        node.attribute.append(helper.make_attribute(k, [], attr_type=onnx.AttributeProto.INTS))
    graph = helper.make_graph(
        [node], "g",
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


def make_session(model, library=True, ops=None, threads=1):
    if library:
        so = onnx_pools.session_options(ops=ops, model=model)
    else:
        so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(_bytes(model), so, providers=["CPUExecutionProvider"])


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
