"""Property-based tests (hypothesis): random shapes, attributes, element types, opsets and input values for every
op, each example checked against the independent references (reference.py, reference_qlinear.py) and proven to
have run on the library's kernel (onnx_pools.call_counts()).

Reproducible by default: the "ci" profile is derandomized (the same examples on every run) with a bounded number
of examples per test. Deeper runs (the tests carry the `deep` marker; naming it in -m switches the profile):
    PYTHONPATH=. python -m pytest tests/test_properties.py -q -m deep          # randomized, 2000 each
    ... --property-examples 500                                                 # either profile, N each
A failure prints the falsifying example and (deep profile) the @reproduce_failure blob.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import reference as R
import reference_qlinear as RQ
from helpers import (
    ALL_DTYPES,
    CASE_COUNTS,
    assert_close_with_subnormals,
    assert_qlinear_matches,
    counts_one_run,
    load_time_shape,
    make_session,
    option,
    pool_model,
    qlinear_model,
    qlinear_reference,
    refused_by_ort,
    run_session,
    selected,
    strip_ort_wrapper,
)

_COMMON = dict(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("onnx_pools_ci", max_examples=250, derandomize=True, **_COMMON)
settings.register_profile("onnx_pools_deep", max_examples=2000, derandomize=False, **_COMMON)
_PROFILE = "onnx_pools_deep" if selected("deep") else "onnx_pools_ci"
_EXAMPLES = option("property_examples")
SETTINGS = settings(settings.get_profile(_PROFILE), **({"max_examples": _EXAMPLES} if _EXAMPLES else {}))
pytestmark = pytest.mark.deep

GLOBAL_OPS = ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]
GLOBAL_OPSETS = [1, 2, 7, 11, 13, 18, 21, 22]
LP_OPSETS = [1, 2, 11, 18, 22]
FLOAT_P = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 7.25, 10.0]

DENORMAL_SCALE = {"float32": 1e-39, "float64": 1e-310, "float16": 4e-5, "bfloat16": 5e-39}


# --------------------------------------------------------------------------- input values


@st.composite
def value_spec(draw, bounded):
    """How to fill an input: a distribution, a seed, and a few special values at chosen positions.
    bounded: no values near the top of the type's range (for means: see global_case)."""
    kinds = ["normal", "wide", "positive", "small integers", "constant", "tiny", "denormal"]
    if not bounded:
        kinds.append("huge")
    kind = draw(st.sampled_from(kinds))
    specials = []
    if draw(st.integers(0, 3)) == 0:
        specials = draw(
            st.lists(
                st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from([np.inf, -np.inf, np.nan, 0.0, -0.0])),
                min_size=1,
                max_size=3,
            )
        )
    return kind, draw(st.integers(0, 2**32 - 1)), specials


def make_values(spec, shape, dtype):
    kind, seed, specials = spec
    rng = np.random.default_rng(seed)
    if kind == "normal":
        x = rng.standard_normal(shape) * 3
    elif kind == "wide":
        x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)
    elif kind == "positive":
        x = rng.uniform(0.5, 2.0, shape)
    elif kind == "small integers":
        x = rng.integers(-3, 4, shape).astype(np.float64)
    elif kind == "constant":
        x = np.full(shape, float(rng.choice([0.1, -7.0, 1.0, 0.0])))
    elif kind == "tiny":  # normal numbers whose powers underflow
        x = rng.uniform(0.5, 1.0, shape) * {"float16": 1e-3, "float64": 1e-200}.get(dtype, 1e-30)
    elif kind == "denormal":  # subnormal in the element type, one sign per input
        x = rng.uniform(0.5, 1.0, shape) * DENORMAL_SCALE[dtype] * float(rng.choice([1.0, -1.0]))
    else:  # huge: near the top of the type's range
        top = {"float32": 3e38, "float64": 1e307, "float16": 6e4, "bfloat16": 3e38}[dtype]
        x = rng.uniform(-1.0, 1.0, shape) * top
    x = R.to_dtype(x, dtype)
    flat = x.reshape(-1)
    for where, value in specials:
        if flat.size:
            flat[int(where * flat.size)] = value
    return x


def declared_shape(style, shape):
    if style == "static":
        return list(shape)
    if style == "symbolic":
        return ["N", "C"] + [f"D{i}" for i in range(len(shape) - 2)]
    return None


# --------------------------------------------------------------------------- global pools


@st.composite
def global_case(draw):
    op = draw(st.sampled_from(GLOBAL_OPS))
    dtype = draw(st.sampled_from(ALL_DTYPES))
    opset = draw(st.sampled_from(GLOBAL_OPSETS))
    rank = draw(st.integers(3, 6))
    maxd = {3: 3000, 4: 60, 5: 14, 6: 7}[rank]
    n = draw(st.integers(0, 3) if draw(st.integers(0, 9)) == 0 else st.integers(1, 3))
    c = draw(st.integers(0, 5) if draw(st.integers(0, 9)) == 0 else st.integers(1, 5))
    spatial = [draw(st.integers(1, maxd)) for _ in range(rank - 2)]
    attrs, p = {}, 2
    if op == "GlobalLpPool" and draw(st.booleans()):
        p = draw(st.sampled_from(FLOAT_P)) if opset == 1 else draw(st.integers(1, 12))
        attrs["p"] = p
    # a mean of values near the type's top overflows a sum kept in the same type (test_huge_and_odd.py's
    # test_global_average_near_the_top_of_the_range checks those inputs), and so would the float64 reference's own
    # sum for float64 inputs: GlobalAveragePool draws bounded values
    spec = draw(value_spec(bounded=(op == "GlobalAveragePool")))
    style = draw(st.sampled_from(["static", "symbolic", "none"]))
    threads = draw(st.sampled_from([1, 2]))
    return op, dtype, opset, [n, c] + spatial, attrs, p, spec, style, threads


def global_reference(op, x, p):
    if op == "GlobalAveragePool":
        return R.global_average_pool(x)
    if op == "GlobalMaxPool":
        return R.global_max_pool(x)
    return R.global_lp_pool(x, p)


@SETTINGS
@given(global_case())
def test_global_pools_property(case):
    op, dtype, opset, shape, attrs, p, spec, style, threads = case
    x = make_values(spec, shape, dtype)
    model = pool_model(op, opset, dtype, declared_shape(style, shape), attrs)
    if refused_by_ort(model):  # EP route: ORT's own schema refuses it before any EP (helpers.ort_refusal)
        CASE_COUNTS["properties: global pools refused by ORT's schema (EP route)"] += 1
        return
    sess = make_session(model, threads=threads)
    with counts_one_run(op):
        (y,) = run_session(sess, {"X": x})
    with np.errstate(all="ignore"):
        ref = global_reference(op, x, p)
    what = f"{op}-{opset} {dtype} shape={shape} attrs={attrs} values={spec[0]} specials={spec[2]}"
    if op == "GlobalMaxPool":
        exp = R.to_dtype(ref, dtype)
        assert y.dtype == exp.dtype and y.shape == exp.shape, what
        np.testing.assert_array_equal(R.to_f64(y), R.to_f64(exp), err_msg=what)
    else:
        assert_close_with_subnormals(y, ref, dtype, x, what)
    CASE_COUNTS["properties: global pools"] += 1


# --------------------------------------------------------------------------- LpPool


@st.composite
def lppool_case(draw):
    opset = draw(st.sampled_from(LP_OPSETS))
    dtype = draw(st.sampled_from(ALL_DTYPES))
    nsp = draw(st.integers(1, 3))
    kmax = 5 if nsp < 3 else 3
    k = [draw(st.integers(1, kmax)) for _ in range(nsp)]
    attrs = {"kernel_shape": k}
    s = [draw(st.integers(1, 5)) for _ in range(nsp)]
    if s != [1] * nsp or draw(st.booleans()):
        attrs["strides"] = s
    d = [1] * nsp
    if draw(st.booleans()):
        d = [draw(st.integers(1, 3)) for _ in range(nsp)]
        attrs["dilations"] = d
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad != "NOTSET" or draw(st.booleans()):
        attrs["auto_pad"] = auto_pad
    pads = None
    # explicit pads: usually with NOTSET (up to one past the dilated kernel: whole windows of padding);
    # sometimes beside SAME/VALID, where they are ignored
    if draw(st.integers(0, 3)) > (0 if auto_pad == "NOTSET" else 2):
        eff = [(k[i] - 1) * d[i] + 1 for i in range(nsp)]
        pads = [draw(st.integers(0, eff[i % nsp] + 1)) for i in range(2 * nsp)]
        attrs["pads"] = pads
    ceil_mode = int(draw(st.booleans()))
    if ceil_mode or draw(st.booleans()):
        attrs["ceil_mode"] = ceil_mode
    p = 2.0 if opset == 1 else 2
    if draw(st.integers(0, 4)) > 0:
        p = draw(st.sampled_from(FLOAT_P)) if opset == 1 else draw(st.integers(1, 9))
        attrs["p"] = p
    size_max = 7 if nsp == 3 else 13
    spatial = [draw(st.integers(1, size_max)) for _ in range(nsp)]
    n = draw(st.integers(1, 2))
    c = draw(st.integers(0, 3) if draw(st.integers(0, 9)) == 0 else st.integers(1, 3))
    spec = draw(value_spec(bounded=False))
    style = draw(st.sampled_from(["static", "symbolic", "none"]))
    threads = draw(st.sampled_from([1, 2]))
    ref_kwargs = dict(kernel_shape=k, strides=s, pads=pads, dilations=d, auto_pad=auto_pad, ceil_mode=ceil_mode, p=p)
    return opset, dtype, [n, c] + spatial, attrs, ref_kwargs, spec, style, threads


@SETTINGS
@given(lppool_case())
def test_lppool_property(case):
    opset, dtype, shape, attrs, ref_kwargs, spec, style, threads = case
    x = make_values(spec, shape, dtype)
    what = f"LpPool-{opset} {dtype} shape={shape} attrs={attrs} values={spec[0]} specials={spec[2]}"
    model = pool_model("LpPool", opset, dtype, declared_shape(style, shape), attrs)
    if refused_by_ort(model):  # EP route: ORT's own schema refuses it before any EP (helpers.ort_refusal)
        CASE_COUNTS["properties: LpPool refused by ORT's schema (EP route)"] += 1
        return
    try:
        out_shape = R.output_shape(shape, **{k: v for k, v in ref_kwargs.items() if k != "p"})
    except ValueError:  # the dilated kernel does not fit the padded input: a clear error, at load or in run()
        with pytest.raises(Exception) as ei:
            run_session(make_session(model, threads=threads), {"X": x})
        msg = strip_ort_wrapper(str(ei.value))
        assert "LpPool" in msg and "kernel_shape" in msg, f"{what}: unclear error: {ei.value}"
        CASE_COUNTS["properties: LpPool (error)"] += 1
        return
    sess = make_session(model, threads=threads)
    if style == "static":
        assert sess.get_outputs()[0].shape == load_time_shape(model, out_shape), f"{what}: inferred output shape"
    with counts_one_run("LpPool"):
        (y,) = run_session(sess, {"X": x})
    with np.errstate(all="ignore"):
        ref = R.lp_pool(x, **ref_kwargs)
    assert_close_with_subnormals(y, ref, dtype, x, what)
    CASE_COUNTS["properties: LpPool"] += 1


# --------------------------------------------------------------------------- QLinearAveragePool


@st.composite
def qlinear_case(draw):
    dtype = np.dtype(draw(st.sampled_from([np.uint8, np.int8])))
    lo, hi = RQ.QRANGE[dtype]
    cl = int(draw(st.booleans()))
    nd = draw(st.integers(1, 3))
    spatial = [draw(st.integers(1, {1: 40, 2: 12, 3: 6}[nd])) for _ in range(nd)]
    n = draw(st.integers(1, 2))
    c = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 16, 17, 33]))
    k = [draw(st.integers(1, min(5, s + 2))) for s in spatial]
    attrs = {"kernel_shape": k}
    strides = None
    if draw(st.booleans()):
        strides = [draw(st.integers(1, 4)) for _ in range(nd)]
        attrs["strides"] = strides
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    if auto_pad != "NOTSET" or draw(st.booleans()):
        attrs["auto_pad"] = auto_pad
    pads = None
    if auto_pad == "NOTSET" and draw(st.integers(0, 3)) > 0:
        pads = [draw(st.integers(0, k[i % nd] - 1)) for i in range(2 * nd)]
        attrs["pads"] = pads
    ceil_mode = int(draw(st.booleans()))
    if ceil_mode or draw(st.booleans()):
        attrs["ceil_mode"] = ceil_mode
    cip = int(draw(st.booleans()))
    if cip or draw(st.booleans()):
        attrs["count_include_pad"] = cip
    if cl or draw(st.booleans()):
        attrs["channels_last"] = cl
    xs = float(np.float32(np.exp(draw(st.floats(np.log(1e-4), np.log(20.0))))))
    ratio = draw(st.one_of(st.sampled_from([1.0, 0.125, 0.5, 2.0, 4.0]), st.floats(0.25, 8.0)))
    ys = float(np.float32(xs * ratio))
    xz = draw(st.one_of(st.none(), st.integers(lo, hi)))
    yz = draw(st.one_of(st.none(), st.integers(lo, hi)))
    data = draw(st.sampled_from(["uniform", "uniform", "extreme", "narrow"]))
    seed = draw(st.integers(0, 2**32 - 1))
    declared = draw(st.booleans())
    as_inputs = draw(st.booleans())
    threads = draw(st.sampled_from([1, 2]))
    shape = [n] + (spatial + [c] if cl else [c] + spatial)
    return dict(
        dtype=dtype,
        cl=cl,
        shape=shape,
        spatial=spatial,
        attrs=attrs,
        strides=strides,
        pads=pads,
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
        cip=cip,
        xs=xs,
        ys=ys,
        xz=xz,
        yz=yz,
        data=data,
        seed=seed,
        declared=declared,
        as_inputs=as_inputs,
        threads=threads,
    )


def qlinear_data(case):
    rng = np.random.default_rng(case["seed"])
    lo, hi = RQ.QRANGE[case["dtype"]]
    if case["data"] == "extreme":
        x = rng.choice(np.array([lo, hi, lo + 1, hi - 1]), size=case["shape"])
    elif case["data"] == "narrow":
        x = np.clip((case["xz"] or 0) + rng.integers(-3, 4, size=case["shape"]), lo, hi)
    else:
        x = rng.integers(lo, hi + 1, size=case["shape"])
    return x.astype(case["dtype"])


@SETTINGS
@given(qlinear_case())
def test_qlinear_average_pool_property(case):
    x = qlinear_data(case)
    what = (
        f"QLinearAveragePool {case['dtype'].name} x{case['shape']} attrs={case['attrs']} xs={case['xs']} "
        f"xz={case['xz']} ys={case['ys']} yz={case['yz']}"
    )
    model, feeds = qlinear_model(
        case["dtype"],
        case["shape"] if case["declared"] else None,
        case["attrs"],
        case["xs"],
        case["xz"],
        case["ys"],
        case["yz"],
        as_inputs=("xs", "xz", "ys", "yz") if case["as_inputs"] else (),
    )
    if refused_by_ort(model):  # EP route: ORT's com.microsoft schema refuses it before any EP (helpers.ort_refusal)
        CASE_COUNTS["properties: QLinearAveragePool refused by ORT's schema (EP route)"] += 1
        return
    try:
        _, _, out = RQ.pool_geometry(
            case["spatial"],
            case["attrs"]["kernel_shape"],
            case["strides"],
            case["pads"],
            case["auto_pad"],
            case["ceil_mode"],
        )
    except ValueError:
        with pytest.raises(Exception) as ei:
            make_session(model, threads=case["threads"]).run(None, {"X": x, **feeds})
        msg = strip_ort_wrapper(str(ei.value))
        assert "QLinearAveragePool" in msg and "kernel_shape" in msg, f"{what}: unclear error: {ei.value}"
        CASE_COUNTS["properties: QLinearAveragePool (error)"] += 1
        return
    assume(min(out) >= 1)
    sess = make_session(model, threads=case["threads"])
    with counts_one_run("QLinearAveragePool"):
        y = sess.run(None, {"X": x, **feeds})[0]
    ref, pre = qlinear_reference(x, case["xs"], case["xz"], case["ys"], case["yz"], case["attrs"])
    assert_qlinear_matches(y, ref, pre, what)
    CASE_COUNTS["properties: QLinearAveragePool"] += 1
