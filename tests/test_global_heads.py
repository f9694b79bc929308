"""Global pools of CNN heads and cache-resident tensors: the loops of csrc/kernels/global/global_pools.h that take
them, on every ISA path.

- Float and double means of short channels from 2 kLanes elements (64 floats, 32 doubles) up to the streamed length
  (2048 bytes) take channel_sums, 64 channels per group, then the group's means; a channel whose sum is not finite
  goes back to the one-channel path. The cases put the lengths on both sides of each threshold and non-finite
  channels in the first, a middle and the last (partial) group.
- float16 and bfloat16 maxima of 1x1 planes: each channel's one element copied, a NaN converted as the scan of longer
  channels converts it. The inputs hold every kind of bits: zeros of both signs, infinities, subnormals, quiet and
  signalling NaNs of both signs.
- Maxima of long float and double channels: on the portable path two vectors per running maximum and step (a NaN in
  either one must still be found); the NaN and the maximum are put at each position of such a step and in the tail.
- bfloat16 sums of long channels load the bits widened in registers (a widening instruction on avx2 and avx512,
  interleaving with zeros on 16-byte vectors): the inputs take values of every exponent and sign, and vectors
  without a NaN or infinity anywhere but in the channels meant for them.

Each output is checked against the float64 reference of tests/reference.py, with the library's kernel proven to run
(run_op), on every ISA this CPU runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import onnx_pools
import reference as R
from helpers import each_isa, rerun_on_isa, run_op

__all__ = ["check_all", "check_half_maxima", "check_long_maxima", "check_short_means", "check_wide_bfloat16"]

# (dtype, channel lengths): 2 kLanes (64 floats, 32 doubles) and around it, up to the streamed length (512 floats,
# 256 doubles) and past it
SHORT_MEAN_LENGTHS = {
    "float32": [49, 63, 64, 65, 81, 96, 127, 128, 129, 169, 196, 289, 511, 512],
    "float64": [31, 32, 33, 47, 48, 49, 63, 64, 65, 81, 128, 169, 255, 256],
}
SHORT_MEAN_CHANNELS = [1, 63, 64, 65, 200]  # groups of 64: partial, whole, one over, several and a partial last
HUGE = {"float32": 3e38, "float64": 1e308, "float16": 6e4, "bfloat16": 3e38}


def short_means_input(dtype: str, c: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Channel j's own mean (j % 19 - 9) / 4 plus normal noise, so that a mean stored for the wrong channel cannot
    pass; channel 1 a NaN, 2 an infinity, 66 huge values whose float (or double) lanes overflow, c - 1 a NaN last;
    channel 3 zeros of both signs and negative values."""
    x = (np.arange(c) % 19 - 9)[None, :, None] / 4.0 + rng.standard_normal((1, c, n)) / 8.0
    if c > 3:
        x[0, 1, n // 2] = np.nan
        x[0, 2, 0] = -np.inf
        x[0, 3] = rng.choice([0.0, -0.0, -1.0], n)
    if c > 66:
        x[0, 66] = HUGE[dtype] * np.sign(x[0, 66] + 0.5)
    if c > 1:
        x[0, c - 1, n - 1] = np.nan
    with np.errstate(over="ignore"):
        return R.to_dtype(x, dtype)


def check_short_means() -> int:
    rng = np.random.default_rng(61)
    checked = 0
    for dtype, lengths in SHORT_MEAN_LENGTHS.items():
        for n in lengths:
            for c in SHORT_MEAN_CHANNELS:
                x = short_means_input(dtype, c, n, rng)
                y, _ = run_op("GlobalAveragePool", 22, dtype, x)
                what = f"GlobalAveragePool {dtype} {x.shape} on {onnx_pools.active_isa()}"
                R.assert_close(y, R.global_pool("GlobalAveragePool", x), dtype, scale=R.input_scale(x), what=what)
                checked += 1
    return checked


def half_bits(dtype: str, rng: np.random.Generator, c: int) -> np.ndarray:
    """c 16-bit floats of dtype (shape (1, c, 1, 1)): random bits (every class of value) with the special ones
    spelled out first."""
    # zero, infinity, the smallest and largest subnormals, the largest finite value, a quiet and a signalling NaN
    if dtype == "float16":
        magnitudes = [0x0000, 0x7C00, 0x0001, 0x03FF, 0x7BFF, 0x7E00, 0x7C01]
    else:
        magnitudes = [0x0000, 0x7F80, 0x0001, 0x007F, 0x7F7F, 0x7FC0, 0x7F81]
    special = [m | sign for m in magnitudes for sign in (0, 0x8000)]
    bits = rng.integers(0, 1 << 16, c).astype(np.uint16)
    bits[: len(special)] = special[:c]
    return bits.view(R.DTYPES[dtype]).reshape(1, c, 1, 1)


def check_half_maxima() -> int:
    """1x1 maxima of 16-bit floats: each output is its input, bit for bit, but for a NaN, which stays a NaN."""
    rng = np.random.default_rng(67)
    checked = 0
    for dtype in ("float16", "bfloat16"):
        for c in (1, 13, 1000, 1024):
            x = half_bits(dtype, rng, c)
            y, _ = run_op("GlobalMaxPool", 22, dtype, x)
            what = f"GlobalMaxPool {dtype} {x.shape} on {onnx_pools.active_isa()}"
            with np.errstate(invalid="ignore"):  # numpy's casts of the signalling NaNs
                R.assert_close(y, R.global_pool("GlobalMaxPool", x), dtype, what=what)
                nan = np.isnan(R.to_f64(x))
            assert np.array_equal(y.view(np.uint16)[~nan], x.view(np.uint16)[~nan]), what
            checked += 1
    return checked


# float and double channels of 2048 bytes and more: the NaN or the maximum at each position of the first paired step
# (2 vectors of 2 running maxima, up to 16 lanes wide), in the last paired step, in the unpaired step after it and
# in the overlapping last vector
LONG_MAX_LENGTHS = {"float32": [512, 515, 560, 1024, 1031], "float64": [256, 259, 264, 280, 1024, 1027]}


def check_long_maxima() -> int:
    rng = np.random.default_rng(71)
    checked = 0
    for dtype, lengths in LONG_MAX_LENGTHS.items():
        for n in lengths:
            positions = sorted({*range(0, 64), *range(n - 40, n)})
            c = len(positions)
            for special in (np.nan, 5.0):
                x = rng.standard_normal((1, c, n))
                for j, at in enumerate(positions):
                    x[0, j, at] = special
                x[0, 0] = np.abs(x[0, 0])  # one channel with nothing below zero, one with nothing above
                x[0, 1] = -np.abs(x[0, 1])
                x = R.to_dtype(x, dtype)
                y, _ = run_op("GlobalMaxPool", 22, dtype, x)
                what = f"GlobalMaxPool {dtype} {x.shape} {special} on {onnx_pools.active_isa()}"
                R.assert_close(y, R.global_pool("GlobalMaxPool", x), dtype, what=what)
                checked += 1
    return checked


WIDE_OPS: list[tuple[str, dict[str, Any]]] = [
    ("GlobalAveragePool", {}),
    ("GlobalLpPool", {"p": 1}),
    ("GlobalLpPool", {"p": 2}),
    ("GlobalLpPool", {"p": 3}),
]


def check_wide_bfloat16() -> int:
    """bfloat16 channels of 1024 elements and more, each of one binade (2^-20 to 2^20) with both signs, so that a
    wrong bit of any kind of value shows in its sum; channel 0 of every binade at once."""
    rng = np.random.default_rng(73)
    checked = 0
    for n in (1024, 1057, 4096):
        c = 11
        x = rng.uniform(1.0, 2.0, (1, c, n)) * rng.choice([-1.0, 1.0], (1, c, n))
        x *= (2.0 ** (4 * np.arange(c) - 20))[None, :, None]
        x[0, 0] *= 2.0 ** rng.integers(-20, 20, n)
        x = R.to_dtype(x, "bfloat16")
        for op, attrs in WIDE_OPS:
            y, _ = run_op(op, 22, "bfloat16", x, attrs)
            what = f"{op} {attrs} bfloat16 {x.shape} on {onnx_pools.active_isa()}"
            ref = R.global_pool(op, x, attrs.get("p", 2))
            scale = R.input_scale(x) if op == "GlobalAveragePool" else 0.0
            R.assert_close(y, ref, "bfloat16", scale=scale, what=what)
            checked += 1
    return checked


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    return check_short_means() + check_half_maxima() + check_long_maxima() + check_wide_bfloat16()


EXPECTED = (
    sum(len(v) for v in SHORT_MEAN_LENGTHS.values()) * len(SHORT_MEAN_CHANNELS)
    + 2 * 4
    + 2 * sum(len(v) for v in LONG_MAX_LENGTHS.values())
    + 3 * len(WIDE_OPS)
)


def test_heads() -> None:
    assert check_all() == EXPECTED


@each_isa
def test_heads_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_global_heads") == str(EXPECTED)
