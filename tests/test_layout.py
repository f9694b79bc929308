"""Global pools ORT takes into its blocked NCHWc layout after convolutions are left to ORT by
session_options(model=...): the library's node would make ORT convert the pool's whole input back to NCHW first.
ort_layout=False (and an explicit `ops`) keeps the library's kernels everywhere."""

import platform
from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_pools
from helpers import MODELS_DIR, call_count_moves, graph_model, optimized_session


def conv_model(head, fed_by_conv=True, extra_bf16_pool=False):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.1, "w")
    nodes = [
        helper.make_node("Conv", ["X", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node(head, ["r" if fed_by_conv else "X"], ["Y"]),
    ]
    inputs = [("X", TensorProto.FLOAT, [2, 8, 12, 12])]
    outputs = [("Y", TensorProto.FLOAT, None)]
    if extra_bf16_pool:  # a second node of the op that ORT cannot run: the library must keep the op
        inputs.append(("B", TensorProto.BFLOAT16, [1, 2, 3, 3]))
        outputs.append(("Z", TensorProto.BFLOAT16, None))
        nodes.append(helper.make_node(head, ["B"], ["Z"]))
    return graph_model(nodes, inputs, outputs, [w]).SerializeToString()


def run(model, so, tmp_path):
    sess, optimized = optimized_session(model, so, tmp_path)
    x = np.random.default_rng(1).standard_normal((2, 8, 12, 12)).astype(np.float32)
    feeds = {"X": x}
    if len(sess.get_inputs()) > 1:
        return None, None, None
    with call_count_moves() as counted:
        (y,) = sess.run(None, feeds)
    moved = {op: counted.get(op, 0) for op in onnx_pools.OPS}
    ops = {f"{n.domain}.{n.op_type}" for n in optimized.graph.node}
    return y, moved, ops


x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="ORT's NCHWc layout is x86-only")


@x86
@pytest.mark.parametrize("head", ["GlobalAveragePool", "GlobalMaxPool"])
def test_conv_fed_global_pool_left_to_ort_layout(head, tmp_path):
    model = conv_model(head)
    stock_y, _, stock_ops = run(model, ort.SessionOptions(), tmp_path)
    # where this onnxruntime takes the pool into its blocked layout (1.32 does; 1.21 leaves this small model in
    # NCHW), the default keeps that: the same optimised graph as stock either way
    blocked = f"com.microsoft.nchwc.{head}" in stock_ops
    y, moved, ops = run(model, onnx_pools.session_options(model=model), tmp_path)
    assert moved[head] == 0 and ops == stock_ops, ops
    np.testing.assert_array_equal(y, stock_y)
    # forced: the library's kernel runs, on the NCHW input ORT converts back for it
    y, moved, ops = run(model, onnx_pools.session_options(model=model, ort_layout=False), tmp_path)
    assert moved[head] == 1 and f"com.microsoft.nchwc.{head}" not in ops
    np.testing.assert_allclose(y, stock_y, rtol=1e-5, atol=1e-6)
    if tuple(int(v) for v in ort.__version__.split(".")[:2]) >= (1, 32):
        assert blocked, f"onnxruntime {ort.__version__} no longer takes {head} into its NCHWc layout: {stock_ops}"
    y, moved, _ = run(model, onnx_pools.session_options(model=model, ops=[head]), tmp_path)
    assert moved[head] == 1  # an explicit op list also forces


@pytest.mark.parametrize("head", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool_not_fed_by_conv_stays_on_library(head, tmp_path):
    model = conv_model(head, fed_by_conv=False)
    y, moved, _ = run(model, onnx_pools.session_options(model=model), tmp_path)
    assert moved[head] == 1
    x = np.random.default_rng(1).standard_normal((2, 8, 12, 12)).astype(np.float64)
    ref = x.mean(axis=(2, 3), keepdims=True) if head == "GlobalAveragePool" else x.max(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


@x86
def test_op_kept_when_another_node_needs_the_library(tmp_path):
    """A bfloat16 node of the same op has no ORT kernel: the op stays with the library for the whole model."""
    model = conv_model("GlobalAveragePool", extra_bf16_pool=True)
    so = onnx_pools.session_options(model=model)
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])  # would fail without the library
    assert [i.name for i in sess.get_inputs()] == ["X", "B"]


@x86
def test_lower_optimisation_level_keeps_library(tmp_path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    model = conv_model("GlobalAveragePool")
    _, moved, _ = run(model, onnx_pools.session_options(so, model=model), tmp_path)
    assert moved["GlobalAveragePool"] == 1


def optimized_graph(model, so, tmp_path):
    return optimized_session(model, so, tmp_path)[1].graph


def op_counts(graph):
    return Counter(f"{n.domain}.{n.op_type}" for n in graph.node)


def producer(graph, tensor):
    (node,) = [n for n in graph.node if tensor in n.output]
    return f"{node.domain}.{node.op_type}"


@x86
@pytest.mark.parametrize(
    "name,head", [("resnet_gap_f32.onnx", "GlobalAveragePool"), ("vgg_gmp_f32.onnx", "GlobalMaxPool")]
)
def test_bundled_benchmark_models_keep_ort_layout(name, head, tmp_path):
    """The whole-model benchmark CNNs (bench --whole-models): session_options(model=...) and plain registration give
    stock's optimised graph (the pool in the blocked layout, one ReorderOutput of the pooled output); a
    registration forced to take the pool (ort_layout=False, or the config entry onnx_pools.ort_layout=0) makes ORT
    put the ReorderOutput in front of it, where it converts the pool's whole input."""
    model = (MODELS_DIR / name).read_bytes()
    stock = optimized_graph(model, ort.SessionOptions(), tmp_path)
    if f"com.microsoft.nchwc.{head}" not in op_counts(stock):
        pytest.skip(f"onnxruntime {ort.__version__} leaves {head} in NCHW here")
    (pool,) = [n for n in stock.node if n.op_type == head]
    assert any(n.op_type == "ReorderOutput" and n.input[0] == pool.output[0] for n in stock.node)
    assert op_counts(optimized_graph(model, onnx_pools.session_options(model=model), tmp_path)) == op_counts(stock)
    plain = ort.SessionOptions()
    plain.register_custom_ops_library(onnx_pools.get_library_path())
    assert op_counts(optimized_graph(model, plain, tmp_path)) == op_counts(stock)
    plain_forced = ort.SessionOptions()
    plain_forced.add_session_config_entry("onnx_pools.ort_layout", "0")
    plain_forced.register_custom_ops_library(onnx_pools.get_library_path())
    for so in (plain_forced, onnx_pools.session_options(model=model, ort_layout=False)):
        graph = optimized_graph(model, so, tmp_path)
        (pool,) = [n for n in graph.node if n.op_type == head]
        assert pool.domain == "" and producer(graph, pool.input[0]) == "com.microsoft.nchwc.ReorderOutput"
