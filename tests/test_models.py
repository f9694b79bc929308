"""Every bundled model (models/*.onnx) runs with the library, its pooling nodes are served by the library's kernels,
and the results are right:

* each pooling node's output is compared with a float64 numpy reference computed from that node's actual input
  (both exposed as extra graph outputs), with the tolerance of the node's element type;
* where stock ONNX Runtime can run the model, the model's outputs match stock ORT's;
* the float16 / bfloat16 / float64 variants of a model agree with the float32 variant run by stock ORT (same
  weights), which checks the models themselves.
"""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnx_pools
from helpers import (
    MODELS_DIR,
    ROUTE,
    call_count_moves,
    elem_name,
    make_session,
    np_dtype,
    pooling_nodes,
    random_inputs,
    run_session,
    value_types,
)
from reference import BF16, global_average_pool, global_lp_pool, global_max_pool, input_scale, lp_pool, to_f64
from reference_qlinear import near_tie, qlinear_average_pool

MODEL_FILES = sorted(MODELS_DIR.glob("*.onnx"))
IDS = [p.name for p in MODEL_FILES]

# (rtol, atol factor of the input scale) for the pooling output vs the float64 reference
TOL = {"float": (1e-5, 1e-6), "double": (1e-12, 1e-12), "float16": (1e-3, 1e-5), "bfloat16": (8e-3, 1e-5)}

# model name prefix -> op it must contain
EXPECTED_OP = {
    "cnn_gap_": "GlobalAveragePool",
    "cnn_gmp_": "GlobalMaxPool",
    "cnn_lppool2d_": "LpPool",
    "cnn_lppool1d_": "LpPool",
    "globallppool_": "GlobalLpPool",
    "avgpool_qop_": "QLinearAveragePool",
    # the whole-model benchmark set (bench --whole-models)
    "resnet_gap_": "GlobalAveragePool",
    "vgg_gmp_": "GlobalMaxPool",
    "lpnet_lppool_": "LpPool",
    "inception_qop_": "QLinearAveragePool",
}
# whole-model benchmark set: {file: {op: node count}}; symbolic batch dimension
WHOLE_MODELS = {
    "resnet_gap_f32.onnx": {"GlobalAveragePool": 1},
    "vgg_gmp_f32.onnx": {"GlobalMaxPool": 1},
    "lpnet_lppool_f32.onnx": {"LpPool": 2, "GlobalAveragePool": 1},
    "inception_qop_uint8.onnx": {"QLinearAveragePool": 9},
    "inception_qop_int8.onnx": {"QLinearAveragePool": 9},
}


def test_bundled_models_present():
    names = set(IDS)
    for fam in ("cnn_gap", "cnn_gmp", "cnn_lppool2d", "cnn_lppool1d"):
        for t in ("f32", "f16", "bf16", "f64"):
            assert f"{fam}_{t}.onnx" in names
    assert "globallppool_opset22_f32.onnx" in names
    assert set(WHOLE_MODELS) <= names
    assert sum(p.stat().st_size for p in MODELS_DIR.iterdir()) < 4_000_000


# their pooling nodes' input shapes at batch 1
WHOLE_MODEL_POOLED = {
    "resnet_gap_f32.onnx": [[1, 256, 56, 56]],
    "vgg_gmp_f32.onnx": [[1, 256, 56, 56]],
    "lpnet_lppool_f32.onnx": [[1, 32, 64, 64], [1, 64, 32, 32], [1, 128, 15, 15]],
    "inception_qop_uint8.onnx": [[1, 64, 35, 35]] * 3 + [[1, 128, 17, 17]] * 4 + [[1, 192, 8, 8]] * 2,
}
WHOLE_MODEL_POOLED["inception_qop_int8.onnx"] = WHOLE_MODEL_POOLED["inception_qop_uint8.onnx"]


@pytest.mark.parametrize("name", sorted(WHOLE_MODELS))
def test_whole_model_structure(name):
    """The benchmark models have their pooling nodes and a symbolic batch (test_model_runs_with_library checks the
    pooled sizes)."""
    model = onnx.load(str(MODELS_DIR / name))
    ops = [n.op_type for n, _ in pooling_nodes(model)]
    assert {op: ops.count(op) for op in set(ops)} == WHOLE_MODELS[name]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("path", MODEL_FILES, ids=IDS)
def test_model_contains_intended_pooling_op(path):
    model = onnx.load(str(path))
    ops = [n.op_type for n, _ in pooling_nodes(model)]
    for prefix, op in EXPECTED_OP.items():
        if path.name.startswith(prefix):
            assert op in ops, f"{path.name}: no {op} node (nodes: {[n.op_type for n in model.graph.node]})"
    if path.name.startswith("globallppool_opset22"):
        assert {o.domain: o.version for o in model.opset_import}[""] == 22
    if path.name.startswith("cnn_"):  # the torch exports must not have decomposed the pooling op
        assert not {"MaxPool", "AveragePool", "Pow"} & {n.op_type for n in model.graph.node}
        t = path.stem.rsplit("_", 1)[1]
        vis = value_types(model)
        ((node, _),) = pooling_nodes(model)
        want = {"f32": "float", "f16": "float16", "bf16": "bfloat16", "f64": "double"}[t]
        assert elem_name(vis.get(node.input[0])) == want


def _exposed(model):
    """model + every pooling node's X input and first output as extra graph outputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    vis = value_types(model)
    have = {o.name for o in m.graph.output}
    nodes = [n for n, _ in pooling_nodes(model)]
    for n in nodes:
        x_type = vis[n.input[0]].type.tensor_type.elem_type
        for name in (n.input[0], n.output[0]):
            if name not in have:
                m.graph.output.append(helper.make_tensor_value_info(name, x_type, None))
                have.add(name)
    return m, nodes


def _init(model, name):
    if not name:
        return None
    for i in model.graph.initializer:
        if i.name == name:
            return numpy_helper.to_array(i)
    raise AssertionError(f"{name} is not an initializer")


def _check_node(model, node, x, y, what):
    a = _attrs(node)
    op = node.op_type
    if op == "QLinearAveragePool":
        ins = list(node.input) + [""] * (5 - len(node.input))
        ref, pre = qlinear_average_pool(
            x,
            _init(model, ins[1]),
            _init(model, ins[2]),
            _init(model, ins[3]),
            _init(model, ins[4]),
            a["kernel_shape"],
            a.get("strides"),
            a.get("pads"),
            a.get("auto_pad", b"NOTSET").decode(),
            a.get("ceil_mode", 0),
            a.get("count_include_pad", 0),
            a.get("channels_last", 0),
        )
        assert y.dtype == ref.dtype and y.shape == ref.shape, what
        bad = (y != ref) & ~near_tie(pre)
        assert not bad.any(), f"{what}: {int(bad.sum())} elements differ from the reference"
        return
    if op == "GlobalAveragePool":
        ref = global_average_pool(x)
    elif op == "GlobalMaxPool":
        ref = global_max_pool(x)
    elif op == "GlobalLpPool":
        ref = global_lp_pool(x, a.get("p", 2))
    elif op == "LpPool":
        ref = lp_pool(
            x,
            a["kernel_shape"],
            a.get("strides"),
            a.get("pads"),
            a.get("dilations"),
            a.get("auto_pad", b"NOTSET").decode(),
            a.get("ceil_mode", 0),
            a.get("p", 2),
        )
    else:
        raise AssertionError(op)
    tname = {
        np.dtype(np.float32): "float",
        np.dtype(np.float64): "double",
        np.dtype(np.float16): "float16",
        BF16: "bfloat16",
    }[np.asarray(y).dtype]
    rtol, af = TOL[tname]
    assert y.dtype == x.dtype and y.shape == ref.shape, what
    np.testing.assert_allclose(to_f64(y), ref, rtol=rtol, atol=af * input_scale(x), err_msg=what)


# the big benchmark models at 1 thread only (CI time); every op runs at 2 threads in the small models
RUNS = [(p, t) for t in (1, 2) for p in MODEL_FILES if t == 1 or p.name not in WHOLE_MODELS]


def _qdq_average_pool_units(model):
    """The AveragePool nodes of `model` fed by a DequantizeLinear and read by a QuantizeLinear alone."""
    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    readers = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.op_type)
    return sum(
        n.op_type == "AveragePool"
        and producer.get(n.input[0]) == "DequantizeLinear"
        and readers.get(n.output[0]) == ["QuantizeLinear"]
        for n in model.graph.node
    )


@pytest.mark.parametrize("path,threads", RUNS, ids=[f"{p.name}-{t}" for p, t in RUNS])
def test_model_runs_with_library(path, threads):
    model = onnx.load(str(path))
    exposed, nodes = _exposed(model)
    sess = make_session(exposed.SerializeToString(), threads=threads)
    feeds = random_inputs(sess, np.random.default_rng(1))
    with call_count_moves() as moved:
        outs = dict(zip([o.name for o in sess.get_outputs()], run_session(sess, feeds)))
    want = {op: sum(n.op_type == op for n in nodes) for op in {n.op_type for n in nodes}}
    if ROUTE == "ep":  # the EP fuses each DequantizeLinear -> AveragePool -> QuantizeLinear unit onto its kernel
        units = _qdq_average_pool_units(model)
        if units:
            want["QLinearAveragePool"] = want.get("QLinearAveragePool", 0) + units
    assert moved == want, f"{path.name}: library call counters moved by {moved}, expected {want}"
    checked = nodes
    if path.name.startswith("inception_qop_"):
        # the numpy reference is the slow part (0.55 s for all 9 nodes; CI also runs this under qemu): one pool per
        # stage (its shape and count_include_pad); all 9 ran on the library (counter) and the outputs match stock
        checked = [nodes[0], nodes[3], nodes[7]]
    for n in checked:
        _check_node(model, n, outs[n.input[0]], outs[n.output[0]], f"{path.name}: {n.name or n.op_type}")
    if path.name in WHOLE_MODELS:  # batch 1 (random_inputs: symbolic dims -> 1); the sizes the README quotes
        assert [list(outs[n.input[0]].shape) for n in nodes] == WHOLE_MODEL_POOLED[path.name]

    # vs stock ORT, where stock ORT can run the model
    try:
        stock = make_session(model.SerializeToString(), library=False, threads=threads)
    except Exception:
        assert not path.name.endswith(("_f32.onnx", "_f16.onnx")) or "opset22" in path.name, (
            f"stock ORT should run {path.name}"
        )
        return
    ref = run_session(stock, feeds)
    for meta, r in zip(stock.get_outputs(), ref):
        y = outs[meta.name]
        assert y.dtype == r.dtype and y.shape == r.shape
        if y.dtype.kind in "iu":
            np.testing.assert_array_equal(y, r, err_msg=path.name)
        elif y.dtype == np.float16 and onnx_pools._fp16_vector_cpu():
            # aarch64 with FP16 arithmetic: stock ORT runs float16 Convs and pools in float16 arithmetic (its NHWC
            # kernels), so its outputs carry float16 sums' rounding (0.4% seen); the library's own values are
            # checked against the float64 reference above
            top = float(np.abs(r.astype(np.float64)).max())
            np.testing.assert_allclose(
                y.astype(np.float64), r.astype(np.float64), rtol=1e-2, atol=1e-2 * top, err_msg=path.name
            )
        elif y.dtype == np.float16:  # stock runs float16 via Casts to float: one rounding apart at most
            np.testing.assert_allclose(
                y.astype(np.float64), r.astype(np.float64), rtol=1e-3, atol=1e-5, err_msg=path.name
            )
        elif "_qdq_" in path.name:
            # the fused QDQ pools round their averages once, where ORT (int8 units: a float pool between its
            # DequantizeLinear and QuantizeLinear) rounds after float arithmetic: one step of Y at most
            (dq,) = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == meta.name]
            step = float(_init(model, dq.input[1]))
            np.testing.assert_allclose(y, r, rtol=0, atol=step * 1.001, err_msg=path.name)
        elif path.name.startswith("inception_qop_"):
            # 9 pools feeding 64 QLinearConvs; the library's pools agree with ORT's (identical in every seed tried),
            # one quantization step allowed for a rounding near a tie
            step = _dequantize_scale(model)
            np.testing.assert_allclose(y, r, rtol=0, atol=step * 1.001, err_msg=path.name)
        elif path.name.startswith("avgpool_qop_"):
            # Y = DequantizeLinear(quantized output): allow one quantization step from rounding near ties
            step = float(_init(model, "Y_scale"))
            np.testing.assert_allclose(y, r, rtol=0, atol=step * 1.001, err_msg=path.name)
        else:
            np.testing.assert_allclose(y, r, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(r).max())), err_msg=path.name)


def _dequantize_scale(model):
    (node,) = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    return float(_init(model, node.input[1]))


VARIANTS = [
    (fam, t)
    for fam in ("cnn_gap", "cnn_gmp", "cnn_lppool2d", "cnn_lppool1d")
    for t in ("f16", "bf16", "f64")
    if (MODELS_DIR / f"{fam}_{t}.onnx").exists()
]


@pytest.mark.parametrize("fam,t", VARIANTS, ids=[f"{f}_{t}" for f, t in VARIANTS])
def test_type_variant_matches_float32_model(fam, t):
    """The f16/bf16/f64 variant run with the library vs the float32 model run by stock ORT on the same values."""
    sess = make_session((MODELS_DIR / f"{fam}_{t}.onnx").read_bytes())
    stock32 = make_session((MODELS_DIR / f"{fam}_f32.onnx").read_bytes(), library=False)
    (x32,) = random_inputs(stock32, np.random.default_rng(2)).values()
    dt = np_dtype(sess.get_inputs()[0].type)
    x = x32.astype(dt)
    (y,) = run_session(sess, {sess.get_inputs()[0].name: x})
    (r,) = stock32.run(None, {stock32.get_inputs()[0].name: x.astype(np.float32)})
    assert y.dtype == dt and y.shape == r.shape
    # f64: conv in float32 in both models, pooling in double vs float. bf16: one bf16 rounding of the conv output
    # and one of the result. f16: the whole network runs in float16.
    rtol = {"f64": 1e-5, "bf16": 2e-2, "f16": 1e-2}[t]
    scale = float(np.abs(r).max())
    np.testing.assert_allclose(to_f64(y), r.astype(np.float64), rtol=rtol, atol=rtol * scale, err_msg=f"{fam}_{t}")
