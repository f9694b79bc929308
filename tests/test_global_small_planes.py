"""GlobalAveragePool over float32, float16 and bfloat16 channels of 2 to 63 elements (planes of 2x2 to 7x7), on
every ISA path.

Below 2 kLanes = 64 elements a float channel's sum is specified in order (csrc/kernels/global/global_pools.h,
short_sum): 8 running float sums from +0, sum k taking elements k, k + 8, ... of the whole groups of 8; the tail (the
last n % 8 elements) summed in order from +0; then ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + tail, in float,
divided by n in double and rounded to float. A channel whose float sum is not finite is summed again in double, in
order. The library sums four channels at a time there (short_means), reading past a channel's end into the next ones,
and leaves the last channels of the tensor to the one-channel loop. float16 and bfloat16 channels are pooled as their
float values, the float mean rounded to the type; float16 means on the portable and avx2 paths are summed as
converted, four channels at a time, their one or two tail elements gathered into one vector (scaled_half_means). Each
case is checked bit for bit against that order computed by numpy in float32, and against the float64 mean of
tests/reference.py; the shapes put every tail length on both sides of a group of four and of the tensor's end, and
non-finite sums in each lane of a group. Last, GlobalMaxPool over channels of exactly one vector (check_vector_maxima).
"""

from __future__ import annotations

import numpy as np

import onnx_pools
import reference as R
from helpers import each_isa, rerun_on_isa, run_op, short_sum_order

__all__ = ["cases", "check_all", "check_vector_maxima", "max_cases", "max_input", "specified_means"]

LENGTHS = list(range(2, 64))  # every n % 8, with and without whole groups of 8
CHANNELS = [1, 3, 4, 5, 6, 7, 9, 13, 40]  # channel groups of four with 0 to 3 left over
DTYPES = ["float32", "float16", "bfloat16"]
HUGE = {"float32": 3e38, "float16": 6e4, "bfloat16": 3e38}  # float sums of these overflow (not float16's)
TINY = {"float32": 1e-42, "float16": 2.0**-20, "bfloat16": 1e-42}  # scales to subnormal values


def specified_means(x: np.ndarray) -> np.ndarray:
    """The means of the channels of x (N x C x spatial) in the specified order, in float32, rounded to x's type."""
    flat = x.reshape(x.shape[0] * x.shape[1], -1).astype(np.float32)
    n = flat.shape[1]
    total = short_sum_order(flat)
    with np.errstate(over="ignore", invalid="ignore"):
        means = (total.astype(np.float64) / n).astype(np.float32)
    for j in np.flatnonzero(~np.isfinite(total)):  # summed again in double, in order
        again = 0.0
        for v in flat[j].astype(np.float64):
            again += v
        means[j] = np.float32(again / n)
    with np.errstate(over="ignore"):
        return means.astype(x.dtype).reshape(x.shape[:2] + (1,) * (x.ndim - 2))


def make_input(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Normal values at a few scales; in the channels after the first, an infinity, a NaN, huge values (float32: their
    float sum overflows, their mean is finite), both signs of zero and subnormals, each in a different lane of a group
    of four from one shape to the next."""
    x = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e3 if dtype == "float16" else 1e4])
    flat = x.reshape(shape[0] * shape[1], -1)
    count, n = flat.shape
    first = int(rng.integers(1, 4))
    specials = [
        lambda c: c.__setitem__(int(rng.integers(n)), np.inf),
        lambda c: c.__setitem__(int(rng.integers(n)), np.nan),
        lambda c: c.__setitem__(slice(None), HUGE[dtype]),
        lambda c: c.__setitem__(slice(None), rng.choice([0.0, -0.0], n)),
        lambda c: c.__setitem__(slice(None), c * TINY[dtype]),
        lambda c: c.__setitem__(slice(None), -HUGE[dtype]),
    ]
    for k, put in enumerate(specials):
        if first + k < count:
            put(flat[first + k])
    with np.errstate(over="ignore"):
        return R.to_dtype(x, dtype)


def cases() -> list[tuple[str, tuple[int, ...], int]]:
    """(type, shape, threads): every length over the channel counts, some as planes, batches and two threads."""
    out = []
    for dtype in DTYPES:
        out += [(dtype, (1, c, n), 1) for n in LENGTHS for c in CHANNELS]
        out += [(dtype, (2, 37, h, h), 1) for h in (2, 3, 4, 5, 6, 7)]
        out += [(dtype, (1, 1024, h, h), 2) for h in (2, 3, 7)]
        out += [(dtype, (3, 2048, 7, 7), 1)]
    return out


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(2929)
    checked = 0
    for dtype, shape, threads in cases():
        x = make_input(dtype, shape, rng)
        y, _ = run_op("GlobalAveragePool", 22, dtype, x, threads=threads)
        what = f"{dtype} {shape} threads {threads} on {onnx_pools.active_isa()}"
        expected = specified_means(x)
        assert y.dtype == x.dtype and y.shape == expected.shape, what
        bits = np.uint32 if dtype == "float32" else np.uint16
        nan = np.isnan(y.astype(np.float32)) & np.isnan(expected.astype(np.float32))
        differ = (y.view(bits) != expected.view(bits)) & ~nan
        assert not differ.any(), f"{what}: channels {np.flatnonzero(differ)[:8]} differ from the specified sums"
        R.assert_close(y, R.global_pool("GlobalAveragePool", x), dtype, scale=R.input_scale(x), what=what)
        checked += 1
    return checked


def test_short_float_means() -> None:
    assert check_all() == len(cases())


@each_isa
def test_short_float_means_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_global_small_planes") == str(len(cases()))


# GlobalMaxPool over channels of exactly one native vector (16 floats with avx512, 8 with avx2, 4 with the portable
# path; doubles half as many): maxima of a group of channels side by side in one vector each (max_short_vectors), a
# NaN in the group sending each channel to the one-channel scan. Every such length on every path, with channels of
# NaN (first, last, middle element), -inf only, and the maximum repeated, in each lane of a group.
MAX_LENGTHS = {"float32": [4, 8, 16], "float64": [2, 4, 8]}


def max_input(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(shape)
    flat = x.reshape(shape[0] * shape[1], -1)
    count, n = flat.shape
    first = int(rng.integers(0, 4))
    specials = [
        lambda c: c.__setitem__(0, np.nan),
        lambda c: c.__setitem__(n - 1, np.nan),
        lambda c: c.__setitem__(slice(None), -np.inf),
        lambda c: c.__setitem__(slice(None), np.where(rng.random(n) < 0.5, 2.5, -1.0)),
        lambda c: c.__setitem__(n // 2, np.nan),
    ]
    for k, put in enumerate(specials):
        if first + 2 * k < count:
            put(flat[first + 2 * k])
    return R.to_dtype(x, dtype)


def max_cases() -> list[tuple[str, tuple[int, ...]]]:
    return [(dtype, (1, c, n)) for dtype, lengths in MAX_LENGTHS.items() for n in lengths for c in (1, 4, 5, 11, 37)]


def check_vector_maxima() -> int:
    """Every max case on this process's ISA against the float64 maximum. Returns the number of cases."""
    rng = np.random.default_rng(2930)
    for dtype, shape in max_cases():
        x = max_input(dtype, shape, rng)
        y, _ = run_op("GlobalMaxPool", 22, dtype, x)
        what = f"GlobalMaxPool {dtype} {shape} on {onnx_pools.active_isa()}"
        R.assert_close(y, R.global_pool("GlobalMaxPool", x), dtype, what=what)
    return len(max_cases())


def test_vector_maxima() -> None:
    assert check_vector_maxima() == len(max_cases())


@each_isa
def test_vector_maxima_on_each_isa(isa: str) -> None:
    assert rerun_on_isa(isa, "test_global_small_planes", "check_vector_maxima") == str(len(max_cases()))
