"""Real quantized models (models/avgpool_qop_{uint8,int8}.onnx, made by
models/make_quantized_models.py with onnxruntime.quantization.quantize_static, QOperator format)
run with the library: its QLinearAveragePool kernel serves the two com.microsoft
QLinearAveragePool nodes while QLinearConv / com.microsoft QLinearAdd / (De)QuantizeLinear keep
ORT's kernels.  Each pool node's output is checked against the numpy reference (given the
pool's actual input in that run), and the model's outputs against stock ORT.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from helpers import MODELS_DIR, assert_qlinear_matches, counts_one_run, make_session
from reference_qlinear import qlinear_average_pool

OP = "QLinearAveragePool"
MODELS = {"uint8": "avgpool_qop_uint8.onnx", "int8": "avgpool_qop_int8.onnx"}
NP_T = {onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT8: np.int8}


def load(tag):
    path = str(MODELS_DIR / MODELS[tag])
    model = onnx.load(path)
    assert model.ir_version <= 10
    domains = {o.domain for o in model.opset_import}
    assert "com.microsoft" in domains
    return model


def pool_nodes(model):
    return [n for n in model.graph.node if n.op_type == OP and n.domain == "com.microsoft"]


def initializers(model):
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def quant_elem_type(model):
    """Element type of a quantized tensor: that of the zero point of the node producing/consuming it."""
    inits = initializers(model)
    for n in pool_nodes(model):
        for zp in (n.input[2], n.input[4] if len(n.input) > 4 else ""):
            if zp and zp in inits:
                return numpy_helper.from_array(inits[zp]).data_type
    raise AssertionError("no zero point found")


def expose_pool_tensors(model):
    """Copy of the model with every QLinearAveragePool input X and output Y added as graph outputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    et = quant_elem_type(model)
    existing = {o.name for o in m.graph.output}
    for n in pool_nodes(m):
        for name in (n.input[0], n.output[0]):
            if name not in existing:
                m.graph.output.append(helper.make_tensor_value_info(name, et, None))
                existing.add(name)
    return m


def pool_params(model, node, zero_points=True):
    inits = initializers(model)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    for k, v in list(attrs.items()):
        if isinstance(v, bytes):
            attrs[k] = v.decode()
    xz = inits[node.input[2]] if zero_points and node.input[2] else None
    yz = inits[node.input[4]] if zero_points and len(node.input) > 4 and node.input[4] else None
    return dict(
        x_scale=inits[node.input[1]],
        x_zero_point=xz,
        y_scale=inits[node.input[3]],
        y_zero_point=yz,
        kernel_shape=attrs["kernel_shape"],
        strides=attrs.get("strides"),
        pads=attrs.get("pads"),
        auto_pad=attrs.get("auto_pad", "NOTSET"),
        ceil_mode=attrs.get("ceil_mode", 0),
        count_include_pad=attrs.get("count_include_pad", 0),
        channels_last=attrs.get("channels_last", 0),
    )


def inputs(n=4, seed=99):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((1, 8, 16, 16)).astype(np.float32) for _ in range(n - 1)]
    xs.append((3.0 * rng.standard_normal((1, 8, 16, 16))).astype(np.float32))  # beyond calibration: saturates
    return xs


def run_lib(model, x, sess):
    with counts_one_run(OP, len(pool_nodes(model))):
        outs = sess.run(None, {"X": x})
    return dict(zip([o.name for o in sess.get_outputs()], outs))


def check_pools_against_reference(model, outs, zero_points=True):
    """Each pool's output in this run equals the reference applied to its input in this run."""
    for node in pool_nodes(model):
        x, y = outs[node.input[0]], outs[node.output[0]]
        ref, pre = qlinear_average_pool(x, **pool_params(model, node, zero_points))
        assert_qlinear_matches(y, ref, pre, node.name)


class Agreement:
    def __init__(self):
        self.same = 0
        self.total = 0

    def add(self, a, b, what):
        assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
        d = np.abs(a.astype(np.int32) - b.astype(np.int32))
        assert d.max(initial=0) <= 1, f"{what}: library and stock ORT differ by {int(d.max())}"
        self.same += int((d == 0).sum())
        self.total += int(d.size)

    def check(self, what):
        frac = self.same / self.total
        print(f"{what}: {self.same}/{self.total} identical to stock ORT ({frac:.5%})")
        assert frac >= 0.999, f"{what}: only {frac:.5%} identical to stock ORT"


@pytest.mark.parametrize("tag", list(MODELS))
def test_model_file_has_qlinear_average_pool(tag):
    model = load(tag)
    nodes = pool_nodes(model)
    assert len(nodes) == 2
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    assert ("", "QLinearConv") in ops and ("com.microsoft", "QLinearAdd") in ops
    et = NP_T[quant_elem_type(model)]
    assert et == {"uint8": np.uint8, "int8": np.int8}[tag]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("tag", list(MODELS))
def test_quantized_model_matches_reference_and_stock(tag, threads):
    model = expose_pool_tensors(load(tag))
    lib = make_session(model, threads=threads)
    stock = make_session(model, library=False, threads=threads)
    y_name = model.graph.output[0].name
    y_scale = float(initializers(model)[pool_nodes(model)[-1].input[3]])
    agree = Agreement()
    for x in inputs():
        outs = run_lib(model, x, lib)
        check_pools_against_reference(model, outs)
        souts = dict(zip([o.name for o in stock.get_outputs()], stock.run(None, {"X": x})))
        for node in pool_nodes(model):
            agree.add(outs[node.output[0]], souts[node.output[0]], f"{tag} {node.name}")
        # final float output: DequantizeLinear of the last pool -> within one quantization step
        np.testing.assert_allclose(outs[y_name], souts[y_name], rtol=0, atol=y_scale * 1.0001)
    agree.check(f"{tag} model, {threads} thread(s)")


def without_zero_points(model, style):
    """Copy with the zero-point inputs of every QLinearAveragePool node removed.
    style 'empty': x_zero_point and y_zero_point given as ''; 'omitted': x '' and y dropped."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in pool_nodes(m):
        ins = list(n.input)
        ins[2] = ""
        if style == "empty":
            ins[4] = ""
        else:
            ins = ins[:4]
        del n.input[:]
        n.input.extend(ins)
    return m


def with_explicit_zero_zero_points(model):
    """The expectation for absent zero points: the same model with explicit zero-valued ones."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = initializers(m)
    for i, n in enumerate(pool_nodes(m)):
        dt = inits[n.input[2]].dtype
        name = f"qlap_test_zero_zp_{i}"
        m.graph.initializer.append(numpy_helper.from_array(np.zeros((), dtype=dt), name))
        n.input[2] = name
        n.input[4] = name
    return m


@pytest.mark.parametrize("style", ["empty", "omitted"])
@pytest.mark.parametrize("tag", list(MODELS))
def test_quantized_model_without_zero_points(tag, style):
    base = expose_pool_tensors(load(tag))
    variant = without_zero_points(base, style)
    expected_model = with_explicit_zero_zero_points(base)

    # stock ORT cannot run the variant (type inference fails without the optional zero points)
    with pytest.raises(Exception):  # noqa: B017 - which exception class ORT raises here is not the point
        make_session(variant, library=False).run(None, {"X": inputs(1)[0]})

    lib_v = make_session(variant)
    lib_base = make_session(base)
    stock_exp = make_session(expected_model, library=False)
    inits = initializers(base)
    agree = Agreement()
    saw_nonzero = False
    for x in inputs():
        outs = run_lib(variant, x, lib_v)
        check_pools_against_reference(variant, outs, zero_points=False)
        exp = dict(zip([o.name for o in stock_exp.get_outputs()], stock_exp.run(None, {"X": x})))
        base_outs = run_lib(base, x, lib_base)
        for node in pool_nodes(base):
            agree.add(outs[node.output[0]], exp[node.output[0]], f"{tag} {node.name} without zero points")
            zps_zero = int(inits[node.input[2]]) == 0 and int(inits[node.input[4]]) == 0
            if zps_zero and np.array_equal(outs[node.input[0]], base_outs[node.input[0]]):
                # zero points were 0: removing them changes nothing
                np.testing.assert_array_equal(outs[node.output[0]], base_outs[node.output[0]])
            if not zps_zero:
                saw_nonzero = True
    agree.check(f"{tag} model without zero points ({style})")
    assert saw_nonzero  # both models have a pool with non-zero zero points (see PROVENANCE_quantized.md)
