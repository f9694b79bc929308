"""Huge and odd tensors.

* Non-finite inputs (+-inf, NaN) at every kind of position, subnormal inputs, values near the top of each type's
  range, misaligned input buffers, empty and degenerate shapes: each op against the float64 references.
* More than 2^31 elements (64-bit index arithmetic): marked `huge`, skipped unless selected (needs ~7 GB of free
  memory, a few minutes):  PYTHONPATH=. python -m pytest tests/test_huge_and_odd.py -q -m huge -s
"""

import time

import numpy as np
import pytest

import reference as R
import reference_qlinear as RQ
from helpers import (
    ALL_DTYPES,
    CASE_COUNTS,
    assert_close_with_subnormals,
    assert_qlinear_matches,
    counts_one_run,
    from_ortvalue,
    make_session,
    pool_model,
    qlinear_model,
    rng_for,
    run_op,
    run_session,
    to_ortvalue,
)

GLOBAL = ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]
MAX = {
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
}


def global_ref(op, x, p=2):
    with np.errstate(all="ignore"):
        if op == "GlobalAveragePool":
            return R.global_average_pool(x)
        if op == "GlobalMaxPool":
            return R.global_max_pool(x)
        return R.global_lp_pool(x, p)


def check_global(op, dtype, x, attrs=None, p=2, what=""):
    y, _ = run_op(op, 22, dtype, x, attrs or ({"p": p} if op == "GlobalLpPool" else {}))
    ref = global_ref(op, x, p)
    what = f"{op} {dtype} {what}"
    if op == "GlobalMaxPool":
        np.testing.assert_array_equal(R.to_f64(y), R.to_f64(R.to_dtype(ref, dtype)), err_msg=what)
    else:
        assert_close_with_subnormals(y, ref, dtype, x, what)
    return y


# --------------------------------------------------------------------------- non-finite inputs

SPECIAL = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}
# channel lengths around the kernels' block (1024) and lane (32, 64) sizes
LENGTHS = [1, 7, 33, 64, 100, 1023, 1025, 2049]


def nonfinite_input(dtype, length, seed):
    """[3 (N), 6 (C), length]: channel 0 clean, 1 one NaN, 2 one +inf, 3 +inf and -inf, 4 NaN and +inf, 5 all -inf;
    the position of each special value differs per N (first, last, a middle one)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal([3, 6, length]) * 2
    for n, pos in enumerate([0, length - 1, length // 2]):
        x[n, 1, pos] = np.nan
        x[n, 2, pos] = np.inf
        x[n, 3, pos] = np.inf
        x[n, 3, (pos + length // 3) % length] = -np.inf
        x[n, 4, pos] = np.nan
        x[n, 4, (pos + 1) % length] = np.inf
        x[n, 5, :] = -np.inf
    return R.to_dtype(x, dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", GLOBAL)
def test_global_pools_non_finite(op, dtype):
    for length in LENGTHS:
        x = nonfinite_input(dtype, length, length)
        for p in [1, 2, 3, 5] if op == "GlobalLpPool" else [2]:
            check_global(op, dtype, x, p=p, what=f"length {length} p={p}")
            CASE_COUNTS["huge/odd: non-finite inputs"] += 1


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lppool_non_finite_stays_in_its_windows(dtype):
    """A NaN or inf affects exactly the windows that contain it (the separable window sums must not spread it)."""
    rng = rng_for("lp nonfinite", dtype)
    for shape, k, s, pads in [
        ([2, 3, 9, 11], [3, 2], [2, 1], [1, 0, 1, 1]),
        ([1, 2, 40], [5], [3], [2, 2]),
        ([1, 2, 5, 6, 7], [2, 3, 2], [1, 2, 3], None),
    ]:
        for p in (1, 2, 3, 7):
            x = rng.standard_normal(shape)
            flat = x.reshape(-1)
            for v in (np.nan, np.inf, -np.inf, np.inf):
                flat[rng.integers(flat.size)] = v
            x = R.to_dtype(x, dtype)
            attrs = {"kernel_shape": k, "strides": s, "p": p}
            if pads:
                attrs["pads"] = pads
            y, _ = run_op("LpPool", 22, dtype, x, attrs)
            with np.errstate(all="ignore"):
                ref = R.lp_pool(x, k, s, pads, p=p)
            R.assert_close(y, ref, dtype, 4.0, f"LpPool {dtype} shape={shape} p={p}")
            CASE_COUNTS["huge/odd: non-finite inputs"] += 1


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_non_finite_scales_are_errors(dtype):
    """The quantized op has no non-finite data, but its scales can be: a clear error naming the input."""
    x = np.zeros([1, 2, 4, 4], dtype)
    for name, xs, ys in (
        ("x_scale", np.nan, 0.1),
        ("x_scale", np.inf, 0.1),
        ("y_scale", 0.1, -np.inf),
        ("y_scale", 0.1, np.nan),
    ):
        model, _ = qlinear_model(dtype, [1, 2, 4, 4], {"kernel_shape": [2, 2]}, xs, None, ys, None)
        with pytest.raises(Exception, match=rf"QLinearAveragePool.*{name}"):
            make_session(model).run(None, {"X": x})


# --------------------------------------------------------------------------- subnormal and huge finite values


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_subnormal_inputs(dtype):
    """Inputs that are all subnormal in their type (and whose squares underflow): results per the reference."""
    rng = rng_for("subnormal", dtype)
    tiny = {"float32": 1e-39, "float64": 1e-310, "float16": 4e-5, "bfloat16": 5e-39}[dtype]
    for shape in ([2, 3, 1], [2, 3, 77], [1, 2, 2000], [2, 2, 5, 7]):
        x = R.to_dtype(rng.uniform(0.5, 1.0, shape) * tiny * rng.choice([-1.0, 1.0], shape), dtype)
        for op in GLOBAL:
            for p in [1, 2, 3, 4, 9] if op == "GlobalLpPool" else [2]:
                check_global(op, dtype, x, p=p, what=f"subnormal shape={shape}")
        if len(shape) == 4:
            for p in (1, 2, 3, 9):
                y, _ = run_op("LpPool", 22, dtype, x, {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1], "p": p})
                assert_close_with_subnormals(
                    y, R.lp_pool(x, [2, 3], pads=[1, 1, 0, 1], p=p), dtype, x, f"LpPool {dtype} subnormal p={p}"
                )
        CASE_COUNTS["huge/odd: subnormal inputs"] += 1


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lp_magnitudes_that_change_along_the_data(dtype):
    """The Lp kernels pick a power-of-two scaling from the first elements of a channel or plane (so subnormal data
    is not slow); data whose magnitude changes after those elements must still come out right: zeros, subnormal,
    tiny, normal and near-max segments in every order, with segment boundaries around the probe (64) and block
    (1024) lengths."""
    rng = rng_for("changing magnitudes", dtype)
    levels = {
        "zero": 0.0,
        "subnormal": {"float32": 1e-39, "float64": 1e-310, "float16": 4e-5, "bfloat16": 5e-39}[dtype],
        "tiny": {"float32": 1e-20, "float64": 1e-160, "float16": 1e-3, "bfloat16": 1e-20}[dtype],
        "normal": 1.0,
        "near max": MAX[dtype] / 8,
    }
    pairs = [(first, second) for first in levels for second in levels if first != second]
    for split in (63, 1025):
        # Every ordered pair at once, two channels (and two LpPool planes) each: each channel or plane is probed
        # and scaled on its own, so one session per op tests them all (one per pair took ~9 s per type).
        length = split + 1100
        x = np.concatenate(
            [
                np.where(np.arange(length) < split, levels[first], levels[second])
                * rng.uniform(0.5, 1.5, [2, length])
                * rng.choice([-1.0, 1.0], [2, length])
                for first, second in pairs
            ]
        )
        x = R.to_dtype(x, dtype)[None]
        plane = x.reshape(1, x.shape[1], length // 25 if length % 25 == 0 else 1, -1)
        results = []
        for p in (2, 3):
            y, _ = run_op("GlobalLpPool", 22, dtype, x, {"p": p})
            results.append((y, global_ref("GlobalLpPool", x, p), x, f"GlobalLpPool p={p}"))
        y, _ = run_op("LpPool", 22, dtype, plane, {"kernel_shape": [1, 3], "pads": [0, 1, 0, 1], "p": 2})
        with np.errstate(all="ignore"):
            results.append((y, R.lp_pool(plane, [1, 3], pads=[0, 1, 0, 1], p=2), plane, "LpPool"))
        for i, (first, second) in enumerate(pairs):
            pair = slice(2 * i, 2 * i + 2)
            for y, ref, inp, op in results:
                what = f"{op} {dtype} {first} then {second} at {split}"
                assert_close_with_subnormals(y[:, pair], ref[:, pair], dtype, inp[:, pair], what)
    CASE_COUNTS["huge/odd: magnitudes changing along the data"] += len(pairs)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lp_near_the_top_of_the_range(dtype):
    """|x| near the type's largest finite value: Lp norms must not overflow where the true result is representable,
    and must be inf where it is not (README: overflow-safe)."""
    rng = rng_for("top", dtype)
    top = MAX[dtype]
    for shape in ([2, 3, 5], [1, 2, 300], [1, 1, 3, 3]):
        x = R.to_dtype(rng.uniform(0.25, 0.5, shape) * top * rng.choice([-1.0, 1.0], shape), dtype)
        for p in (1, 2, 3, 8):
            check_global("GlobalLpPool", dtype, x, p=p, what=f"near max shape={shape}")
        check_global("GlobalMaxPool", dtype, x, what=f"near max shape={shape}")
        if len(shape) == 4:
            for p in (2, 8):
                y, _ = run_op("LpPool", 22, dtype, x, {"kernel_shape": [2, 2], "p": p})
                with np.errstate(all="ignore"):
                    ref = R.lp_pool(x, [2, 2], p=p)
                R.assert_close(y, ref, dtype, R.input_scale(x), f"LpPool {dtype} near max p={p}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_global_average_near_the_top_of_the_range(dtype):
    x = R.to_dtype(np.full([1, 2, 4], 0.75) * MAX[dtype], dtype)
    check_global("GlobalAveragePool", dtype, x, what="four values of 0.75 * max")


def test_global_average_near_the_top_of_the_range_float64_float16():
    """(No overflow possible here: double accumulates double; float16's range is tiny for a float accumulator.)"""
    for dtype in ("float64", "float16"):
        x = R.to_dtype(np.full([1, 2, 1000], 0.75) * MAX[dtype], dtype)
        check_global("GlobalAveragePool", dtype, x, what="0.75 * max")


# --------------------------------------------------------------------------- misaligned buffers


def _misaligned(x, offset):
    raw = np.zeros(x.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    view = x.view(np.uint16) if x.dtype == R.BF16 else x
    out = np.ndarray(view.shape, view.dtype, buffer=raw.data, offset=start)
    out[...] = view
    return out.view(x.dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_misaligned_input_buffers(dtype):
    """ORT passes a user's buffer through unchanged (OrtValue over numpy memory), so a kernel can see an input that is
    not aligned even to its element size. Results must not change."""
    rng = rng_for("misaligned", dtype)
    x = R.to_dtype(rng.standard_normal([2, 5, 33, 37]) + 0.5, dtype)
    cases = [
        ("GlobalAveragePool", {}, R.global_average_pool(x)),
        ("GlobalMaxPool", {}, R.global_max_pool(x)),
        ("GlobalLpPool", {"p": 3}, R.global_lp_pool(x, 3)),
        ("LpPool", {"kernel_shape": [3, 3], "strides": [2, 1], "p": 2}, R.lp_pool(x, [3, 3], [2, 1], p=2)),
    ]
    for op, attrs, ref in cases:
        sess = make_session(pool_model(op, 22, dtype, list(x.shape), attrs))
        for offset in (1, 2, 3, 4, 8, 12):
            ov = to_ortvalue(_misaligned(x, offset))
            assert ov.data_ptr() % 64 == offset
            binding = sess.io_binding()
            binding.bind_ortvalue_input("X", ov)
            binding.bind_output("Y")
            with counts_one_run(op):
                sess.run_with_iobinding(binding)
            y = from_ortvalue(binding.get_outputs()[0])
            R.assert_close(y, ref, dtype, R.input_scale(x), f"{op} {dtype} input at 64k+{offset}")
            CASE_COUNTS["huge/odd: misaligned inputs"] += 1


def test_qlinear_misaligned_input_buffers():
    rng = rng_for("misaligned q")
    x = rng.integers(0, 256, [2, 7, 9, 33]).astype(np.uint8)
    for cl in (0, 1):
        attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": cl}
        model, _ = qlinear_model(np.uint8, list(x.shape), attrs, 0.02, 128, 0.03, 100)
        sess = make_session(model)
        ref, pre = RQ.qlinear_average_pool(x, 0.02, 128, 0.03, 100, [3, 3], pads=[1, 1, 1, 1], channels_last=cl)
        for offset in (1, 3, 7):
            xm = _misaligned(x, offset)
            with counts_one_run("QLinearAveragePool"):
                y = sess.run(None, {"X": xm})[0]
            assert_qlinear_matches(y, ref, pre, f"QLinearAveragePool channels_last={cl} offset {offset}")


# --------------------------------------------------------------------------- degenerate shapes


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_degenerate_shapes(dtype):
    rng = rng_for("degenerate", dtype)
    shapes = [
        [0, 3, 4, 4],
        [2, 0, 4, 4],
        [1, 1, 1],
        [1, 1, 1, 1, 1, 1, 1, 1],
        [1, 2, 2, 1, 2, 1, 2, 3],
        [1, 1, 100000],
        [1, 4096, 1, 1],
        [3, 1, 1, 70000],
    ]
    for shape in shapes:
        x = R.to_dtype(rng.standard_normal(shape) + 0.25, dtype)
        for op in GLOBAL:
            if 0 in shape[:2]:
                y, _ = run_op(op, 22, dtype, x, {"p": 2} if op == "GlobalLpPool" else {})
                assert y.shape == tuple(shape[:2]) + (1,) * (len(shape) - 2)
            else:
                check_global(op, dtype, x, what=f"shape={shape}")
            CASE_COUNTS["huge/odd: degenerate shapes"] += 1
    # LpPool: the kernel is the whole input; windows entirely in the padding give 0; one output per axis
    x = R.to_dtype(rng.standard_normal([2, 3, 4, 5]), dtype)
    for attrs in (
        {"kernel_shape": [4, 5]},
        {"kernel_shape": [2, 2], "pads": [3, 3, 3, 3], "strides": [3, 3]},
        {"kernel_shape": [1, 1], "strides": [100, 100]},
        {"kernel_shape": [2, 2], "pads": [2, 2, 2, 2], "strides": [7, 7], "ceil_mode": 1},
    ):
        y, _ = run_op("LpPool", 22, dtype, x, dict(attrs, p=2))
        kw = {k: v for k, v in attrs.items()}
        R.assert_close(y, R.lp_pool(x, **kw, p=2), dtype, R.input_scale(x), f"LpPool {dtype} {attrs}")


def test_qlinear_window_without_input_gives_y_zero_point():
    """README: a window with no input element (possible with large pads) gives y_zero_point."""
    x = np.full([1, 2, 3, 3], 200, np.uint8)
    attrs = {"kernel_shape": [2, 2], "pads": [2, 2, 2, 2], "strides": [4, 4]}
    model, _ = qlinear_model(np.uint8, [1, 2, 3, 3], attrs, 0.5, 10, 0.25, 77)
    with counts_one_run("QLinearAveragePool"):
        y = make_session(model).run(None, {"X": x})[0]
    # windows start at -2 and 2 per axis: [-2, -1] holds nothing, [2, 3] holds position 2
    assert y.shape == (1, 2, 2, 2)
    expected = np.full([1, 2, 2, 2], 77, np.uint8)
    expected[:, :, 1, 1] = np.clip(np.rint((200 - 10) * 0.5 / 0.25 + 77), 0, 255)
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_small_planes_with_pads_larger_than_the_input(dtype):
    """Short output rows take a running-sum path: pads up to kernel - 1 on planes smaller than the kernel,
    strides, ceil_mode and both count_include_pad values, against the reference. (Windows wholly in the padding:
    test_qlinear_window_without_input_gives_y_zero_point.)"""
    rng = rng_for("qlinear large pads", dtype)
    lo, hi = RQ.QRANGE[np.dtype(dtype)]
    for shape, kernel, pads, strides in (
        ([2, 3, 3, 4], [4, 5], [3, 4, 3, 4], [2, 3]),
        ([1, 2, 1, 7], [3, 2], [2, 0, 2, 1], [1, 2]),
        ([1, 1, 5, 1], [2, 6], [0, 5, 1, 5], [3, 1]),
    ):
        x = rng.integers(lo, hi + 1, shape).astype(dtype)
        for cip, ceil_mode in ((0, 0), (1, 0), (0, 1), (1, 1)):
            attrs = {
                "kernel_shape": kernel,
                "pads": pads,
                "strides": strides,
                "count_include_pad": cip,
                "ceil_mode": ceil_mode,
            }
            model, _ = qlinear_model(dtype, shape, attrs, 0.05, 3, 0.07, -2 if dtype == np.int8 else 9)
            with counts_one_run("QLinearAveragePool"):
                y = make_session(model).run(None, {"X": x})[0]
            ref, pre = RQ.qlinear_average_pool(
                x,
                0.05,
                3,
                0.07,
                -2 if dtype == np.int8 else 9,
                kernel,
                strides=strides,
                pads=pads,
                count_include_pad=cip,
                ceil_mode=ceil_mode,
            )
            assert_qlinear_matches(y, ref, pre, f"{dtype.__name__} shape={shape} {attrs}")
        CASE_COUNTS["huge/odd: QLinearAveragePool pads larger than the input"] += 1


# --------------------------------------------------------------------------- more than 2^31 elements


def _available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _need(gib):
    if _available_bytes() < gib * 2**30:
        pytest.skip(f"needs {gib} GiB of available memory")


# The huge inputs repeat one random period of PERIOD elements: filling is a copy, and a channel's sums follow from the
# period's prefix sums. PERIOD is odd, so no power-of-two offset (a wrapped or truncated index) lands on equal content.
PERIOD = (1 << 24) + 4099


def _fill(x, seed):
    """x's flat content: position i holds period[i % PERIOD], a random period (uniform bytes, or [0, 1) floats)."""
    flat = x.reshape(-1)
    rng = np.random.default_rng(seed)
    if x.dtype.kind in "iu" and x.dtype.itemsize == 1:
        period = rng.integers(0, 256, PERIOD, dtype=np.uint8).view(x.dtype)
    else:
        period = rng.random(PERIOD, dtype=np.float32).astype(x.dtype)
    for start in range(0, flat.size, PERIOD):
        stop = min(flat.size, start + PERIOD)
        flat[start:stop] = period[: stop - start]
    return period


def _prefix_sums(period64):
    """(prefix sums, prefix sums of squares) of the period, each with a leading 0: what _periodic_sums reads."""
    return np.concatenate([[0.0], np.cumsum(period64)]), np.concatenate([[0.0], np.cumsum(np.square(period64))])


def _periodic_sums(prefixes, start, stop):
    """(sum, sum of squares) in float64 of period[i % PERIOD] over flat positions start <= i < stop, from
    _prefix_sums(period)."""

    def upto(i, pre):  # the sum over positions [0, i)
        whole, rest = divmod(i, PERIOD)
        return whole * pre[-1] + pre[rest]

    prefix, prefix_sq = prefixes
    return upto(stop, prefix) - upto(start, prefix), upto(stop, prefix_sq) - upto(start, prefix_sq)


def _log(msg, t0):
    print(f"[huge] {time.perf_counter() - t0:7.1f} s  {msg}", flush=True)


@pytest.mark.huge
def test_huge_float16_global_pools():
    """float16 [2, 1, 2^30 + 1]: 2^31 + 2 elements, 4 GiB; the second channel starts at element 2^30 + 1 and ends past
    element 2^31 (byte offsets past 2^32). Values in [0, 1) with a block of 10s at the very end of each channel (2% of
    the mean) and marked maxima at the channels' ends, so a wrapped or truncated index changes the answer; all three
    results are representable in float16."""
    _need(7)
    t0 = time.perf_counter()
    size = 2**30 + 1
    tail = 1 << 20
    x = np.empty([2, 1, size], np.float16)
    period = _fill(x, 1)
    x[:, :, -tail:] = np.float16(10.0)
    x[0, 0, -1] = np.float16(30000.0)
    x[1, 0, 0] = np.float16(20000.0)
    x[1, 0, -1] = np.float16(-1.0)
    assert x.size > 2**31
    _log(f"input {x.shape} float16, {x.nbytes / 2**30:.2f} GiB", t0)
    # reference in float64: the periodic part from the period's prefix sums, the overwritten ends element by element
    period64 = period.astype(np.float64)
    prefixes = _prefix_sums(period64)
    sums, sq, mx = np.zeros(2), np.zeros(2), np.zeros(2)
    for c in range(2):
        head = 1 if c == 1 else 0  # x[1, 0, 0] was overwritten
        s, q = _periodic_sums(prefixes, c * size + head, (c + 1) * size - tail)
        ends = np.concatenate([x[c, 0, :head], x[c, 0, -tail:]]).astype(np.float64)
        sums[c] = s + ends.sum()
        sq[c] = q + np.square(ends).sum()
        mx[c] = max(period64.max(), ends.max())  # the periodic part spans many periods
    ref = {
        "GlobalAveragePool": (sums / size).reshape(2, 1, 1),
        "GlobalMaxPool": mx.reshape(2, 1, 1),
        "GlobalLpPool": np.sqrt(sq).reshape(2, 1, 1),
    }
    _log("reference done", t0)
    for op in GLOBAL:
        for threads in (1, 2):
            sess = make_session(
                pool_model(op, 22, "float16", list(x.shape), {"p": 2} if op == "GlobalLpPool" else {}), threads=threads
            )
            t = time.perf_counter()
            with counts_one_run(op):
                (y,) = run_session(sess, {"X": x})
            _log(f"{op} threads={threads}: {time.perf_counter() - t:.2f} s -> {y.ravel().tolist()}", t0)
            if op == "GlobalMaxPool":
                np.testing.assert_array_equal(y.astype(np.float64), ref[op].astype(np.float16).astype(np.float64))
            else:
                R.assert_close(y, ref[op], "float16", 1.0, f"{op} on 2^31 + 2 elements")
    CASE_COUNTS["huge: > 2^31 elements"] += 1


@pytest.mark.huge
def test_huge_uint8_qlinear_average_pool():
    """uint8 with 3 * 715_900_000 = 2_147_700_000 > 2^31 elements (2 GiB), read as one NCHW plane [1, 1, T] (indices
    within a plane past 2^31) and as NHWC [1, T / 3, 3]; kernel 1024, stride 1024, ceil_mode (a partial last window).
    The int8 view of the same bytes runs too. The reference covers a sample of the ~2 million windows: the first and
    last ones, those around element (NCHW) or byte (NHWC) 2^31, and random ones."""
    _need(5)
    t0 = time.perf_counter()
    L = 715_900_000
    total = 3 * L
    assert total > 2**31
    buf = np.empty(total, np.uint8)
    _fill(buf, 2)
    _log(f"input {total} bytes", t0)
    K = 1024
    attrs = {"kernel_shape": [K], "strides": [K], "ceil_mode": 1}
    xs, xz, ys, yz = 0.0173, 117, 0.0061, 121

    def reference_windows(x2d, dtype, windows):
        """x2d [length, channels] (one image), windows of K along the length (indices `windows`): float32
        dequantisation, float64 sums; (y, pre-rounding values), each [len(windows), channels]."""
        length, ch = x2d.shape
        pre = np.empty([len(windows), ch])
        zp = np.int32(xz if dtype == np.uint8 else xz - 128)
        for i, w in enumerate(windows):
            v = x2d[w * K : min(length, (w + 1) * K)].view(dtype).astype(np.int32)
            deq = (np.float32(xs) * (v - zp).astype(np.float32)).astype(np.float64)
            pre[i] = deq.sum(axis=0) / v.shape[0]
        pre = pre / np.float64(np.float32(ys)) + (yz if dtype == np.uint8 else yz - 128)
        lo, hi = RQ.QRANGE[np.dtype(dtype)]
        return np.clip(np.rint(pre), lo, hi).astype(dtype), pre

    def sample(length, boundary):
        """Window indices: the first and last 512, 512 on each side of the window holding `boundary`, 4096 random."""
        n_out = -(-length // K)
        b = boundary // K
        picked = np.concatenate(
            [
                np.arange(512),
                np.arange(n_out - 512, n_out),
                np.arange(b - 512, b + 512),
                np.random.default_rng(4).integers(0, n_out, 4096),
            ]
        )
        return np.unique(picked[picked < n_out])

    # the windowed reference equals reference_qlinear on a small input (every window, the partial last one included)
    small = np.random.default_rng(3).integers(0, 256, [3 * K + 100, 2]).astype(np.uint8)
    a, _ = reference_windows(small, np.uint8, np.arange(4))
    b, _ = RQ.qlinear_average_pool(small.T[None], xs, xz, ys, yz, [K], [K], ceil_mode=1)
    np.testing.assert_array_equal(a.T[None], b)

    for dtype in (np.uint8, np.int8):
        zx, zy = (xz, yz) if dtype == np.uint8 else (xz - 128, yz - 128)
        for layout in ("NCHW", "NHWC"):
            if layout == "NCHW":
                x = buf.view(dtype).reshape(1, 1, total)
                windows = sample(total, 2**31)
                ref, pre = reference_windows(buf.reshape(total, 1), dtype, windows)
                ref, pre = ref.T[None], pre.T[None]
                a = dict(attrs)
            else:
                x = buf.view(dtype).reshape(1, L, 3)
                windows = sample(L, 2**31 // 3)
                ref, pre = reference_windows(buf.reshape(L, 3), dtype, windows)
                ref, pre = ref[None], pre[None]
                a = dict(attrs, channels_last=1)
            _log(f"{np.dtype(dtype).name} {layout} reference done ({len(windows)} windows)", t0)
            model, _ = qlinear_model(dtype, list(x.shape), a, xs, zx, ys, zy)
            sess = make_session(model, threads=2)
            t = time.perf_counter()
            with counts_one_run("QLinearAveragePool"):
                y = sess.run(None, {"X": x})[0]
            _log(
                f"QLinearAveragePool {np.dtype(dtype).name} {layout} {list(x.shape)}: {time.perf_counter() - t:.2f} s",
                t0,
            )
            n_out = -(-x.shape[2 if layout == "NCHW" else 1] // K)
            expected_shape = [1, 1, n_out] if layout == "NCHW" else [1, n_out, 3]
            assert list(y.shape) == expected_shape, f"{layout}: shape {list(y.shape)}, expected {expected_shape}"
            got = y[:, :, windows] if layout == "NCHW" else y[:, windows, :]
            assert_qlinear_matches(got, ref, pre, f"QLinearAveragePool {np.dtype(dtype).name} {layout} > 2^31 elements")
            CASE_COUNTS["huge: > 2^31 elements"] += 1
