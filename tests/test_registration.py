"""How the library's registration coexists with ORT's own graph rewrites and domains."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_pools
from helpers import (
    MODELS_DIR,
    ORT_SCHEMA_ONLY_AT_BLOCKED_START,
    counts_one_run,
    graph_model,
    optimized_session,
    qlinear_model,
)
from reference import global_average_pool


def conv_relu_pool_model(channels=16, opsets=(("", 13),)):
    """A float Conv -> Relu -> GlobalAveragePool: ORT fuses Conv+Relu into com.microsoft.FusedConv and its NCHWc
    transformer rewrites float pools with C a multiple of 8/16."""
    w = np.random.default_rng(0).standard_normal((channels, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["X", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["Y"]),
    ]
    elem = TensorProto.FLOAT
    inits = [numpy_helper.from_array(w, "W")]
    model = graph_model(nodes, [("X", elem, [2, 3, 8, 8])], [("Y", elem, None)], inits, dict(opsets))
    return model, w


def reference(x, w):
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((x.shape[0], w.shape[0], 8, 8))
    for i in range(8):
        for j in range(8):
            out[:, :, i, j] = np.einsum("nchw,kchw->nk", xp[:, :, i : i + 3, j : j + 3], w.astype(np.float64))
    return global_average_pool(np.maximum(out, 0))


def run(model, so):
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    before = onnx_pools.call_counts()
    y = sess.run(None, {"X": x})[0]
    after = onnx_pools.call_counts()
    return x, y, {k: after[k] - before[k] for k in after}


def stock_keeps_pool_blocked(model, tmp_path):
    """Whether stock ORT's optimised graph pools in its NCHWc layout (x86-64 CPUs with AVX2 or wider, level ALL;
    not on aarch64)."""
    graph = optimized_session(model.SerializeToString(), ort.SessionOptions(), tmp_path)[1].graph
    return any(n.op_type == "GlobalAveragePool" and n.domain == "com.microsoft.nchwc" for n in graph.node)


def test_raw_registration_leaves_conv_fed_pool_to_orts_layout_unless_told(tmp_path):
    """Plain registration (default level ORT_ENABLE_ALL): the library registers GlobalAveragePool with since-version
    1, so where stock ORT pools in its NCHWc layout the rewrite keeps this Conv-fed pool there too (the library's
    kernel does not run; elsewhere, e.g. aarch64, the library serves it); the session config entry
    onnx_pools.ort_layout=0 makes the library serve it. Both agree with the reference, and ORT's Conv+Relu fusion
    still applies."""
    model, w = conv_relu_pool_model()
    plain = ort.SessionOptions()
    plain.register_custom_ops_library(onnx_pools.get_library_path())
    forced = ort.SessionOptions()
    forced.add_session_config_entry("onnx_pools.ort_layout", "0")
    forced.register_custom_ops_library(onnx_pools.get_library_path())
    # a types selection registers since-version 0 before ORT 1.32 (a schema-only type with since-version 1 breaks
    # the kernel matching of those versions), since-version 1 as plain registration from 1.32 on
    typed = ort.SessionOptions()
    typed.add_session_config_entry("onnx_pools.types", "float")
    typed.register_custom_ops_library(onnx_pools.get_library_path())
    plain_served = 0 if stock_keeps_pool_blocked(model, tmp_path) else 1  # no NCHWc rewrite: the library serves it
    typed_served = plain_served if ORT_SCHEMA_ONLY_AT_BLOCKED_START else 1
    for so, served in ((plain, plain_served), (forced, 1), (typed, typed_served)):
        x, y, moved = run(model, so)
        assert moved["GlobalAveragePool"] == served
        np.testing.assert_allclose(y, reference(x, w), rtol=1e-4, atol=1e-5)


def test_ort_layout_config_entry_must_be_0_or_1():
    so = ort.SessionOptions()
    so.add_session_config_entry("onnx_pools.ort_layout", "yes")
    with pytest.raises(Exception, match="onnx_pools.ort_layout"):
        so.register_custom_ops_library(onnx_pools.get_library_path())


def test_default_takes_only_standard_domain_ops():
    assert onnx_pools.OPS["QLinearAveragePool"] == "com.microsoft"
    model, w = conv_relu_pool_model()
    # the model does not import com.microsoft; ort_layout=False: the library's kernel even for this conv-fed pool
    x, y, moved = run(model, onnx_pools.session_options(model=model, ort_layout=False))
    assert moved["GlobalAveragePool"] == 1
    np.testing.assert_allclose(y, reference(x, w), rtol=1e-4, atol=1e-5)


def _qlinear_model():
    """2x2 windows, stride 2, both zero points given as '' (absent: 0)."""
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    model, _ = qlinear_model(np.uint8, [1, 1, 2, 2], attrs, 0.1, None, 0.1, None, absent_y_zero_point="empty")
    return model


def test_model_importing_com_microsoft_gets_qlinear_average_pool():
    model = _qlinear_model()
    sess = ort.InferenceSession(model.SerializeToString(), onnx_pools.session_options(model=model))
    with counts_one_run("QLinearAveragePool"):
        y = sess.run(None, {"X": np.array([[[[1, 2], [3, 6]]]], np.uint8)})[0]
    assert y.tolist() == [[[[3]]]]  # (1+2+3+6)/4 = 3, zero points absent = 0


def test_explicit_ops_choose_qlinear_average_pool():
    model = _qlinear_model()
    for ops in ("all", ["QLinearAveragePool"]):
        sess = ort.InferenceSession(model.SerializeToString(), onnx_pools.session_options(ops=ops, model=model))
        with counts_one_run("QLinearAveragePool"):
            sess.run(None, {"X": np.array([[[[1, 2], [3, 6]]]], np.uint8)})


def test_unknown_op_name_in_selection_is_a_clear_error():
    model, _ = conv_relu_pool_model()
    with pytest.raises(Exception, match="onnx_pools.ops.*NoSuchPool"):
        ort.InferenceSession(model.SerializeToString(), onnx_pools.session_options(ops=["NoSuchPool"]))


def nodes_and_session(model_path, so, tmp_path):
    """(op type, domain) of each node of ORT's optimised graph of the model, and the session."""
    sess, optimized = optimized_session(model_path, so, tmp_path)
    return [(n.op_type, n.domain) for n in optimized.graph.node], sess


@pytest.mark.parametrize("name", ["cnn_gap_f16", "cnn_gmp_f16", "cnn_lppool1d_f16", "cnn_lppool2d_f16"])
def test_raw_registration_runs_float16_models_as_stock(name, tmp_path):
    """Plain registration of a float16 Conv -> Relu -> pool model: ORT runs the Conv and the Relu in float through
    casts, and the library's default types (float16 left out, onnxruntime 1.32 and newer) let it run the pool there
    too, on the library's float kernel: the optimised graph is stock's node for node, no cast is added, and the
    output matches stock's. Before 1.32 the default takes float16 (leaving it out would cost ORT's NCHWc rewrite),
    and the pool's float16 kernel runs behind an added cast.
    On aarch64 CPUs with FP16 arithmetic ORT runs the Conv in float16 itself (NHWC) and the default takes float16:
    GlobalAveragePool goes to ORT's NHWC float16 kernel as in stock ORT, and the other pools run on the library's
    float16 kernels without the casts stock ORT puts around its float kernels (scripts/aarch64_check.sh runs this
    under emulation with QEMU_CPU=max)."""
    path = str(MODELS_DIR / f"{name}.onnx")
    stock_graph, stock = nodes_and_session(path, ort.SessionOptions(), tmp_path)
    plain = ort.SessionOptions()
    plain.register_custom_ops_library(onnx_pools.get_library_path())
    graph, sess = nodes_and_session(path, plain, tmp_path)
    pool = next(op for op, _ in stock_graph if "Pool" in op)
    ort_nhwc_pool = pool.startswith("GlobalAveragePool") and onnx_pools._fp16_vector_cpu()
    if onnx_pools._fp16_vector_cpu():
        assert ("Cast", "") not in graph
        assert graph == (stock_graph if ort_nhwc_pool else [node for node in stock_graph if node != ("Cast", "")])
    elif ORT_SCHEMA_ONLY_AT_BLOCKED_START:
        assert graph == stock_graph
    else:
        assert graph != stock_graph and graph.count(("Cast", "")) > stock_graph.count(("Cast", ""))
    x = np.random.default_rng(5).standard_normal(sess.get_inputs()[0].shape).astype(np.float16)
    if ort_nhwc_pool:
        before = onnx_pools.call_counts()["GlobalAveragePool"]
        (y,) = sess.run(None, {"X": x})
        assert onnx_pools.call_counts()["GlobalAveragePool"] == before  # ORT's NHWC kernel ran, as in stock
    else:
        with counts_one_run(pool):
            (y,) = sess.run(None, {"X": x})
    (want,) = stock.run(None, {"X": x})
    np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=1e-3)
