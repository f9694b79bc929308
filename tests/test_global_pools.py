"""GlobalAveragePool / GlobalMaxPool / GlobalLpPool against the float64 reference."""

import numpy as np
import pytest

import reference as R
from helpers import (
    ALL_DTYPES,
    CASE_COUNTS,
    counts_one_run,
    load_time_shape,
    make_session,
    pool_model,
    rng_for,
    run_op,
    run_session,
)

OPSETS = [1, 2, 7, 11, 13, 18, 21, 22]
GLOBAL_OPS = ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]


def lp_attrs(opset, p):
    """GlobalLpPool-1 / LpPool-1 have a FLOAT p, later versions an INT p."""
    if p is None:
        return {}
    return {"p": float(p)} if opset == 1 else {"p": int(p)}


def check(op, dtype, y, x, ref, what):
    if op == "GlobalMaxPool":
        # the max is one of the inputs: must be exact
        exp = R.to_dtype(ref, dtype)
        assert y.dtype == exp.dtype and y.shape == exp.shape, what
        np.testing.assert_array_equal(R.to_f64(y), R.to_f64(exp), err_msg=what)
    else:
        R.assert_close(y, ref, dtype, R.input_scale(x), what)


def random_shape(rng, rank):
    n, c = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    maxd = {3: 40, 4: 11, 5: 6, 6: 4}[rank]
    return [n, c] + [int(rng.integers(1, maxd + 1)) for _ in range(rank - 2)]


def random_input(rng, shape, dtype):
    kind = rng.integers(0, 3)
    if kind == 0:
        x = rng.standard_normal(shape)
    elif kind == 1:
        x = rng.uniform(1.0, 2.0, shape) * 10.0 ** rng.integers(-3, 4)
    else:
        x = rng.uniform(-50.0, 10.0, shape)
    return R.to_dtype(x, dtype)


# --------------------------------------------------------------------------- random shapes


def _global_params():
    out = []
    for opset in OPSETS:
        for dtype in ALL_DTYPES:
            out.append(pytest.param("GlobalAveragePool", opset, dtype, None, id=f"GAP-{opset}-{dtype}"))
            out.append(pytest.param("GlobalMaxPool", opset, dtype, None, id=f"GMP-{opset}-{dtype}"))
            ps = [1.5, 3.0, 0.5, 2.0, None] if opset == 1 else [1, 2, 3, 4, None]
            for p in ps:
                out.append(pytest.param("GlobalLpPool", opset, dtype, p, id=f"GLP-{opset}-{dtype}-p{p}"))
    return out


@pytest.mark.parametrize("op,opset,dtype,p", _global_params())
def test_global_random_shapes(op, opset, dtype, p):
    rng = rng_for("global", op, opset, dtype, p)
    attrs = lp_attrs(opset, p) if op == "GlobalLpPool" else {}
    for rank in (3, 4, 5):
        shape = random_shape(rng, rank)
        x = random_input(rng, shape, dtype)
        y, sess = run_op(op, opset, dtype, x, attrs)
        ref = R.global_pool(op, x, 2 if p is None else p)
        check(op, dtype, y, x, ref, f"{op}-{opset} {dtype} p={p} shape={shape}")
        # exact output shape at load (library shape inference; ORT's schema's on the EP route)
        model = pool_model(op, opset, dtype, shape, attrs)
        assert sess.get_outputs()[0].shape == load_time_shape(model, shape[:2] + [1] * (rank - 2))
        CASE_COUNTS["global pools: random shapes"] += 1


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", GLOBAL_OPS)
def test_global_rank6_and_odd_sizes(op, dtype):
    rng = rng_for("rank6", op, dtype)
    p = 3
    attrs = {"p": p} if op == "GlobalLpPool" else {}
    # rank 6, spatial size 1, and sizes around SIMD widths (7, 8, 9, 15, 16, 17, 31, 33, 63, 65)
    shapes = [[2, 3, 2, 3, 2, 3], [3, 4, 1, 1], [1, 2, 1], [2, 7, 1, 1, 1]]
    shapes += [[2, 3, n] for n in (7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 129)]
    for shape in shapes:
        x = R.to_dtype(rng.standard_normal(shape) * 3 + 1, dtype)
        y, sess = run_op(op, 22, dtype, x, attrs)
        check(op, dtype, y, x, R.global_pool(op, x, p), f"{op} {dtype} shape={shape}")
        assert sess.get_outputs()[0].shape == shape[:2] + [1] * (len(shape) - 2)
        CASE_COUNTS["global pools: fixed shapes"] += 1


@pytest.mark.parametrize("opset", [7, 13, 22])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", GLOBAL_OPS)
def test_global_channel_counts_multiple_of_8_and_16(op, dtype, opset):
    """Real models have C = 16, 64, 512...; ORT's graph optimizers (e.g. its NCHWc layout transformer)
    must not take such nodes away from the library: the library kernel has to run them."""
    rng = rng_for("channels", op, dtype, opset)
    attrs = {"p": 2} if op == "GlobalLpPool" else {}
    for shape in ([1, 8, 7, 7], [2, 16, 5, 5], [1, 64, 3, 4], [1, 48, 7], [1, 32, 2, 3, 4]):
        x = R.to_dtype(rng.standard_normal(shape) + 0.5, dtype)
        for in_shape in ("static", ["N", shape[1]] + [f"D{i}" for i in range(len(shape) - 2)]):
            y, _ = run_op(op, opset, dtype, x, attrs, in_shape=in_shape)
            check(op, dtype, y, x, R.global_pool(op, x, 2), f"{op}-{opset} {dtype} shape={shape} declared={in_shape}")
            CASE_COUNTS["global pools: C multiple of 8/16"] += 1


@pytest.mark.parametrize("op", GLOBAL_OPS)
def test_global_two_threads(op):
    rng = rng_for("threads", op)
    for shape in ([3, 37, 17, 19], [1, 1, 300, 301], [64, 5, 3]):
        x = R.to_dtype(rng.standard_normal(shape) + 0.5, "float32")
        y, _ = run_op(op, 22, "float32", x, {"p": 2} if op == "GlobalLpPool" else {}, threads=2)
        check(op, "float32", y, x, R.global_pool(op, x, 2), f"{op} 2 threads shape={shape}")


@pytest.mark.parametrize("opset", [1, 2, 22])
def test_global_lp_pool_default_p(opset):
    rng = rng_for("default p", opset)
    x = R.to_dtype(rng.standard_normal([2, 3, 4, 5]), "float32")
    y, _ = run_op("GlobalLpPool", opset, "float32", x, {})
    R.assert_close(y, R.global_lp_pool(x, 2), "float32", R.input_scale(x))


@pytest.mark.parametrize("p", [1, 2, 3, 4, 7])
def test_global_lp_pool_22_float32(p):
    """GlobalLpPool-22 has no kernel in stock ORT; the library must run it."""
    rng = rng_for("glp22", p)
    x = R.to_dtype(rng.standard_normal([2, 4, 6, 7]), "float32")
    y, _ = run_op("GlobalLpPool", 22, "float32", x, {"p": p})
    R.assert_close(y, R.global_lp_pool(x, p), "float32", R.input_scale(x))


def test_global_hand_values():
    x = np.array([[[[3.0, -4.0], [0.0, 12.0]]]], dtype=np.float32)  # |x|: 3, 4, 0, 12
    y, _ = run_op("GlobalAveragePool", 13, "float32", x)
    np.testing.assert_allclose(y, [[[[2.75]]]], rtol=1e-6)
    y, _ = run_op("GlobalMaxPool", 13, "float32", x)
    np.testing.assert_array_equal(y, [[[[12.0]]]])
    y, _ = run_op("GlobalLpPool", 13, "float32", x, {"p": 2})
    np.testing.assert_allclose(y, [[[[13.0]]]], rtol=1e-6)
    y, _ = run_op("GlobalLpPool", 13, "float32", x, {"p": 1})
    np.testing.assert_allclose(y, [[[[19.0]]]], rtol=1e-6)
    y, _ = run_op("GlobalLpPool", 1, "float32", x, {"p": 0.5})
    np.testing.assert_allclose(y, [[[[(3**0.5 + 2 + 12**0.5) ** 2]]]], rtol=1e-6)


# --------------------------------------------------------------------------- NaN / inf


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", GLOBAL_OPS)
def test_global_nan_inf(op, dtype):
    rng = rng_for("naninf", op, dtype)
    L = 37
    x = rng.standard_normal([3, 7, L])
    nan, inf = np.nan, np.inf
    # channel 0: NaN at a different place per batch entry (first, middle, last)
    for n, pos in enumerate((0, L // 2, L - 1)):
        x[n, 0, pos] = nan
    x[:, 1, 5] = inf  # +inf
    x[:, 2, L - 1] = -inf  # -inf (max stays finite)
    x[:, 3, 3] = inf
    x[:, 3, 30] = -inf  # +inf and -inf: average NaN
    x[:, 4, :] = -inf  # all -inf: max -inf
    x[:, 5, 10] = nan
    x[:, 5, 11] = inf  # NaN and inf together: NaN
    # channel 6: finite
    x = R.to_dtype(x, dtype)
    for opset, p in ((22, 2), (13, 3), (1, 1.5)):
        attrs = lp_attrs(opset, p) if op == "GlobalLpPool" else {}
        y, _ = run_op(op, opset, dtype, x, attrs)
        ref = R.global_pool(op, x, p)
        assert np.isnan(ref[:, 0]).all() and np.isnan(ref[:, 5]).all()
        xf = np.where(np.isfinite(R.to_f64(x)), x, 0)
        check(op, dtype, y, xf, ref, f"{op}-{opset} {dtype} NaN/inf")
        # spelled out, independent of the reference
        yf = R.to_f64(y)[..., 0]
        assert np.isnan(yf[:, 0]).all() and np.isnan(yf[:, 5]).all()
        assert np.isfinite(yf[:, 6]).all()
        if op == "GlobalMaxPool":
            assert (yf[:, 1] == inf).all() and (yf[:, 4] == -inf).all() and np.isfinite(yf[:, 2]).all()
        elif op == "GlobalAveragePool":
            assert (yf[:, 1] == inf).all() and (yf[:, 2] == -inf).all() and np.isnan(yf[:, 3]).all()
        else:
            assert (yf[:, 1:5] == inf).all()


@pytest.mark.parametrize("L", [1, 7, 8, 9, 15, 16, 17, 31, 49, 63, 64, 65, 100, 128, 129, 200, 1100])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_global_max_nan_inf_every_length(dtype, L):
    """GlobalMaxPool's vector paths (short channels: overlapping loads; long: four vectors and a NaN mask) keep
    NaN wherever it is and handle +-inf, for lengths around every vector width."""
    rng = rng_for("maxlen", dtype, L)
    x = rng.standard_normal([1, 8, L])
    for c, pos in enumerate((0, L // 2, L - 1)):
        x[0, c, pos] = np.nan
    x[0, 3, L // 3] = np.inf
    x[0, 4, :] = -np.inf
    x[0, 5, (2 * L) // 3] = -np.inf
    x[0, 6, L - 1] = 50.0  # the maximum in the last element (a tail or overlapping load)
    x = R.to_dtype(x, dtype)
    y, _ = run_op("GlobalMaxPool", 13, dtype, x)
    ref = np.max(R.to_f64(x), axis=-1)  # numpy propagates NaN
    got = R.to_f64(y)[..., 0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.where(np.isnan(ref), 0, got), np.where(np.isnan(ref), 0, ref))


# --------------------------------------------------------------------------- empty N / C


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", GLOBAL_OPS)
def test_global_empty_batch_or_channels(op, dtype):
    for shape in ([0, 3, 4, 4], [2, 0, 4, 4], [0, 0, 5], [0, 2, 2, 2, 2]):
        x = R.to_dtype(np.zeros(shape), dtype)
        y, sess = run_op(op, 22, dtype, x, {"p": 2} if op == "GlobalLpPool" else {})
        exp_shape = tuple(shape[:2]) + (1,) * (len(shape) - 2)
        assert y.shape == exp_shape and y.dtype == x.dtype
        assert sess.get_outputs()[0].shape == list(exp_shape)


# --------------------------------------------------------------------------- accuracy on 1M elements


def _rel_err(y, ref):
    return float(np.max(np.abs(R.to_f64(y) - ref) / np.abs(ref)))


def _big_inputs():
    rng = np.random.default_rng(1234)
    hw = (1000, 1000)
    cases = {
        "uniform(1,2)": rng.uniform(1.0, 2.0, (1, 2) + hw),
        "constant 0.1": np.full((1, 2) + hw, 0.1),
        "sorted uniform(1,2)": np.sort(rng.uniform(1.0, 2.0, 2 * hw[0] * hw[1])).reshape((1, 2) + hw),
        "1e4 + uniform(0,1)": 1e4 + rng.uniform(0.0, 1.0, (1, 2) + hw),
    }
    return {k: v.astype(np.float32) for k, v in cases.items()}


@pytest.fixture(scope="module")
def big_inputs():
    return _big_inputs()


@pytest.mark.parametrize(
    "op,p",
    [
        ("GlobalAveragePool", None),
        ("GlobalLpPool", 1),
        ("GlobalLpPool", 2),
        ("GlobalLpPool", 3),
        ("GlobalMaxPool", None),
    ],
)
def test_global_1m_elements_float32_accuracy(big_inputs, op, p):
    for name, x in big_inputs.items():
        attrs = {"p": p} if p is not None else {}
        y, _ = run_op(op, 22, "float32", x, attrs)
        ref = R.global_pool(op, x, p)
        err = _rel_err(y, ref)
        assert err <= 1e-5, f"{op} p={p} on 1M float32 '{name}': relative error {err:.3g} > 1e-5"
        CASE_COUNTS["global pools: 1M-element accuracy"] += 1


# --------------------------------------------------------------------------- shape inference


@pytest.mark.parametrize("op", GLOBAL_OPS)
def test_global_shape_inference_symbolic(op):
    for in_shape in (["N", 3, "H", "W"], ["N", "C", 5, 5], [2, 3, "L"], ["N", 4, 2, "D", 3]):
        model = pool_model(op, 22, "float32", in_shape)
        sess = make_session(model)
        out = sess.get_outputs()[0].shape
        assert len(out) == len(in_shape), out
        for i in (0, 1):
            if isinstance(in_shape[i], str):
                assert out[i] is None or isinstance(out[i], str), out
            else:
                assert out[i] == in_shape[i], out
        assert out[2:] == [1] * (len(in_shape) - 2), out
        # and it runs with concrete dims
        rng = rng_for("symshape", op, str(in_shape))
        shape = [d if isinstance(d, int) else 3 for d in in_shape]
        x = R.to_dtype(rng.standard_normal(shape), "float32")
        with counts_one_run(op):
            (y,) = run_session(sess, {"X": x})
        check(op, "float32", y, x, R.global_pool(op, x, 2), f"{op} symbolic {in_shape}")


# --------------------------------------------------------------------------- float16 large p


def _f16_big_values(rng, shape):
    """values in 100..40000 plus one 60000 per channel: x^8 overflows float16 (and the sum
    overflows any float16 accumulator) but the 8-norm (< 64000) is representable in float16."""
    x = rng.uniform(100.0, 40000.0, shape)
    flat = x.reshape(shape[0] * shape[1], -1)
    flat[np.arange(flat.shape[0]), rng.integers(0, flat.shape[1], flat.shape[0])] = 60000.0
    return R.to_dtype(flat.reshape(shape), "float16")


@pytest.mark.parametrize("opset", [1, 2, 22])
def test_float16_global_lp_pool_p8_no_overflow(opset):
    rng = rng_for("f16p8", opset)
    x = _f16_big_values(rng, [2, 3, 4, 4])
    y, _ = run_op("GlobalLpPool", opset, "float16", x, lp_attrs(opset, 8))
    ref = R.global_lp_pool(x, 8)
    assert np.all(ref < 65000)
    assert np.isfinite(R.to_f64(y)).all(), f"GlobalLpPool p=8 float16 overflowed: {y.ravel()}"
    R.assert_close(y, ref, "float16", R.input_scale(x))


@pytest.mark.parametrize(
    "dtype,vals,p",
    [
        ("float16", [60000.0, 30000.0, 100.0, 5.0], 12),
        ("float16", [60000.0, 30000.0, 100.0, 5.0], 16),
        ("float32", [1e30, 3e29, 1.0, -2e30], 2),  # |x|^2 overflows float32
        ("float32", [1e-30, -3e-30, 0.0, 2e-31], 2),  # |x|^2 underflows float32
        ("float32", [3e-10, 1e-10, 2e-10, 0.0], 9),  # |x|^9 underflows float32
        ("bfloat16", [1e30, 3e29, 1.0, -2e30], 3),
    ],
)
def test_lp_pools_no_overflow_or_underflow(dtype, vals, p):
    """The p-th powers leave the accumulator's range but the true norm is representable."""
    x = R.to_dtype(np.array(vals).reshape(1, 1, 2, 2), dtype)
    ref = R.global_lp_pool(x, p)
    y, _ = run_op("GlobalLpPool", 22, dtype, x, {"p": p})
    R.assert_close(y, ref, dtype, 0.0, f"GlobalLpPool p={p} {dtype} {vals}")
    y, _ = run_op("LpPool", 22, dtype, x, {"p": p, "kernel_shape": [2, 2]})
    R.assert_close(y, ref, dtype, 0.0, f"LpPool p={p} {dtype} {vals}")


@pytest.mark.parametrize("opset", [1, 2, 18, 22])
def test_float16_lp_pool_p8_no_overflow(opset):
    rng = rng_for("f16lp8", opset)
    x = _f16_big_values(rng, [1, 2, 6, 6])
    attrs = dict(kernel_shape=[3, 3], strides=[3, 3], **lp_attrs(opset, 8))
    y, _ = run_op("LpPool", opset, "float16", x, attrs)
    ref = R.lp_pool(x, [3, 3], [3, 3], p=8)
    assert np.all(ref < 65000)
    assert np.isfinite(R.to_f64(y)).all(), f"LpPool p=8 float16 overflowed: {y.ravel()}"
    R.assert_close(y, ref, "float16", R.input_scale(x))
