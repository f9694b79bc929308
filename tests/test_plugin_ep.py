"""The plugin execution provider route (onnxruntime >= 1.24): the library's EP, registered with
onnxruntime.register_execution_provider_library, takes every op / opset version / element type through its kernel
registry, fuses QDQ average-pool units onto its QLinearAveragePool kernel, and makes the per-node choices in
GetCapability. Results against the float64 references; call counters prove the EP's kernels ran (no custom-op
library is registered in these sessions)."""

import platform

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_pools
from helpers import IR_VERSION, rng_for, run_session
from helpers import pool_model as make_model
from reference import DTYPES, assert_close, global_average_pool, global_lp_pool, global_max_pool, lp_pool
from reference_qlinear import near_tie, qlinear_average_pool

QDTYPES = {"uint8": np.dtype(np.uint8), "int8": np.dtype(np.int8)}
ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])
needs_ep = pytest.mark.skipif(ORT_VERSION < (1, 24), reason="plugin EP kernel registries need onnxruntime >= 1.24")


def ep_session(model, threads=1, **choices):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    onnx_pools.ep_session_options(so, **choices)
    return ort.InferenceSession(model.SerializeToString(), so)


def calls(op, fn):
    before = onnx_pools.call_counts()[op]
    result = fn()
    return result, onnx_pools.call_counts()[op] - before


def schema_types(opset):
    """Element types ONNX's pooling schemas allow at an opset: bfloat16 from opset 22."""
    return ["float32", "float64", "float16"] + (["bfloat16"] if opset >= 22 else [])


def sample(dtype, shape, key):
    x64 = rng_for(*key).standard_normal(shape) * 2
    return x64.astype(DTYPES[dtype])


def as_f64(x):
    return np.asarray(x).astype(np.float64)


# (op, opset of the model, attrs, reference on float64)
GLOBAL_CASES = [
    (op, opset, fn)
    for op, opsets, fn in [
        ("GlobalAveragePool", (1, 21, 22), global_average_pool),
        ("GlobalMaxPool", (1, 21, 22), global_max_pool),
    ]
    for opset in opsets
]


@needs_ep
@pytest.mark.parametrize("op,opset,fn", GLOBAL_CASES)
def test_global_pools_every_version_and_type(op, opset, fn):
    for dtype in schema_types(opset):
        x = sample(dtype, (2, 3, 5, 7), (op, opset, dtype))
        sess = ep_session(make_model(op, opset, dtype, list(x.shape)))
        (y,), n = calls(op, lambda: run_session(sess, {"X": x}))
        assert n == 1, f"{op}-{opset} {dtype}: the EP's kernel ran {n} times"
        assert_close(y, fn(as_f64(x)), dtype, what=f"{op}-{opset} {dtype}")


# GlobalLpPool: version 1 (p a FLOAT), 2 (INT), 22; LpPool: 1 (FLOAT p), 2, 11, 18, 22.
@needs_ep
@pytest.mark.parametrize("opset", [1, 2, 21, 22])
def test_global_lp_pool_every_version_and_type(opset):
    p = 3.0 if opset == 1 else 3
    for dtype in schema_types(opset):
        x = sample(dtype, (2, 3, 4, 6), ("GlobalLpPool", opset, dtype))
        sess = ep_session(make_model("GlobalLpPool", opset, dtype, list(x.shape), {"p": p}))
        (y,), n = calls("GlobalLpPool", lambda: run_session(sess, {"X": x}))
        assert n == 1
        assert_close(y, global_lp_pool(as_f64(x), 3), dtype, scale=3.0, what=f"GlobalLpPool-{opset} {dtype}")


@needs_ep
@pytest.mark.parametrize("opset", [1, 2, 10, 11, 17, 18, 21, 22])
def test_lp_pool_every_version_and_type(opset):
    attrs = {"kernel_shape": [2, 3], "strides": [2, 1], "p": 2.0 if opset == 1 else 2}
    if opset >= 2:
        attrs["pads"] = [1, 0, 0, 1]
    for dtype in schema_types(opset):
        x = sample(dtype, (2, 3, 7, 6), ("LpPool", opset, dtype))
        sess = ep_session(make_model("LpPool", opset, dtype, list(x.shape), attrs))
        (y,), n = calls("LpPool", lambda: run_session(sess, {"X": x}))
        assert n == 1
        ref = lp_pool(as_f64(x), attrs["kernel_shape"], attrs["strides"], attrs.get("pads"), p=2)
        assert_close(y, ref, dtype, scale=6.0, what=f"LpPool-{opset} {dtype}")


def quantization_initializers(dtype, params):
    """Scalar initializers xs, xz, ys, yz of (x_scale, x_zero_point, y_scale, y_zero_point)."""
    xs, xz, ys, yz = params
    return [
        numpy_helper.from_array(np.array(xs, np.float32), "xs"),
        numpy_helper.from_array(np.array(xz, QDTYPES[dtype]), "xz"),
        numpy_helper.from_array(np.array(ys, np.float32), "ys"),
        numpy_helper.from_array(np.array(yz, QDTYPES[dtype]), "yz"),
    ]


def qlinear_model(dtype, shape, attrs, params, channels_last=0):
    T = TensorProto.UINT8 if dtype == "uint8" else TensorProto.INT8
    inits = quantization_initializers(dtype, params)
    node = helper.make_node(
        "QLinearAveragePool",
        ["X", "xs", "xz", "ys", "yz"],
        ["Y"],
        domain="com.microsoft",
        channels_last=channels_last,
        **attrs,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", T, shape)],
        [helper.make_tensor_value_info("Y", T, None)],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = IR_VERSION
    return model


def qdq_model(dtype, shape, attrs, params, opset=19, com_microsoft=False):
    """DequantizeLinear -> AveragePool -> QuantizeLinear, scalar parameters; imports only the standard domain
    unless com_microsoft."""
    T = TensorProto.UINT8 if dtype == "uint8" else TensorProto.INT8
    inits = quantization_initializers(dtype, params)
    nodes = [
        helper.make_node("DequantizeLinear", ["X", "xs", "xz"], ["xf"], name="dq"),
        helper.make_node("AveragePool", ["xf"], ["yf"], name="pool", **attrs),
        helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["Y"], name="q"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X", T, shape)], [helper.make_tensor_value_info("Y", T, None)], inits
    )
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if com_microsoft else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = IR_VERSION
    return model


QPARAMS = {"uint8": (0.05, 128, 0.04, 120), "int8": (0.05, -3, 0.03, 5)}
QATTRS = [
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 0},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
]


def assert_quantized_equal(y, ref, pre):
    """Equal to the reference, but where the exact value is within 1e-3 of a rounding tie (float32 arithmetic
    may land on either side there): one step at most."""
    d = np.abs(y.astype(np.int32) - ref.astype(np.int32))
    assert d.max(initial=0) <= 1 and not ((d > 0) & ~near_tie(pre, 1e-3)).any(), np.argwhere(d > 0)[:5]


def quant_sample(dtype, shape, key):
    info = np.iinfo(QDTYPES[dtype])
    return rng_for(*key).integers(info.min, info.max + 1, size=shape).astype(QDTYPES[dtype])


# How a quantized average pool reaches the EP: (kind, channels_last, com_microsoft import) - a
# com.microsoft.QLinearAveragePool node in either layout, or a QDQ unit whatever the model imports.
QUANTIZED_FORMS = {
    "node-nchw": ("node", 0, True),
    "node-nhwc": ("node", 1, True),
    "qdq": ("qdq", 0, False),
    "qdq-com.microsoft": ("qdq", 0, True),
}


@needs_ep
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("form", list(QUANTIZED_FORMS))
def test_quantized_average_pool_runs_the_qlinear_kernel(dtype, form):
    """A QLinearAveragePool node, and a QDQ unit fused into one node, run the library's QLinearAveragePool kernel
    once; the result is the QLinearAveragePool reference and within one step of stock ORT's."""
    kind, channels_last, com_microsoft = QUANTIZED_FORMS[form]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    for i, attrs in enumerate(QATTRS):
        shape = (2, 7, 9, 3) if channels_last else (2, 3, 7, 9)
        x = quant_sample(dtype, shape, ("quantized", form, dtype, i))
        if kind == "node":
            model = qlinear_model(dtype, list(shape), attrs, QPARAMS[dtype], channels_last)
        else:
            model = qdq_model(dtype, list(shape), attrs, QPARAMS[dtype], com_microsoft=com_microsoft)
        sess = ep_session(model, ort_layout=False)
        (y,), n = calls("QLinearAveragePool", lambda: sess.run(None, {"X": x}))
        assert n == 1, f"the library's kernel ran {n} times"
        ref, pre = qlinear_average_pool(
            x,
            *QPARAMS[dtype],
            attrs["kernel_shape"],
            attrs.get("strides"),
            attrs.get("pads"),
            ceil_mode=attrs.get("ceil_mode", 0),
            count_include_pad=attrs.get("count_include_pad", 0),
            channels_last=channels_last,
        )
        assert_quantized_equal(y, ref, pre)
        (stock,) = ort.InferenceSession(model.SerializeToString(), so).run(None, {"X": x})
        assert np.abs(y.astype(np.int32) - stock.astype(np.int32)).max() <= 1


@needs_ep
def test_qdq_unit_left_alone_when_a_parameter_is_not_a_constant():
    """A scale fed at run time is not a QLinearAveragePool parameter: the unit stays with ORT (the library's
    kernel never runs), and the same unit with constant parameters is fused."""
    model = qdq_model("uint8", [1, 3, 6, 6], QATTRS[0], QPARAMS["uint8"])
    del model.graph.initializer[0]  # xs becomes a graph input
    model.graph.input.append(helper.make_tensor_value_info("xs", TensorProto.FLOAT, []))
    x = quant_sample("uint8", (1, 3, 6, 6), ("qdq-input-scale",))
    feeds = {"X": x, "xs": np.array(QPARAMS["uint8"][0], np.float32)}
    (y,), n = calls("QLinearAveragePool", lambda: ep_session(model, ort_layout=False).run(None, feeds))
    assert n == 0
    fused = ep_session(qdq_model("uint8", [1, 3, 6, 6], QATTRS[0], QPARAMS["uint8"]), ort_layout=False)
    (y_fused,), n = calls("QLinearAveragePool", lambda: fused.run(None, {"X": x}))
    assert n == 1
    assert np.abs(y.astype(np.int32) - y_fused.astype(np.int32)).max() <= 1


@needs_ep
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantized_pools_left_to_ort_where_its_rewrites_run_them_faster(dtype):
    """By default (ort_layout) the EP leaves a quantized average pool of <= 4 window elements to ORT (QDQ unit or
    QLinearAveragePool node), int8 QDQ units on x86-64, and a float GlobalAveragePool between a DequantizeLinear and
    a QuantizeLinear; the 3x3 units and nodes it takes. Results equal stock ORT's wherever ORT runs the node."""
    x86 = platform.machine() in ("x86_64", "AMD64")
    x = quant_sample(dtype, (1, 3, 7, 9), ("left", dtype))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    for attrs in QATTRS:
        small = int(np.prod(attrs["kernel_shape"])) <= 4
        for model in (
            qdq_model(dtype, [1, 3, 7, 9], attrs, QPARAMS[dtype]),
            qlinear_model(dtype, [1, 3, 7, 9], attrs, QPARAMS[dtype]),
        ):
            unit = model.graph.node[0].op_type == "DequantizeLinear"
            (y,), n = calls("QLinearAveragePool", lambda: ep_session(model).run(None, {"X": x}))
            taken = not small and not (unit and x86 and dtype == "int8")
            assert n == int(taken), (attrs, [node.op_type for node in model.graph.node])
            (stock,) = ort.InferenceSession(model.SerializeToString(), so).run(None, {"X": x})
            assert np.abs(y.astype(np.int32) - stock.astype(np.int32)).max() <= int(taken)
    gap = qdq_model(dtype, [1, 3, 7, 9], QATTRS[0], QPARAMS[dtype])
    gap.graph.node[1].op_type = "GlobalAveragePool"
    del gap.graph.node[1].attribute[:]
    (y,), n = calls("GlobalAveragePool", lambda: ep_session(gap).run(None, {"X": x}))
    assert n == 0
    (y,), n = calls("GlobalAveragePool", lambda: ep_session(gap, ort_layout=False).run(None, {"X": x}))
    assert n == 1


def conv_gap_model(dtype=TensorProto.FLOAT, np_dtype=np.float32, feeder="Conv", pool="GlobalAveragePool", **attrs):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 4, 3, 3)) * 0.1).astype(np_dtype), "w")
    nodes = [
        helper.make_node("Conv", ["X", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node(pool, ["r"], ["Y"], **attrs),
    ]
    if feeder == "Relu":  # no Conv in front: Relu straight from the input
        nodes = [helper.make_node("Relu", ["X"], ["r"]), nodes[2]]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", dtype, [1, 4, 16, 16])],
        [helper.make_tensor_value_info("Y", dtype, None)],
        [w] if feeder == "Conv" else [],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


@needs_ep
@pytest.mark.skipif(
    __import__("platform").machine().lower() not in ("x86_64", "amd64"), reason="ORT's NCHWc layout is x86-64 only"
)
def test_conv_fed_float32_global_pool_is_left_to_ort_blocked_layout():
    x = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    model = conv_gap_model()
    (left,), n_left = calls("GlobalAveragePool", lambda: ep_session(model).run(None, {"X": x}))
    (taken,), n_taken = calls("GlobalAveragePool", lambda: ep_session(model, ort_layout=False).run(None, {"X": x}))
    assert (n_left, n_taken) == (0, 1)
    np.testing.assert_allclose(left, taken, rtol=1e-5, atol=1e-6)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED  # no NCHWc rewrite: taken
    so.log_severity_level = 3
    _, n = calls(
        "GlobalAveragePool",
        lambda: ort.InferenceSession(model.SerializeToString(), onnx_pools.ep_session_options(so)).run(None, {"X": x}),
    )
    assert n == 1


@needs_ep
def test_float16_pool_fed_by_compute_is_left_to_ort():
    x = np.random.default_rng(2).standard_normal((1, 4, 16, 16)).astype(np.float16)
    model = conv_gap_model(TensorProto.FLOAT16, np.float16, feeder="Relu")
    (left,), n_left = calls("GlobalAveragePool", lambda: ep_session(model).run(None, {"X": x}))
    (taken,), n_taken = calls("GlobalAveragePool", lambda: ep_session(model, float16="all").run(None, {"X": x}))
    assert (n_left, n_taken) == (0, 1)
    ref = global_average_pool(np.maximum(x.astype(np.float64), 0))
    assert_close(taken, ref, "float16")
    assert_close(left, ref, "float16")


@needs_ep
@pytest.mark.parametrize("pool", ["GlobalLpPool", "LpPool"])
def test_float16_lp_pool_fed_by_compute_is_taken(pool):
    # ORT's own LpPool / GlobalLpPool (run in float through casts) are far slower than a Cast it adds in front
    x = np.random.default_rng(3).standard_normal((1, 4, 16, 16)).astype(np.float16)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2} if pool == "LpPool" else {"p": 2}
    model = conv_gap_model(TensorProto.FLOAT16, np.float16, feeder="Relu", pool=pool, **attrs)
    (y,), n = calls(pool, lambda: ep_session(model).run(None, {"X": x}))
    assert n == 1
    r = np.maximum(x.astype(np.float64), 0)
    ref = lp_pool(r, [3, 3], pads=[1, 1, 1, 1], p=2) if pool == "LpPool" else global_lp_pool(r, p=2)
    assert_close(y, ref, "float16")


@needs_ep
def test_ops_option_selects_the_ops_the_ep_takes():
    x = sample("float32", (1, 2, 4, 4), ("ops",))
    model = make_model("GlobalMaxPool", 17, "float32", [1, 2, 4, 4])
    _, n = calls("GlobalMaxPool", lambda: ep_session(model, ops=["LpPool"]).run(None, {"X": x}))
    assert n == 0
    _, n = calls("GlobalMaxPool", lambda: ep_session(model, ops=["GlobalMaxPool"]).run(None, {"X": x}))
    assert n == 1


@needs_ep
def test_work_splits_on_intra_op_threads_with_the_same_result():
    x = sample("float32", (4, 64, 32, 32), ("threads",))
    model = make_model("GlobalAveragePool", 17, "float32", list(x.shape))
    (one,) = ep_session(model, threads=1).run(None, {"X": x})
    (two,) = ep_session(model, threads=2).run(None, {"X": x})
    np.testing.assert_array_equal(one, two)
    assert_close(one, global_average_pool(as_f64(x)), "float32")


@needs_ep
def test_one_library_two_entry_points():
    """The EP library is the custom-op library: one file, both routes counting into the same counters."""
    assert onnx_pools.get_ep_name() in {d.ep_name for d in (onnx_pools.register_ep_library() or ort.get_ep_devices())}
    x = sample("float32", (1, 2, 4, 4), ("routes",))
    model = make_model("GlobalMaxPool", 17, "float32", [1, 2, 4, 4])
    so = onnx_pools.session_options(model=model, ort_layout=False)
    _, n = calls("GlobalMaxPool", lambda: ort.InferenceSession(model.SerializeToString(), so).run(None, {"X": x}))
    _, m = calls("GlobalMaxPool", lambda: ep_session(model).run(None, {"X": x}))
    assert (n, m) == (1, 1)


@pytest.mark.skipif(ORT_VERSION >= (1, 24), reason="checks the refusal below onnxruntime 1.24")
def test_ep_route_refused_below_1_24():
    with pytest.raises(RuntimeError, match="1.24"):
        onnx_pools.ep_session_options()


def _refused_models():
    """(what, op, model, X, reference of Y, ORT's message) of models ORT's own schemas refuse at load, before any
    execution provider: on the EP route the suite skips the cases that build such models (helpers.ort_refusal); the
    custom-op route runs them because the library's schemas replace ORT's for the ops it takes."""
    shape = [1, 1, 6]
    qlinear = dict(kernel_shape=[2], strides=[2])
    xq = np.array([[[0, 9, 4, 4, 200, 255]]], np.uint8)
    empty_zero_point = qlinear_model("uint8", shape, qlinear, (0.5, 3, 0.25, 7))
    empty_zero_point.graph.node[0].input[2] = ""  # x_zero_point given as "" (absent: 0)
    shaped_scale = qlinear_model("uint8", shape, qlinear, (0.5, 3, 0.25, 7))
    scale = next(i for i in shaped_scale.graph.initializer if i.name == "xs")
    scale.CopyFrom(numpy_helper.from_array(np.array([0.5], np.float32), "xs"))
    xb = sample("bfloat16", [1, 2, 3], ("refused", "bf16"))
    xf = sample("float32", shape, ("refused", "lp"))

    def qref(xz):
        return qlinear_average_pool(xq, 0.5, xz, 0.25, 7, [2], [2], None, "NOTSET", 0, 0, 0)[0]

    return [
        (
            "bfloat16 GlobalMaxPool-1 (ONNX lists bfloat16 from opset 22)",
            "GlobalMaxPool",
            make_model("GlobalMaxPool", 1, "bfloat16", [1, 2, 3]),
            xb,
            global_max_pool(xb),
            r"Type Error: Type 'tensor\(bfloat16\)' of input parameter \(X\) of operator \(GlobalMaxPool\)",
        ),
        (
            "LpPool-11 with ceil_mode (an attribute from opset 18)",
            "LpPool",
            make_model("LpPool", 11, "float32", shape, dict(kernel_shape=[4], strides=[4], ceil_mode=1)),
            xf,
            lp_pool(xf, [4], [4], ceil_mode=1, p=2),
            r"Unrecognized attribute: ceil_mode for operator LpPool",
        ),
        (
            "QLinearAveragePool with an empty x_zero_point input",
            "QLinearAveragePool",
            empty_zero_point,
            xq,
            qref(0),
            r"\[TypeInferenceError\] Input data type does not match the expected data type",
        ),
        (
            "QLinearAveragePool with a scale of shape [1]",
            "QLinearAveragePool",
            shaped_scale,
            xq,
            qref(3),
            r"\[TypeInferenceError\] Scale and Zero-point must be a scalar",
        ),
    ]


@needs_ep
@pytest.mark.parametrize("case", range(4), ids=["bfloat16-opset1", "lppool11-ceil_mode", "empty-zp", "scale-[1]"])
def test_models_ort_refuses_before_any_ep(case):
    """The models the EP route's skips stand for: ORT refuses them at load with its schema's message, with the EP and
    without any library alike; the custom-op route loads them and runs them on the library's kernel."""
    what, op, model, x, ref, message = _refused_models()[case]
    with pytest.raises(Exception, match=message):
        ep_session(model)
    with pytest.raises(Exception, match=message):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    so = onnx_pools.session_options(model=model)
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    (y,), ran = calls(op, lambda: run_session(sess, {"X": x}))
    assert ran == 1, what
    if op == "QLinearAveragePool":
        np.testing.assert_array_equal(y, ref, err_msg=what)
    else:
        assert_close(y, ref, str(x.dtype) if x.dtype != DTYPES["bfloat16"] else "bfloat16", 1.0, what)


@needs_ep
def test_routes_benchmark_runs_both_routes_on_the_library():
    """python -m onnx_pools.bench.routes (single-node times, custom-op route vs EP route): on its --small shapes
    every case runs the library's kernel once per route per check and both routes give the same output."""
    from onnx_pools.bench.routes import ROUTES, route_cases, routes_table

    md, ok = routes_table([1], rounds=1, small=True)
    routes_part = md.split("Control:")[0]  # the control table (a node the EP does not take) follows
    rows = [line for line in routes_part.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert ok and len(rows) == len(route_cases()) and ROUTES == ("custom-op", "ep"), md
    assert all(line.endswith("| yes | yes |") for line in rows), md


@needs_ep
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_pools_between_qlinear_convs_run_in_nhwc(dtype, tmp_path):
    """In a QOperator network ORT runs the QLinearConvs in NHWC; the EP has ORT convert the QLinearAveragePool nodes
    it takes there to ORT's NHWC form (com.ms.internal.nhwc), which runs the library's kernel with channels_last:
    all 9 pools of the bundled Inception-style model run on the library without a Transpose more than stock ORT
    runs (ORT's profile), and the output is stock ORT's."""
    import json
    from pathlib import Path

    model = (Path(__file__).resolve().parent.parent / "models" / f"inception_qop_{dtype}.onnx").read_bytes()
    x = rng_for("nhwc", dtype).standard_normal((2, 3, 71, 71)).astype(np.float32)

    def profiled_run(ep, prefix):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.enable_profiling = True
        so.profile_file_prefix = prefix
        sess = ort.InferenceSession(model, onnx_pools.ep_session_options(so) if ep else so)
        (y,), n = calls("QLinearAveragePool", lambda: sess.run(None, {"X": x}))
        with open(sess.end_profiling()) as f:
            ops = [e["args"].get("op_name") for e in json.load(f) if e.get("cat") == "Node" and "args" in e]
        return y, n, ops.count("Transpose")

    stock, _, stock_transposes = profiled_run(False, str(Path(tmp_path) / "stock"))
    y, n, transposes = profiled_run(True, str(Path(tmp_path) / "ep"))
    assert n == 9
    assert transposes == stock_transposes
    np.testing.assert_array_equal(y, stock)
