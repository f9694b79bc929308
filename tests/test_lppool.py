"""LpPool against the float64 reference: randomized attribute combinations, hand-checked
geometry corner cases, and float32 agreement with stock onnxruntime where stock follows the spec."""

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
    random_lppool_case,
    random_lppool_input,
    rng_for,
    run_op,
    run_session,
)

OPSETS = [1, 2, 11, 18, 22]
N_RANDOM = 14  # random cases per (opset, dtype)
N_STOCK = 30  # stock-ORT comparison cases per opset


def run_and_check(opset, dtype, x, attrs, ref_kwargs, what):
    y, sess = run_op("LpPool", opset, dtype, x, attrs)
    ref = R.lp_pool(x, **ref_kwargs)
    R.assert_close(y, ref, dtype, R.input_scale(x), f"{what}: attrs={attrs} x.shape={x.shape}")
    model = pool_model("LpPool", opset, dtype, list(x.shape), attrs)
    assert sess.get_outputs()[0].shape == load_time_shape(model, ref.shape), f"{what}: inferred shape, attrs={attrs}"
    return y


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("opset", OPSETS)
def test_lppool_random(opset, dtype):
    rng = rng_for("lppool random", opset, dtype)
    for i in range(N_RANDOM):
        attrs, ref_kwargs, shape = random_lppool_case(rng, opset)
        x = random_lppool_input(rng, shape, dtype)
        run_and_check(opset, dtype, x, attrs, ref_kwargs, f"LpPool-{opset} {dtype} case {i}")
        CASE_COUNTS["LpPool: randomized vs reference"] += 1


@pytest.mark.parametrize("opset", [2, 11, 18, 22])
def test_lppool_random_vs_stock_ort(opset):
    """float32: library == reference == stock ORT on cases where stock follows the spec."""
    rng = rng_for("lppool stock", opset)
    for i in range(N_STOCK):
        attrs, ref_kwargs, shape = random_lppool_case(rng, opset, stock_safe=True)
        x = random_lppool_input(rng, shape, "float32")
        model = pool_model("LpPool", opset, "float32", shape, attrs)
        stock = make_session(model, library=False).run(None, {"X": x})[0]
        ref = R.lp_pool(x, **ref_kwargs)
        what = f"LpPool-{opset} case {i} attrs={attrs} shape={shape}"
        # guards the reference itself: stock ORT agrees with it here
        R.assert_close(stock, ref, "float32", R.input_scale(x), "stock ORT vs reference: " + what)
        y = run_and_check(opset, "float32", x, attrs, ref_kwargs, what)
        np.testing.assert_allclose(y, stock, rtol=1e-5, atol=1e-5 * R.input_scale(x), err_msg=what)
        CASE_COUNTS["LpPool: randomized vs stock ORT"] += 1


# --------------------------------------------------------------------------- hand-checked geometry


def _x1d(vals, dtype="float32"):
    return R.to_dtype(np.array(vals, dtype=np.float64).reshape(1, 1, -1), dtype)


HAND_CASES = [
    # (attrs, input, expected output) with p=1: every output is a plain sum of |x| over the window
    # SAME with kernel < stride: pads stay 0 (stock ORT would use total -2 and shift the windows)
    (dict(kernel_shape=[1], strides=[3], auto_pad="SAME_UPPER"), [1, 2, 3, 4, 5, 6], [1, 4]),
    (dict(kernel_shape=[1], strides=[3], auto_pad="SAME_LOWER"), [1, 2, 3, 4, 5, 6], [1, 4]),
    (dict(kernel_shape=[2], strides=[4], auto_pad="SAME_LOWER"), [1, 2, 3, 4, 5, 6, 7], [3, 11]),
    (dict(kernel_shape=[2], strides=[4], auto_pad="SAME_UPPER"), [1, 2, 3, 4, 5, 6, 7], [3, 11]),
    (dict(kernel_shape=[1], strides=[2], auto_pad="SAME_UPPER"), [1, 2, 3, 4], [1, 3]),
    # SAME, odd total padding: extra at the end (UPPER) / beginning (LOWER); total = 3 here
    (dict(kernel_shape=[4], strides=[1], auto_pad="SAME_UPPER"), [1, 2, 3, 4, 5], [6, 10, 14, 12, 9]),
    (dict(kernel_shape=[4], strides=[1], auto_pad="SAME_LOWER"), [1, 2, 3, 4, 5], [3, 6, 10, 14, 12]),
    # SAME with dilation: effective kernel 3, total 2
    (dict(kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER"), [1, 2, 3, 4], [2, 4, 6, 3]),
    # ceil_mode: partial last window (position 5 is absent)
    (dict(kernel_shape=[2], strides=[2], ceil_mode=1), [1, 2, 3, 4, 5], [3, 7, 5]),
    # ceil_mode: the extra window would start in the right padding -> dropped
    (dict(kernel_shape=[2], strides=[2], pads=[0, 1], ceil_mode=1), [1, 2, 3, 4], [3, 7]),
    # ceil_mode, span divisible by the stride, the last window starts in the right padding -> dropped
    (dict(kernel_shape=[2], strides=[2], pads=[0, 2], ceil_mode=1), [1, 2, 3, 4], [3, 7]),
    (dict(kernel_shape=[1], strides=[1], pads=[0, 1], ceil_mode=1), [1, 2, 3], [1, 2, 3]),
    # ... while without ceil_mode that window (all padding) is there
    (dict(kernel_shape=[2], strides=[2], pads=[0, 2]), [1, 2, 3, 4], [3, 7, 0]),
    # ceil_mode with left padding; last window starts inside the input
    (dict(kernel_shape=[2], strides=[2], pads=[1, 0], ceil_mode=1), [1, 2, 3, 4], [1, 5, 4]),
    # ceil_mode ignored with SAME
    (dict(kernel_shape=[2], strides=[2], auto_pad="SAME_UPPER", ceil_mode=1), [1, 2, 3, 4, 5], [3, 7, 5]),
    # asymmetric explicit pads, stride
    (dict(kernel_shape=[3], strides=[2], pads=[2, 1]), [1, 2, 3, 4, 5], [1, 6, 12]),
    # pads larger than the kernel: the first window is all padding -> 0
    (dict(kernel_shape=[2], strides=[1], pads=[3, 0]), [1, 2, 3], [0, 0, 1, 3, 5]),
    # VALID ignores explicit pads
    (dict(kernel_shape=[2], strides=[2], auto_pad="VALID", pads=[1, 1]), [1, 2, 3, 4, 5], [3, 7]),
    # dilation with explicit pads
    (dict(kernel_shape=[2], dilations=[3], pads=[1, 1]), [1, 2, 3, 4], [3, 5, 2]),
    # negative values (|x|)
    (dict(kernel_shape=[3], strides=[3]), [-1, 2, -3, -4, 5, -6], [6, 15]),
]


def _hand_id(c):
    return ",".join(f"{k}={'x'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in c[0].items())


@pytest.mark.parametrize("opset", [1, 18, 22])
@pytest.mark.parametrize("case", range(len(HAND_CASES)), ids=[_hand_id(c) for c in HAND_CASES])
def test_lppool_hand_checked_geometry(case, opset):
    attrs, vals, expected = HAND_CASES[case]
    attrs = dict(attrs, p=1.0 if opset == 1 else 1)
    x = _x1d(vals)
    y, sess = run_op("LpPool", opset, "float32", x, attrs)
    np.testing.assert_allclose(y.ravel(), expected, rtol=1e-6, err_msg=str(attrs))
    assert y.shape == (1, 1, len(expected)), attrs
    model = pool_model("LpPool", opset, "float32", list(x.shape), attrs)
    assert sess.get_outputs()[0].shape == load_time_shape(model, [1, 1, len(expected)]), attrs
    # the reference agrees with the hand computation too
    np.testing.assert_allclose(R.lp_pool(x, **attrs).ravel(), expected)


def test_lppool_2d_hand_checked():
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    # 2x2 windows, stride 2, p=2
    y, _ = run_op("LpPool", 22, "float32", x, dict(kernel_shape=[2, 2], strides=[2, 2], p=2))
    exp = [
        [np.sqrt(1 + 4 + 25 + 36), np.sqrt(9 + 16 + 49 + 64)],
        [np.sqrt(81 + 100 + 169 + 196), np.sqrt(121 + 144 + 225 + 256)],
    ]
    np.testing.assert_allclose(y[0, 0], exp, rtol=1e-6)
    # default p (2), default strides (1), SAME_LOWER 2x2 -> 4x4, padding on top/left
    y, _ = run_op("LpPool", 11, "float32", x, dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER"))
    assert y.shape == (1, 1, 4, 4)
    np.testing.assert_allclose(y[0, 0, 0, 0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(y[0, 0, 3, 3], np.sqrt(11**2 + 12**2 + 15**2 + 16**2), rtol=1e-6)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("opset", [1, 2, 11])
def test_lppool_old_opsets_accept_dilations_and_ceil_mode(opset, dtype):
    rng = rng_for("old opset dil/ceil", opset, dtype)
    x = random_lppool_input(rng, [2, 3, 9, 10], dtype)
    p = 3.0 if opset == 1 else 3
    for extra in (
        dict(dilations=[2, 1]),
        dict(ceil_mode=1, strides=[2, 3]),
        dict(dilations=[1, 2], ceil_mode=1, strides=[2, 2], pads=[1, 0, 0, 1]),
    ):
        attrs = dict(kernel_shape=[3, 2], p=p, **extra)
        ref_kwargs = dict(
            kernel_shape=[3, 2],
            p=p,
            strides=extra.get("strides"),
            pads=extra.get("pads"),
            dilations=extra.get("dilations"),
            ceil_mode=extra.get("ceil_mode", 0),
        )
        run_and_check(opset, dtype, x, attrs, ref_kwargs, f"LpPool-{opset} {dtype}")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lppool_nan_inf(dtype):
    x = np.ones([1, 2, 6, 6])
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 4, 4] = -np.inf
    x = R.to_dtype(x, dtype)
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2], p=2)
    y, _ = run_op("LpPool", 22, dtype, x, attrs)
    ref = R.lp_pool(x, [2, 2], [2, 2], p=2)
    R.assert_close(y, ref, dtype, 1.0, "NaN/inf")
    yf = R.to_f64(y)
    # only the windows holding the NaN / inf are affected
    assert np.isnan(yf[0, 0, 0, 0]) and np.isnan(yf).sum() == 1
    assert yf[0, 1, 2, 2] == np.inf and np.isinf(yf).sum() == 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("p", [2, 3])
def test_lppool_tiling_windows_signs_nan_inf(dtype, p):
    """2x2 / 3x2 windows tiling rows long enough for whole vectors and a tail (lp_pool.h's pipelined rows: powers of
    consecutive values, pairs picked by shuffles): negative values and -0 take |x|, a NaN or an inf stays in its
    own window."""
    rng = np.random.default_rng(5)
    for kernel in ([2, 2], [3, 2]):
        x = rng.standard_normal([1, 2, 12, 46]) * 2
        x[0, 0, 1, 9] = np.nan
        x[0, 1, 2, 30] = -np.inf
        x[0, 1, 4:6, 0:2] = -0.0
        x = R.to_dtype(x, dtype)
        attrs = dict(kernel_shape=kernel, strides=kernel, p=p)
        y, _ = run_op("LpPool", 22, dtype, x, attrs)
        ref = R.lp_pool(x, kernel, kernel, p=p)
        R.assert_close(y, ref, dtype, R.input_scale(x), f"LpPool {dtype} p={p} {kernel}")
        yf = R.to_f64(y)
        assert np.isnan(yf[0, 0, 1 // kernel[0], 9 // 2]) and np.isnan(yf).sum() == 1
        assert yf[0, 1, 2 // kernel[0], 15] == np.inf and np.isinf(yf).sum() == 1
        if kernel[0] == 2:
            assert yf[0, 1, 2, 0] == 0 and not np.signbit(yf[0, 1, 2, 0]), "|-0|^p is +0"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("p", [2, 3])
def test_lppool_3x3_pad1_rows_signs_nan(dtype, p):
    """3x3 pad 1 (lp_pool.h's padded_triple_sums: column sums straight from the input, native vectors with an
    overlapping last one) on rows of 2, 5, 11 and 46 columns: negative values and -0 take |x|, a NaN stays in its
    windows."""
    rng = np.random.default_rng(6)
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], p=p)
    for width in (2, 5, 11, 46):
        x = rng.standard_normal([1, 2, 7, width]) * 2
        x[0, 0, 3, width // 2] = np.nan
        x[0, 1, 0:3, 0:2] = -0.0
        x = R.to_dtype(x, dtype)
        y, _ = run_op("LpPool", 22, dtype, x, attrs)
        ref = R.lp_pool(x, [3, 3], [1, 1], pads=[1, 1, 1, 1], p=p)
        R.assert_close(y, ref, dtype, R.input_scale(x), f"LpPool {dtype} p={p} width {width}")
        yf = R.to_f64(y)
        assert np.isnan(yf).sum() == np.isnan(ref).sum() == (9 if width > 2 else 6)
        assert yf[0, 1, 0, 0] == 0 and not np.signbit(yf[0, 1, 0, 0]), "|-0|^p is +0"


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lppool_empty_batch_or_channels(dtype):
    for shape in ([0, 3, 5, 5], [2, 0, 5, 5]):
        x = R.to_dtype(np.zeros(shape), dtype)
        y, sess = run_op("LpPool", 22, dtype, x, dict(kernel_shape=[3, 2], strides=[2, 1], p=2))
        assert y.shape == tuple(shape[:2]) + (2, 4) and y.dtype == x.dtype
        assert sess.get_outputs()[0].shape == shape[:2] + [2, 4]


def test_lppool_large_p_and_two_threads():
    rng = rng_for("large p")
    x = R.to_dtype(rng.standard_normal([2, 5, 23, 19]) * 4, "float64")
    for p in (1, 2, 9, 20, 40):
        attrs = dict(kernel_shape=[3, 4], strides=[2, 1], pads=[1, 2, 1, 0], p=p)
        y, _ = run_op("LpPool", 22, "float64", x, attrs, threads=2)
        R.assert_close(y, R.lp_pool(x, [3, 4], [2, 1], [1, 2, 1, 0], p=p), "float64", R.input_scale(x))
        if p > 20:
            continue  # |x|^40 would overflow a float32 accumulator for |x| > 9; not required
        xf = R.to_dtype(x, "float32")
        y, _ = run_op("LpPool", 22, "float32", xf, attrs, threads=2)
        R.assert_close(y, R.lp_pool(xf, [3, 4], [2, 1], [1, 2, 1, 0], p=p), "float32", R.input_scale(xf))


def test_lppool_shape_inference_symbolic():
    attrs = dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], p=2)
    sess = make_session(pool_model("LpPool", 22, "float32", ["N", 3, "H", 9], attrs))
    out = sess.get_outputs()[0].shape
    assert (
        len(out) == 4
        and out[1] == 3
        and out[3] == R.output_shape([1, 3, 9, 9], **{k: attrs[k] for k in ("kernel_shape", "strides", "pads")})[3]
    ), out
    assert out[0] is None or isinstance(out[0], str), out
    assert out[2] is None or isinstance(out[2], str), out
    x = R.to_dtype(rng_for("sym lppool").standard_normal([2, 3, 7, 9]), "float32")
    with counts_one_run("LpPool"):
        (y,) = run_session(sess, {"X": x})
    R.assert_close(y, R.lp_pool(x, [3, 2], [2, 2], [1, 0, 1, 1], p=2), "float32", R.input_scale(x))
