"""The streamed window-sum paths of LpPool and QLinearAveragePool (1-D and 2-D planes an output row at a time, rows
longer than one strip of columns, NCHW planes too large to pool whole) and QLinearAveragePool's rounding ties with
equal scales, against the float64 references; every check also runs with each instruction set forced."""

import numpy as np
import pytest

import reference as R
import reference_qlinear as RQ
from helpers import (
    assert_qlinear_matches,
    each_isa,
    make_session,
    pool_model,
    qlinear_model,
    rerun_on_isa,
    rng_for,
    run_with_library,
)

STRIP = 4096  # output columns per strip in the library (windows.h kStripColumns)
WHOLE_PLANE = 1 << 16  # NCHW planes larger than this are streamed (qlinear_pool.h kWholePlaneLimit)


def window_sums(v, kernel, strides, dilations, pads_begin, out):
    """Sums of float64 v [N, C, *spatial] over each window (zero padding; positions past the padded input absent),
    one spatial axis at a time with sliding windows: the same quantity as the spec references compute window by
    window (tests/reference*.py, checked against them in test_fast_references_agree), fast enough for long rows."""
    for a in range(len(kernel)):
        axis = 2 + a
        k, st, d, pb, o = kernel[a], strides[a], dilations[a], pads_begin[a], out[a]
        need = (o - 1) * st + (k - 1) * d + 1  # padded positions the windows reach
        length = v.shape[axis]
        widths = [(0, 0)] * v.ndim
        widths[axis] = (pb, max(0, need - pb - length))
        padded = np.pad(v, widths)
        idx = np.arange(o)[:, None] * st + np.arange(k)[None, :] * d  # [out, k] padded positions
        v = np.take(padded, idx.reshape(-1), axis=axis)
        v = v.reshape(v.shape[:axis] + (o, k) + v.shape[axis + 1 :]).sum(axis=axis + 1)
    return v


def _geometry(shape, attrs):
    n = len(attrs["kernel_shape"])
    out, pb, _ = R.pool_geometry(
        list(shape[2:]),
        attrs["kernel_shape"],
        attrs.get("strides"),
        attrs.get("pads"),
        attrs.get("dilations"),
        "NOTSET",
        attrs.get("ceil_mode", 0),
    )
    return (attrs["kernel_shape"], attrs.get("strides") or [1] * n, attrs.get("dilations") or [1] * n, pb, out)


def lp_pool_fast(x, attrs):
    """float64 LpPool reference: (sum of |x|^p over each window)^(1/p), windows summed by window_sums."""
    p = attrs.get("p", 2)
    return window_sums(np.abs(R.to_f64(x)) ** p, *_geometry(x.shape, attrs)) ** (1.0 / p)


def qlinear_fast(x, xs, xz, ys, yz, attrs, count_include_pad):
    """(y, pre) as reference_qlinear.qlinear_average_pool: each element dequantised in float32, window sums in
    float64, divided by the count, requantised with round-half-even."""
    channels_last = attrs.get("channels_last", 0)
    if channels_last:
        x = np.moveaxis(x, -1, 1)
    deq = (np.float32(xs) * (x.astype(np.int32) - xz).astype(np.float32)).astype(np.float64)
    geometry = _geometry(x.shape, dict(attrs, dilations=None))
    total = window_sums(deq, *geometry)
    count = window_sums(np.ones((1, 1) + x.shape[2:]), *geometry)
    if count_include_pad:
        count = np.full_like(count, float(np.prod(attrs["kernel_shape"])))
    pre = total / count / np.float64(np.float32(ys)) + yz
    lo, hi = RQ.QRANGE[x.dtype]
    y = np.clip(np.rint(pre), lo, hi).astype(x.dtype)
    if channels_last:
        y, pre = np.moveaxis(y, 1, -1), np.moveaxis(pre, 1, -1)
    return np.ascontiguousarray(y), np.ascontiguousarray(pre)


def test_fast_references_agree():
    """The sliding-window references above equal the spec references on small cases of every kind used here."""
    rng = np.random.default_rng(3)
    for shape, attrs in LP_CASES:
        reach = 3 * (attrs.get("strides") or attrs["kernel_shape"])[-1] + attrs["kernel_shape"][-1]
        small = list(shape[:-1]) + [min(shape[-1], max(40, reach))]
        x = rng.standard_normal(small)
        kw = {k: v for k, v in attrs.items() if k != "kernel_shape"}
        np.testing.assert_allclose(lp_pool_fast(x, attrs), R.lp_pool(x, attrs["kernel_shape"], **kw), rtol=1e-12)
    for _, shape, attrs in QL_SHAPES:
        small = list(shape)
        spatial = range(1, len(shape) - 1) if attrs.get("channels_last") else range(2, len(shape))
        for i, a in enumerate(spatial):
            reach = 3 * (attrs.get("strides") or attrs["kernel_shape"])[i] + attrs["kernel_shape"][i]
            small[a] = min(small[a], max(30, reach))
        x = rng.integers(0, 256, small).astype(np.uint8)
        for cip in (0, 1):
            y, pre = qlinear_fast(x, 0.02, 128, 0.02, 128, attrs, cip)
            y_ref, pre_ref = RQ.qlinear_average_pool(
                x,
                0.02,
                128,
                0.02,
                128,
                attrs["kernel_shape"],
                attrs.get("strides"),
                attrs.get("pads"),
                "NOTSET",
                0,
                cip,
                attrs.get("channels_last", 0),
            )
            np.testing.assert_allclose(pre, pre_ref, rtol=0, atol=1e-9)
            np.testing.assert_array_equal(y[~RQ.near_tie(pre_ref, 1e-9)], y_ref[~RQ.near_tie(pre_ref, 1e-9)])


def _lp(x, attrs, dtype="float32"):
    (y,) = run_with_library(pool_model("LpPool", 22, dtype, list(x.shape), attrs), {"X": x}, "LpPool")
    return y


LP_CASES = [
    # (shape, attrs): 1-D rows of several strips, 2-D rows of several strips, dilation, stride > kernel, big kernels
    ([1, 2, 2 * STRIP + 17], {"kernel_shape": [3], "pads": [1, 1], "p": 2}),
    ([1, 1, 2 * STRIP + 5], {"kernel_shape": [4], "strides": [3], "dilations": [2], "pads": [3, 0], "p": 3}),
    ([1, 2, 5, STRIP + 300], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}),
    ([1, 1, 9, 2 * STRIP + 3], {"kernel_shape": [2, 5], "strides": [2, 2], "dilations": [3, 1], "p": 1}),
    ([1, 3, 17, 13], {"kernel_shape": [3, 2], "strides": [4, 3], "p": 4}),
    ([1, 2, 7, 6], {"kernel_shape": [9, 9], "pads": [4, 4, 4, 4], "p": 2}),
    ([1, 1, 40, 30], {"kernel_shape": [5, 1], "dilations": [7, 1], "ceil_mode": 1, "strides": [2, 1], "p": 3}),
    # 2-D planes of ordinary rows, a block of output rows at a time (lp_pool.h lp_pool_blocked): several blocks
    # sharing kernel rows, outputs past the row end ignored; windows side by side taken straight from the input;
    # more than three kernel rows, column stride 2 over padded rows, ceil_mode
    ([2, 3, 70, 30], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}),
    ([1, 2, 230, 40], {"kernel_shape": [2, 2], "strides": [2, 2], "p": 3}),
    ([1, 2, 90, 33], {"kernel_shape": [5, 3], "strides": [1, 2], "pads": [2, 1, 2, 1], "ceil_mode": 1, "p": 1}),
    # windows tiling the plane (kernel == stride 2 or 3, no padding: lp_pool.h lp_pool_pipelined, the next output
    # row's column sums made in the loop of this one's roots), rows and columns left over past the last window
    ([1, 3, 31, 29], {"kernel_shape": [3, 3], "strides": [3, 3], "p": 3}),
    ([2, 2, 17, 50], {"kernel_shape": [2, 3], "strides": [2, 3], "p": 4}),
    ([1, 2, 20, 33], {"kernel_shape": [3, 2], "strides": [3, 2], "p": 1}),
    # wide steps between windows (windows.h wide_steps: a window's terms summed at a time) over strips shortened to
    # keep their input in cache (strip_columns): 1-D and 2-D, a stride longer than the kernel with pads
    ([1, 2, 128 * 4200 + 5], {"kernel_shape": [128], "strides": [128], "p": 2}),
    ([1, 1, 4, 32 * 700], {"kernel_shape": [2, 32], "strides": [2, 32], "p": 3}),
    ([1, 1, 30 * 3000 + 7], {"kernel_shape": [20], "strides": [30], "pads": [5, 9], "p": 1}),
]


def check_lp_streaming():
    rng = np.random.default_rng(11)
    for shape, attrs in LP_CASES:
        for dtype in ("float32", "float16", "float64"):
            x = R.to_dtype(rng.standard_normal(shape) * 3, dtype)
            y = _lp(x, attrs, dtype)
            R.assert_close(y, lp_pool_fast(x, attrs), dtype, R.input_scale(x), f"LpPool {dtype} {shape} {attrs}")


def check_lp_streaming_subnormal_rows():
    """A plane normal at its start (the probe sees nothing) and subnormal further on: the streamed pass redoes the
    plane scaled, and the windows mixing both are exact."""
    x = np.full([1, 1, 6, STRIP + 40], 1e-42, np.float32)
    x[0, 0, 0, :50] = 1.0
    y = _lp(x, {"kernel_shape": [2, 3], "pads": [0, 1, 0, 1], "p": 2})
    attrs = {"kernel_shape": [2, 3], "pads": [0, 1, 0, 1], "p": 2}
    R.assert_close(y, lp_pool_fast(x, attrs), "float32", 1.0, "subnormal rows")
    assert np.all(y[0, 0, 1:, 100:] > 0), "subnormal windows underflowed to zero"
    # the same on planes of several blocks, windows side by side (powers straight from the input) and overlapping:
    # plane 0 normal at its start and subnormal after, plane 1 subnormal from the start (the probe sees it)
    for shape, attrs in (
        ([1, 2, 120, 64], {"kernel_shape": [2, 2], "strides": [2, 2], "p": 3}),
        ([1, 2, 60, 40], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}),
        ([1, 2, 93, 61], {"kernel_shape": [3, 3], "strides": [3, 3], "p": 3}),
    ):
        x = np.full(shape, 3e-41, np.float32)
        x[0, 0, :2] = 1.5
        y = _lp(x, attrs)
        R.assert_close(y, lp_pool_fast(x, attrs), "float32", 1.0, f"subnormal planes {shape} {attrs}")
        assert np.all(y > 0), "subnormal windows underflowed to zero"


QL_CONFIGS = {
    # name: (x_scale, x_zero_point, y_scale, y_zero_point, count_include_pad)
    "distinct": (0.021, 3, 0.017, -5, 0),
    "distinct-cip": (0.021, 3, 0.017, -5, 1),
    "equal": (0.02, 3, 0.02, 3, 0),  # edge windows of 4 or 6 elements land exactly on .5
    "equal-cip": (0.02, 3, 0.02, 3, 1),
}


def _qlinear(dtype, shape, attrs, config):
    xs, xz, ys, yz, cip = QL_CONFIGS[config]
    if dtype == np.uint8:
        xz, yz = xz + 125, yz + 125
    lo, hi = RQ.QRANGE[np.dtype(dtype)]
    x = rng_for(config, shape).integers(lo, hi + 1, shape).astype(dtype)
    a = dict(attrs, count_include_pad=cip)
    model, _ = qlinear_model(dtype, shape, a, xs, xz, ys, yz)
    (y,) = run_with_library(model, {"X": x}, "QLinearAveragePool")
    ref, pre = qlinear_fast(x, xs, xz, ys, yz, attrs, cip)
    what = f"QLinearAveragePool {np.dtype(dtype).name} {shape} {a} {config}"
    assert_qlinear_matches(y, ref, pre, what)
    # where the exact value is a tie, the library evaluates as ORT does: identical to stock ORT there too
    y_stock = make_session(model, library=False).run(None, {"X": x})[0]
    d = np.abs(y.astype(np.int32) - y_stock.astype(np.int32))
    assert d.max() <= 1, what
    ties = RQ.near_tie(pre, 1e-9)
    assert np.array_equal(y[ties], y_stock[ties]), f"{what}: differs from stock ORT at an exact tie"
    # the library evaluates every element within 1e-4 of a tie (its exact value; pre is within 1e-6 of it) as ORT
    # does: with equal scales, a sixth of the values of the 6-element edge windows
    band = RQ.near_tie(pre, 5e-5)
    assert np.array_equal(y[band], y_stock[band]), f"{what}: differs from stock ORT within the tie band"
    return int(band.sum())


QL_SHAPES = [
    # (layout, shape, attrs): a streamed NCHW plane (> WHOLE_PLANE), a whole-plane one, NHWC with rows of several
    # strips, 1-D
    ("NCHW", [1, 1, 260, 260], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("NCHW", [2, 3, 28, 28], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("NHWC", [1, 2, STRIP + 50, 3], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": 1}),
    ("NHWC", [2, 20, 20, 16], {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 1, 0, 1], "channels_last": 1}),
    ("NCHW", [1, 1, WHOLE_PLANE + 9], {"kernel_shape": [4], "strides": [2], "pads": [2, 1]}),
    # the int16 requantisation's paths: NHWC windows with a full vector width of channels (their ties settled
    # across the channels at once), small NCHW planes pooled several per step (summed areas), NCHW planes summed
    # as flat arrays, a 1-D plane pooled whole, 3-D NHWC (separable passes)
    ("NHWC", [1, 9, 11, 64], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": 1}),
    ("NCHW", [3, 5, 7, 7], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("NCHW", [2, 3, 12, 20], {"kernel_shape": [2, 4], "pads": [1, 1, 0, 2]}),  # flat plane sums, even kernels
    ("NCHW", [1, 2, 9, 17], {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),  # flat plane sums, a longer kernel
    ("NCHW", [2, 3, 50], {"kernel_shape": [4], "strides": [2], "pads": [2, 1]}),
    ("NHWC", [1, 4, 5, 6, 8], {"kernel_shape": [2, 3, 3], "pads": [1, 1, 1, 0, 1, 1], "channels_last": 1}),
    # wide steps between windows (windows.h wide_steps) over strips shortened to keep their input in cache
    # (strip_columns): a streamed 1-D NCHW plane and NHWC image, a whole NCHW plane, 3-D NHWC separable passes
    ("NCHW", [1, 1, 64 * 5000 + 13], {"kernel_shape": [64], "strides": [64]}),
    ("NHWC", [1, 64 * 1500 + 5, 3], {"kernel_shape": [64], "strides": [64], "pads": [3, 0], "channels_last": 1}),
    ("NCHW", [2, 2, 40 * 1000], {"kernel_shape": [40], "strides": [40]}),
    ("NHWC", [1, 2, 3, 200, 4], {"kernel_shape": [1, 2, 20], "strides": [1, 1, 20], "channels_last": 1}),
    # rows that chain (windows.h window_sum_axis: an NCHW plane's rows as one row): stride 2, a stride longer
    # than the kernel, 3-D with a stride of 3
    ("NCHW", [1, 3, 12, 40], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("NCHW", [1, 2, 10, 54], {"kernel_shape": [2, 2], "strides": [3, 3]}),
    ("NCHW", [1, 2, 4, 8, 24], {"kernel_shape": [2, 4, 3], "strides": [2, 4, 3]}),
    # one window holding the whole unit (whole_window.h): NCHW planes summed at once (vector steps and every tail
    # length), NHWC channel sums (rows of several positions and a remainder; int16 lanes folded over many rows;
    # more channels than a requantisation block), with pads, 3-D
    ("NCHW", [2, 5, 7, 7], {"kernel_shape": [7, 7]}),
    ("NCHW", [1, 3, 6, 5], {"kernel_shape": [8, 7], "pads": [1, 1, 1, 1]}),
    ("NCHW", [1, 3, 9, 13], {"kernel_shape": [9, 13]}),
    ("NCHW", [1, 2, 3, 4, 50], {"kernel_shape": [3, 4, 50]}),
    ("NHWC", [2, 7, 7, 40], {"kernel_shape": [7, 7], "channels_last": 1}),
    ("NHWC", [1, 6, 5, 3], {"kernel_shape": [8, 7], "pads": [1, 1, 1, 1], "channels_last": 1}),
    ("NHWC", [1, 16, 20, 5], {"kernel_shape": [16, 20], "channels_last": 1}),
    ("NHWC", [1, 40, 40, 64], {"kernel_shape": [40, 40], "channels_last": 1}),
    ("NHWC", [1, 2, 2, 4100], {"kernel_shape": [2, 2], "channels_last": 1}),
    ("NHWC", [1, 2, 3, 4, 6], {"kernel_shape": [2, 3, 4], "channels_last": 1}),
]


def check_qlinear_streaming_and_ties():
    ties = 0
    for dtype in (np.uint8, np.int8):
        for _, shape, attrs in QL_SHAPES:
            for config in QL_CONFIGS:
                ties += _qlinear(dtype, shape, attrs, config)
    assert ties > 100, f"the equal-scale cases should produce many exact ties, got {ties}"


def check_qlinear_guard_band():
    """Values between 1e-4 and 2e-4 from a rounding tie: the library's float pass cannot decide them (its error is
    up to 8e-5) and settles them exactly in double, so they round as the exact value does; values within 1e-4 of
    the tie are evaluated as ORT does (equal to stock ORT). x_scale / y_scale = 0.500001: an odd difference d
    from the zero point lies d * 1e-6 above a tie, so every d of the type's range covers both bands."""
    xs = np.float32(0.500001)
    for dtype, xz, yz in ((np.uint8, 0, 1), (np.int8, -128, -64)):
        lo, hi = RQ.QRANGE[np.dtype(dtype)]
        values = np.arange(lo, hi + 1).astype(dtype)  # every difference 0..255 from the zero point
        for layout, shape, attrs in (
            ("NCHW", [1, 4, 8, 8], {"kernel_shape": [1, 1]}),
            ("NHWC", [1, 8, 4, 8], {"kernel_shape": [1, 1], "channels_last": 1}),
        ):
            x = values.reshape(shape)
            model, _ = qlinear_model(dtype, shape, dict(attrs, count_include_pad=1), xs, xz, 1.0, yz)
            (y,) = run_with_library(model, {"X": x}, "QLinearAveragePool")
            exact = (x.astype(np.int64) - xz) * np.float64(xs) + yz
            distance = np.abs(exact - np.floor(exact) - 0.5)
            band = (distance >= 1e-4) & (distance <= 2.5e-4)
            assert band.sum() >= 40, f"only {band.sum()} values in the guard band"
            expected = np.clip(np.rint(exact), lo, hi)
            what = f"QLinearAveragePool {np.dtype(dtype).name} {layout} guard band"
            assert np.array_equal(y[band], expected[band]), what
            outside = distance > 1e-4
            assert np.array_equal(y[outside], expected[outside]), what
            stock = make_session(model, library=False).run(None, {"X": x})[0]
            ties = ~outside
            assert np.array_equal(y[ties], stock[ties]), f"{what}: differs from stock at ties"


CHECKS = [
    check_lp_streaming,
    check_lp_streaming_subnormal_rows,
    check_qlinear_streaming_and_ties,
    check_qlinear_guard_band,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda f: f.__name__)
def test_streaming(check):
    check()


def check_all():
    """Every check (rerun_on_isa runs this with each ISA forced). Returns the number of checks."""
    for check in CHECKS:
        check()
    return len(CHECKS)


@each_isa
def test_streaming_on_every_isa(isa):
    """The same checks with each other instruction set forced."""
    assert rerun_on_isa(isa, "test_streaming") == str(len(CHECKS))
