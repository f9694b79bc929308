"""Every documented way to register the library, on quantized and float models, at every graph optimization level,
against stock ONNX Runtime.

The models: two small CNNs (Conv -> Relu -> AveragePool 3x3 -> Conv -> GlobalAveragePool; and one that adds Add,
Sigmoid, Mul, LeakyRelu, Concat and a second AveragePool), as float, as quantize_static QDQ (its default format:
uint8 and int8 activations, without quant_pre_process, so importing only the standard domain; and the same with a
com.microsoft opset import added) and as QOperator models. At load ORT fuses the QDQ units into com.microsoft
QLinear* nodes (QLinearAveragePool, QLinearGlobalAveragePool, QLinearAdd, ...), which is what a library-registered
com.microsoft domain breaks in a model that does not import com.microsoft (ORT registers a custom domain at opset
version 1000).

Each (model, registration, level) either loads and gives stock's outputs (quantized outputs within one quantization
step with >= 99.9% of the elements identical, float outputs to float rounding), the library's call counters showing
that its kernels ran for exactly the nodes it takes, or session_options refuses the selection with a ValueError that
says why. The expected node counts come from stock ORT's optimized graph at the same level.
"""

import collections
import platform
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_pools
from helpers import ORT_SCHEMA_ONLY_AT_BLOCKED_START

QLAP = "QLinearAveragePool"
GAP = "GlobalAveragePool"
STANDARD = ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LpPool"]
KEEPS_QUANTIZED = ["float", "uint8", "int8"]  # a types selection that leaves out float16, double and bfloat16
SHAPE = [4, 3, 16, 16]
LEVELS = {
    "disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
GRAPHS = ["pools", "mixed"]
# float, or activations (u8/s8) x format; "+ms": the QDQ model with a com.microsoft opset import added
FORMS = ["float", "u8-qdq", "u8-qdq+ms", "u8-qop", "s8-qdq", "s8-qdq+ms", "s8-qop"]
MODELS = [f"{g}/{f}" for g in GRAPHS for f in FORMS]


# --------------------------------------------------------------------------- models
def _conv(rng, name, x, cin, cout, initializers):
    w = (rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    initializers += [numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(b, name + "_b")]
    return helper.make_node("Conv", [x, name + "_w", name + "_b"], [name], pads=[1, 1, 1, 1])


def _float_model(graph, rng):
    inits = []
    pool = helper.make_node("AveragePool", ["r1"], ["p1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    head = [
        _conv(rng, "c1", "X", 3, 16 if graph == "pools" else 8, inits),
        helper.make_node("Relu", ["c1"], ["r1"]),
        pool,
    ]
    if graph == "pools":
        nodes, outputs = head + [_conv(rng, "c2", "p1", 16, 16, inits), helper.make_node(GAP, ["c2"], ["Y"])], ["Y"]
    else:
        nodes = head + [
            _conv(rng, "c2", "p1", 8, 8, inits),
            helper.make_node("Add", ["c2", "p1"], ["a"]),
            helper.make_node("Sigmoid", ["a"], ["s"]),
            helper.make_node("Mul", ["s", "a"], ["m"]),
            helper.make_node("LeakyRelu", ["m"], ["l"], alpha=0.1),
            helper.make_node("Concat", ["l", "p1"], ["cc"], axis=1),
            helper.make_node("AveragePool", ["cc"], ["P"], kernel_shape=[2, 2], strides=[2, 2]),
            _conv(rng, "c3", "P", 16, 8, inits),
            helper.make_node(GAP, ["c3"], ["Y"]),
        ]
        outputs = ["Y", "P"]
    g = helper.make_graph(
        nodes,
        graph,
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", *SHAPE[1:]])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@dataclass
class Model:
    data: bytes
    imports_com_microsoft: bool
    steps: dict  # graph output -> quantization step (the scale of the DequantizeLinear producing it); float: absent
    conv_fed_gap: bool  # a float GlobalAveragePool fed by a Conv (session_options(model=...) may leave it to ORT)


def _steps(model):
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    steps = {}
    for out in model.graph.output:
        node = producers.get(out.name)
        if node is not None and node.op_type == "DequantizeLinear":
            steps[out.name] = float(inits[node.input[1]])
    return steps


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{name: Model} for MODELS, quantized from random calibration data (built once per test session)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Calibration(CalibrationDataReader):
        def __init__(self, seed):
            rng = np.random.default_rng(seed)
            self.feeds = iter([{"X": rng.standard_normal([1, *SHAPE[1:]]).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    folder = tmp_path_factory.mktemp("qdq_models")
    out = {}
    for graph in GRAPHS:
        float_model = _float_model(graph, np.random.default_rng(len(graph)))
        float_path = folder / f"{graph}.onnx"
        onnx.save(float_model, float_path)
        out[f"{graph}/float"] = Model(float_model.SerializeToString(), False, {}, True)
        for act, qtype in (("u8", QuantType.QUInt8), ("s8", QuantType.QInt8)):
            for fmt, qformat in (("qdq", QuantFormat.QDQ), ("qop", QuantFormat.QOperator)):
                path = folder / f"{graph}_{act}_{fmt}.onnx"
                quantize_static(
                    str(float_path),
                    str(path),
                    Calibration(7),
                    quant_format=qformat,
                    activation_type=qtype,
                    weight_type=QuantType.QInt8,
                )
                q = onnx.load(path)
                imports = any(o.domain == "com.microsoft" for o in q.opset_import)
                assert imports == (fmt == "qop"), "QDQ without quant_pre_process imports only the standard domain"
                out[f"{graph}/{act}-{fmt}"] = Model(q.SerializeToString(), imports, _steps(q), False)
                if fmt == "qdq":
                    q.opset_import.append(helper.make_opsetid("com.microsoft", 1))
                    out[f"{graph}/{act}-qdq+ms"] = Model(q.SerializeToString(), True, _steps(q), False)
    assert sorted(out) == sorted(MODELS)
    for m in out.values():
        assert m.steps or not m.imports_com_microsoft
    return out


def _options(level):
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return so


def _input():
    return {"X": (1.5 * np.random.default_rng(3).standard_normal(SHAPE)).astype(np.float32)}  # beyond calibration


@pytest.fixture(scope="module")
def stock(models, tmp_path_factory):
    """stock(name, level) -> (outputs, Counter of (domain, op type) of stock ORT's optimized graph), cached."""
    folder = tmp_path_factory.mktemp("stock_optimized")
    cache = {}

    def get(name, level):
        if (name, level) not in cache:
            so = _options(level)
            so.optimized_model_filepath = str(folder / f"{name.replace('/', '_')}_{level}.onnx")
            sess = ort.InferenceSession(models[name].data, so, providers=["CPUExecutionProvider"])
            graph = onnx.load(so.optimized_model_filepath).graph
            cache[name, level] = (
                sess.run(None, _input()),
                collections.Counter((n.domain, n.op_type) for n in graph.node),
            )
        return cache[name, level]

    return get


# --------------------------------------------------------------------------- registrations
def _raw(so, data):
    so.register_custom_ops_library(onnx_pools.get_library_path())
    return so


@dataclass
class Registration:
    register: object  # (SessionOptions, model bytes) -> SessionOptions
    ops: object  # "default" (the standard-domain ops), "model" (session_options' choice), "all", or op names
    with_model: bool
    types: bool  # a types selection: the library's kernels for every node it takes (no NCHWc hand-over)


REGISTRATIONS = {
    "register_custom_ops_library": Registration(_raw, "default", False, False),
    "session_options()": Registration(lambda so, m: onnx_pools.session_options(so), "default", False, False),
    "model=": Registration(lambda so, m: onnx_pools.session_options(so, model=m), "model", True, False),
    "ops=all": Registration(lambda so, m: onnx_pools.session_options(so, ops="all"), "all", False, False),
    "model=,ops=all": Registration(
        lambda so, m: onnx_pools.session_options(so, model=m, ops="all"), "all", True, False
    ),
    "ops=standard": Registration(lambda so, m: onnx_pools.session_options(so, ops=STANDARD), STANDARD, False, False),
    "ops=[QLAP]": Registration(lambda so, m: onnx_pools.session_options(so, ops=[QLAP]), [QLAP], False, False),
    "model=,ops=[QLAP]": Registration(
        lambda so, m: onnx_pools.session_options(so, model=m, ops=[QLAP]), [QLAP], True, False
    ),
    "model=,ops=[GAP,QLAP]": Registration(
        lambda so, m: onnx_pools.session_options(so, model=m, ops=[GAP, QLAP]), [GAP, QLAP], True, False
    ),
    "types=float": Registration(lambda so, m: onnx_pools.session_options(so, types=["float"]), "default", False, True),
    "model=,types": Registration(
        lambda so, m: onnx_pools.session_options(so, model=m, types=KEEPS_QUANTIZED), "model", True, True
    ),
    "model=,ops=all,types": Registration(
        lambda so, m: onnx_pools.session_options(so, model=m, ops="all", types=KEEPS_QUANTIZED), "all", True, True
    ),
}


def _expected(reg, model, level):
    """None when session_options must refuse the selection, else the set of ops the library takes."""
    explicit_qlap = reg.ops == "all" and not reg.with_model or isinstance(reg.ops, list) and QLAP in reg.ops
    if explicit_qlap and not (reg.with_model and model.imports_com_microsoft):
        return None
    if isinstance(reg.ops, list):
        return set(reg.ops)
    takes = set(STANDARD) | ({QLAP} if reg.ops in ("model", "all") and model.imports_com_microsoft else set())
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    if reg.ops == "model" and level == "all" and x86 and model.conv_fed_gap:
        takes.discard(GAP)  # left to ORT's NCHWc layout
    return takes


def _assert_as_stock(model, names, ys, stock_ys, what):
    for name, y, s in zip(names, ys, stock_ys):
        assert y.shape == s.shape, what
        step = model.steps.get(name)
        if step is None:
            np.testing.assert_allclose(y, s, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(s).max())), err_msg=what)
            continue
        diff = np.abs(y.astype(np.float64) - s.astype(np.float64))
        assert diff.max() <= step * (1 + 1e-5), f"{what}: {name} differs by {diff.max() / step:.3f} steps"
        assert np.mean(diff == 0) >= 0.999, f"{what}: {name}: {np.mean(diff != 0):.4%} of the elements differ"


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("registration", list(REGISTRATIONS))
@pytest.mark.parametrize("name", MODELS)
def test_registration_loads_and_matches_stock(models, stock, name, registration, level):
    model, reg = models[name], REGISTRATIONS[registration]
    what = f"{name}, {registration}, level {level}"
    takes = _expected(reg, model, level)
    if takes is None:
        with pytest.raises(ValueError, match=r"com\.microsoft.*opset version 1000.*model"):
            reg.register(_options(level), model.data)
        return
    so = reg.register(_options(level), model.data)
    sess = ort.InferenceSession(model.data, so, providers=["CPUExecutionProvider"])
    before = onnx_pools.call_counts()
    ys = sess.run(None, _input())
    after = onnx_pools.call_counts()
    stock_ys, stock_graph = stock(name, level)
    _assert_as_stock(model, [o.name for o in sess.get_outputs()], ys, stock_ys, what)
    # the library serves the plain GlobalAveragePool nodes left in stock's optimized graph, and those ORT's NCHWc
    # rewrite takes where its kernels are chosen for every node (model=, types=); every QLinearAveragePool node
    # (from the model or fused by ORT) where it takes QLinearAveragePool
    nchwc = reg.with_model or (reg.types and not ORT_SCHEMA_ONLY_AT_BLOCKED_START)
    want = {op: 0 for op in after}
    if GAP in takes:
        want[GAP] = stock_graph["", GAP] + (stock_graph["com.microsoft.nchwc", GAP] if nchwc else 0)
    if QLAP in takes:
        want[QLAP] = stock_graph["com.microsoft", QLAP]
    assert {op: after[op] - before[op] for op in after} == want, what


# --------------------------------------------------------------------------- what the models exercise
@pytest.mark.parametrize("level", ["extended", "all"])
def test_models_get_orts_com_microsoft_fusions(stock, level):
    """The failure mode is present: ORT fuses the QDQ models' units into com.microsoft nodes at these levels, in
    models that do not import com.microsoft (with uint8 activations: AveragePool, GlobalAveragePool, Add, Mul,
    Concat, Sigmoid, LeakyRelu), and the library's QLinearAveragePool kernel has fused nodes to serve."""
    fused_u8 = {"QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearAdd", "QLinearMul", "QLinearConcat"}
    fused_u8 |= {"QLinearSigmoid", "QLinearLeakyRelu"}
    _, graph = stock("mixed/u8-qdq", level)
    assert fused_u8 <= {op for domain, op in graph if domain == "com.microsoft"}
    for name in MODELS:
        if name.endswith("-qdq"):
            _, graph = stock(name, level)
            assert any(domain == "com.microsoft" for domain, _ in graph), name
    for act in ("u8", "s8"):
        assert stock(f"pools/{act}-qdq+ms", level)[1]["com.microsoft", QLAP] >= 1


def test_no_com_microsoft_fusion_below_extended(stock):
    """At levels disable_all and basic the QDQ units stay as they are (the float pools between
    DequantizeLinear and QuantizeLinear are then the library's)."""
    for name in MODELS:
        if "-qdq" in name:
            for level in ("disable_all", "basic"):
                assert not any(d == "com.microsoft" for d, _ in stock(name, level)[1]), (name, level)


# --------------------------------------------------------------------------- refusals and the raw route's limits
def test_refusal_says_why_and_what_to_do(models):
    qdq = models["pools/u8-qdq"].data
    with pytest.raises(ValueError) as no_model:
        onnx_pools.session_options(ops="all")
    with pytest.raises(ValueError) as no_import:
        onnx_pools.session_options(ops=[QLAP], model=qdq)
    for e in (no_model, no_import):
        text = str(e.value)
        assert "QLinearAveragePool" in text and "opset version 1000" in text and "does not import" in text
    assert "Pass model=" in str(no_model.value)
    assert "opset import of com.microsoft" in str(no_import.value) and "plugin execution provider" in str(
        no_import.value
    )


@pytest.mark.parametrize(
    "kwargs, left_out",
    [
        (dict(types=["double"]), "float"),
        (dict(types="float16,bfloat16"), "float"),
        (dict(ops=[GAP], types=["uint8", "int8"]), "float"),
        (dict(ops=[QLAP], types=["uint8"], model_name="pools/u8-qop"), "int8"),
        (dict(ops="all", types=["float", "int8"], model_name="pools/u8-qop"), "uint8"),
    ],
)
def test_types_leaving_out_a_type_orts_kernels_would_need_are_refused(models, kwargs, left_out):
    """A type left out of a taken op has no kernel at all (ORT's own kernels do not match the library's schema):
    float nodes of the standard ops, uint8/int8 nodes of QLinearAveragePool. session_options refuses it."""
    kwargs = dict(kwargs)
    name = kwargs.pop("model_name", None)
    if name:
        kwargs["model"] = models[name].data
    with pytest.raises(ValueError, match=f"leaves out {left_out} while the library takes"):
        onnx_pools.session_options(**kwargs)


def test_model_choice_leaves_qlinear_average_pool_out_when_types_leave_out_its_types(models, stock):
    """session_options(model=..., types=[...]) without ops: QLinearAveragePool is taken only when the types keep
    both its types, so the choice never breaks the model."""
    model = models["mixed/u8-qop"]
    sess = ort.InferenceSession(
        model.data, onnx_pools.session_options(_options("all"), model=model.data, types="float")
    )
    before = onnx_pools.call_counts()[QLAP]
    ys = sess.run(None, _input())
    assert onnx_pools.call_counts()[QLAP] == before
    _assert_as_stock(model, [o.name for o in sess.get_outputs()], ys, stock("mixed/u8-qop", "all")[0], "types=float")


def _raw_with_config(level, **entries):
    so = _options(level)
    for key, value in entries.items():
        so.add_session_config_entry(getattr(onnx_pools, f"{key.upper()}_CONFIG_KEY"), value)
    return _raw(so, None)


@pytest.mark.parametrize("level", ["extended", "all"])
def test_raw_config_taking_qlinear_average_pool_needs_the_com_microsoft_import(models, stock, level):
    """The constraint the docs state for registration from C/C++ with the config entry set by hand: with
    onnx_pools.ops naming QLinearAveragePool, a model must import com.microsoft; one that does not fails in ORT at
    these levels. With the import, ORT's fused pools run on the library."""
    for act in ("u8", "s8"):
        plain = models[f"pools/{act}-qdq"].data
        with pytest.raises(Exception, match=r"com\.microsoft:QLinear\w+\(-1\) is not a registered function/op"):
            ort.InferenceSession(plain, _raw_with_config(level, ops="all"), providers=["CPUExecutionProvider"])
        name = f"pools/{act}-qdq+ms"
        sess = ort.InferenceSession(models[name].data, _raw_with_config(level, ops=QLAP))
        before = onnx_pools.call_counts()[QLAP]
        ys = sess.run(None, _input())
        assert onnx_pools.call_counts()[QLAP] - before == stock(name, level)[1]["com.microsoft", QLAP] >= 1
        _assert_as_stock(models[name], [o.name for o in sess.get_outputs()], ys, stock(name, level)[0], name)


def test_raw_config_types_must_keep_the_taken_ops_types(models):
    """The other constraint of the hand-set config: onnx_pools.types leaving out float makes float nodes of the
    taken ops find no kernel in ORT."""
    with pytest.raises(
        Exception, match="(Could not find an implementation|Failed to find kernel) for GlobalAveragePool"
    ):
        ort.InferenceSession(models["pools/float"].data, _raw_with_config("all", types="double"))
