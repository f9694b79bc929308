"""float32 GlobalAveragePool over channels of 2 to 63 elements (planes of 2x2 to 7x7), on every ISA path.

Below 2 kLanes = 64 elements a float channel's sum is specified in order (csrc/kernels/global/global_pools.h,
short_sum): 8 running float sums from +0, sum k taking elements k, k + 8, ... of the whole groups of 8; the tail (the
last n % 8 elements) summed in order from +0; then ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + tail, in float,
divided by n in double and rounded to float. A channel whose float sum is not finite is summed again in double, in
order. The library sums four channels at a time there (short_means), reading past a channel's end into the next ones,
and leaves the last channels of the tensor to the one-channel loop. Each case is checked bit for bit against that
order computed by numpy in float32, and against the float64 mean of tests/reference.py; the shapes put every tail
length on both sides of a group of four and of the tensor's end, and non-finite sums in each lane of a group.
"""

from __future__ import annotations

import numpy as np
import pytest

import onnx_pools
import reference as R
from helpers import cpu_isas, rerun_on_isa, run_op

__all__ = ["cases", "check_all", "specified_means"]

LENGTHS = list(range(2, 64))  # every n % 8, with and without whole groups of 8
CHANNELS = [1, 3, 4, 5, 6, 7, 9, 13, 40]  # channel groups of four with 0 to 3 left over


def specified_means(x: np.ndarray) -> np.ndarray:
    """The means of the channels of x (float32, N x C x spatial) in the specified order, as float32."""
    flat = x.reshape(x.shape[0] * x.shape[1], -1)
    n = flat.shape[1]
    whole = n - n % 8
    s = np.zeros((flat.shape[0], 8), np.float32)
    tail = np.zeros(flat.shape[0], np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, whole, 8):
            s += flat[:, i : i + 8]
        for i in range(whole, n):
            tail += flat[:, i]
        total = ((s[:, 0] + s[:, 1]) + (s[:, 2] + s[:, 3])) + ((s[:, 4] + s[:, 5]) + (s[:, 6] + s[:, 7])) + tail
        means = (total.astype(np.float64) / n).astype(np.float32)
    for j in np.flatnonzero(~np.isfinite(total)):  # summed again in double, in order
        again = 0.0
        for v in flat[j].astype(np.float64):
            again += v
        means[j] = np.float32(again / n)
    return means.reshape(x.shape[:2] + (1,) * (x.ndim - 2))


def make_input(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Normal values at a few scales; in the channels after the first, an infinity, a NaN, values whose float sum
    overflows (their mean is finite), both signs of zero and subnormals, each in a different lane of a group of four
    from one shape to the next."""
    x = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e4])
    flat = x.reshape(shape[0] * shape[1], -1)
    count, n = flat.shape
    first = int(rng.integers(1, 4))
    specials = [
        lambda c: c.__setitem__(int(rng.integers(n)), np.inf),
        lambda c: c.__setitem__(int(rng.integers(n)), np.nan),
        lambda c: c.__setitem__(slice(None), 3e38),
        lambda c: c.__setitem__(slice(None), rng.choice([0.0, -0.0], n)),
        lambda c: c.__setitem__(slice(None), c * 1e-42),
        lambda c: c.__setitem__(slice(None), -3e38),
    ]
    for k, put in enumerate(specials):
        if first + k < count:
            put(flat[first + k])
    with np.errstate(over="ignore"):
        return x.astype(np.float32)


def cases() -> list[tuple[tuple[int, ...], int]]:
    """(shape, threads): every length over the channel counts, some as planes, batches and two threads."""
    out = [((1, c, n), 1) for n in LENGTHS for c in CHANNELS]
    out += [((2, 37, h, h), 1) for h in (2, 3, 4, 5, 6, 7)]
    out += [((1, 1024, h, h), 2) for h in (2, 3, 7)]
    out += [((3, 2048, 7, 7), 1)]
    return out


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(2929)
    checked = 0
    for shape, threads in cases():
        x = make_input(shape, rng)
        y, _ = run_op("GlobalAveragePool", 22, "float32", x, threads=threads)
        what = f"{shape} threads {threads} on {onnx_pools.active_isa()}"
        expected = specified_means(x)
        assert y.dtype == np.float32 and y.shape == expected.shape, what
        differ = (y.view(np.uint32) != expected.view(np.uint32)) & ~(np.isnan(y) & np.isnan(expected))
        assert not differ.any(), f"{what}: channels {np.flatnonzero(differ)[:8]} differ from the specified sums"
        R.assert_close(y, R.global_pool("GlobalAveragePool", x), "float32", scale=R.input_scale(x), what=what)
        checked += 1
    return checked


def test_short_float_means() -> None:
    assert check_all() == len(cases())


@pytest.mark.parametrize("isa", cpu_isas())
def test_short_float_means_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_global_small_planes") == str(len(cases()))
