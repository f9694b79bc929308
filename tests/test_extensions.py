"""Coexistence with onnxruntime-extensions: one SessionOptions holding both custom-op libraries runs a model that
uses ops of both (extensions ops feeding and fed by this library's pooling ops), in either registration order.

Outputs are checked against float64 numpy references and the library's call counters prove its kernels ran.
The extensions ops used: ai.onnx.contrib NegPos (x -> min(x, 0), max(x, 0)) and SegmentSum (sums of
consecutive-id row segments).
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_pools
import reference as R
from helpers import assert_qlinear_matches, counts_one_run, graph_model, rng_for
from reference_qlinear import qlinear_average_pool

ext = pytest.importorskip(
    "onnxruntime_extensions", reason="onnxruntime-extensions is not installed (pip install '.[test]')"
)

CONTRIB = "ai.onnx.contrib"
ORDERS = ["onnx_pools_first", "extensions_first"]
HOW = ["session_options", "register_custom_ops_library"]  # the two ways to register this library


def _extensions_or_skip(so):
    try:
        so.register_custom_ops_library(ext.get_library_path())
    except Exception as e:  # an extensions build that needs a newer ORT than the one installed
        pytest.skip(f"onnxruntime-extensions {ext.__version__} does not load in onnxruntime {ort.__version__}: {e}")


def _register_ours(so, how, ops=None, model=None):
    if how == "session_options":
        assert onnx_pools.session_options(so, ops=ops, model=model) is so
    else:
        if ops is not None:
            so.add_session_config_entry(onnx_pools.OPS_CONFIG_KEY, ops)
        so.register_custom_ops_library(onnx_pools.get_library_path())


def _session(model, order, how="session_options", ops=None, ours=True, extensions=True, opt_level=None):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if opt_level is not None:
        so.graph_optimization_level = opt_level
    if order == "extensions_first" and extensions:
        _extensions_or_skip(so)
    if ours:
        _register_ours(so, how, ops=ops, model=model)
    if order == "onnx_pools_first" and extensions:
        _extensions_or_skip(so)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _model(nodes, inputs, outputs, opset, domains, initializers=()):
    return graph_model(nodes, inputs, outputs, initializers, {"": opset, **{d: 1 for d in domains}})


def _vi(name, t=TensorProto.FLOAT):
    return name, t, None


# ------------------------------------------------------------------------------------------------ float pools
LP = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], p=2)


def pools_model(opset):
    """X -> NegPos -> (neg, pos);  pos -> LpPool -> SegmentSum -> Z;  neg -> GlobalAveragePool -> G."""
    nodes = [
        helper.make_node("NegPos", ["X"], ["neg", "pos"], domain=CONTRIB, name="negpos"),
        helper.make_node("LpPool", ["pos"], ["L"], name="lppool", **LP),
        helper.make_node("SegmentSum", ["L", "S"], ["Z"], domain=CONTRIB, name="segsum"),
        helper.make_node("GlobalAveragePool", ["neg"], ["G"], name="gap"),
    ]
    return _model(nodes, [_vi("X"), _vi("S", TensorProto.INT64)], [_vi("Z"), _vi("G"), _vi("L")], opset, [CONTRIB])


def pools_reference(x, s):
    neg, pos = np.minimum(x, 0), np.maximum(x, 0)
    lp = R.lp_pool(pos, **LP)
    z = np.zeros((int(s.max()) + 1,) + lp.shape[1:])
    np.add.at(z, s, lp)
    return z, R.global_average_pool(neg), lp


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("opset", [18, 22])
def test_pools_between_extensions_ops(opset, order, how):
    x = (rng_for("coexistence", opset).standard_normal((4, 3, 9, 9)) * 3).astype(np.float32)
    s = np.array([0, 0, 1, 1], np.int64)
    sess = _session(pools_model(opset), order, how)
    with counts_one_run("LpPool"), counts_one_run("GlobalAveragePool"):
        z, g, lp = sess.run(None, {"X": x, "S": s})
    z_ref, g_ref, lp_ref = pools_reference(x, s)
    scale = R.input_scale(x)
    R.assert_close(lp, lp_ref, "float32", scale, "LpPool")
    R.assert_close(g, g_ref, "float32", scale, "GlobalAveragePool")
    R.assert_close(z, z_ref, "float32", 2 * scale, "SegmentSum of LpPool")


@pytest.mark.parametrize("order", ORDERS)
def test_opset22_globallppool_needs_both(order):
    """GlobalLpPool-22 has no stock ORT kernel and NegPos has none either: the model runs only with both libraries."""
    nodes = [
        helper.make_node("NegPos", ["X"], ["neg", "pos"], domain=CONTRIB),
        helper.make_node("GlobalLpPool", ["neg"], ["Y"], p=3),
    ]
    model = _model(nodes, [_vi("X")], [_vi("Y")], 22, [CONTRIB])
    x = np.random.default_rng(22).standard_normal((2, 5, 6, 7)).astype(np.float32)
    (y,) = _sess_run_counted(_session(model, order), {"X": x}, "GlobalLpPool")
    R.assert_close(y, R.global_lp_pool(np.minimum(x, 0), 3), "float32", R.input_scale(x))
    for kwargs, missing in ((dict(ours=False), "GlobalLpPool"), (dict(extensions=False), "NegPos")):
        with pytest.raises(Exception, match=missing):  # either library alone cannot run it
            _session(model, order, **kwargs).run(None, {"X": x})


def _sess_run_counted(sess, feeds, op):
    with counts_one_run(op):
        return sess.run(None, feeds)


@pytest.mark.parametrize("order", ORDERS)
def test_ort_fusions_still_resolve(order):
    """Default op selection with extensions registered too: a float Conv+Relu model at full optimisation (ORT's
    com.microsoft FusedConv rewrite) still loads and runs, and the pool is served by this library."""
    rng = np.random.default_rng(7)
    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float32))
    nodes = [
        helper.make_node("Conv", ["X", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("NegPos", ["r"], ["n", "p"], domain=CONTRIB),
        helper.make_node("GlobalMaxPool", ["p"], ["Y"]),
    ]
    model = _model(nodes, [_vi("X")], [_vi("Y")], 18, [CONTRIB], [w])
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    sess = _session(model, order, opt_level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    (y,) = _sess_run_counted(sess, {"X": x}, "GlobalMaxPool")
    (y_stock,) = _session(model, order, ours=False, opt_level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(
        None, {"X": x}
    )
    np.testing.assert_array_equal(y, y_stock)


# ------------------------------------------------------------------------------------------------ QLinearAveragePool
XS, XZ, YS, YZ = 0.02, 3, 0.015, 5
Q_ATTRS = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0)


def qlinear_model():
    """X -> NegPos -> pos -> QuantizeLinear -> com.microsoft.QLinearAveragePool -> DequantizeLinear -> Y."""
    inits = [
        helper.make_tensor("xs", TensorProto.FLOAT, [], [XS]),
        helper.make_tensor("xz", TensorProto.UINT8, [], [XZ]),
        helper.make_tensor("ys", TensorProto.FLOAT, [], [YS]),
        helper.make_tensor("yz", TensorProto.UINT8, [], [YZ]),
    ]
    nodes = [
        helper.make_node("NegPos", ["X"], ["neg", "pos"], domain=CONTRIB),
        helper.make_node("QuantizeLinear", ["pos", "xs", "xz"], ["Q"]),
        helper.make_node(
            "QLinearAveragePool", ["Q", "xs", "xz", "ys", "yz"], ["QY"], domain="com.microsoft", name="qpool", **Q_ATTRS
        ),
        helper.make_node("DequantizeLinear", ["QY", "ys", "yz"], ["Y"]),
    ]
    outputs = [_vi("Y"), _vi("QY", TensorProto.UINT8), _vi("Q", TensorProto.UINT8)]
    return _model(nodes, [_vi("X")], outputs, 18, [CONTRIB, "com.microsoft"], inits)


@pytest.mark.parametrize("ops", ["all", "model"])
@pytest.mark.parametrize("order", ORDERS)
def test_qlinear_average_pool_with_extensions(order, ops):
    """com.microsoft.QLinearAveragePool (ops="all", or chosen from the model's imports) with extensions registered:
    served by this library, equal to stock ORT's kernel, and to the numpy reference (one step allowed at ties)."""
    model = qlinear_model()
    x = np.random.default_rng(11).uniform(-2, 4, (2, 4, 11, 11)).astype(np.float32)
    so_kwargs = dict(ops="all", model=model) if ops == "all" else dict(model=model)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if order == "extensions_first":
        _extensions_or_skip(so)
    onnx_pools.session_options(so, **so_kwargs)
    if order == "onnx_pools_first":
        _extensions_or_skip(so)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y, qy, q = _sess_run_counted(sess, {"X": x}, "QLinearAveragePool")
    ref, pre = qlinear_average_pool(q, XS, np.uint8(XZ), YS, np.uint8(YZ), **Q_ATTRS)
    assert_qlinear_matches(qy, ref, pre, "QLinearAveragePool between QuantizeLinear and DequantizeLinear")
    np.testing.assert_array_equal(y, (qy.astype(np.float32) - YZ) * np.float32(YS))
    stock = _session(model, order, ours=False).run(None, {"X": x})
    np.testing.assert_array_equal(qy, stock[1])
    np.testing.assert_array_equal(y, stock[0])


def test_extensions_version_reported():
    """Records which onnxruntime-extensions served these tests (shown with -rA / in the ORT matrix logs)."""
    assert ext.__version__
    print(f"onnxruntime-extensions {ext.__version__} with onnxruntime {ort.__version__}")
