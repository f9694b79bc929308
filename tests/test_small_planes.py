"""Global pools over many short channels (CNN heads: planes of 1x1 to 17x17), on every ISA path.

Short channels take loops of their own in csrc/kernels/global/global_pools.h: channels below the streamed size summed
one block each (short_sum below 2 kLanes elements) with the mean or the Lp probe, rest and root per channel; maxima
below the streamed size a group of channels side by side (max_short_vectors below a vector, max_streams up to
kShortMaxGroupBytes; a NaN in the group sends each channel back to max_block), 1-element channels copied; float16 /
bfloat16 channels below a streamed float channel converted a block of channels at a time (convert_block) and pooled
as float; 16-bit maxima in vectors of N, N/2 or 8 lanes with an overlapping last one; the
tails of longer channels loaded as zero-padded vectors (masked loads on avx2 / avx512); float16 means on the portable
and avx2 paths summed as converted (scaled_half_means: groups of 256 channels, a group with an infinity or NaN
converted as a block instead, and on the portable path every group under ORT's denormals-as-zero option). The shapes
below put channels across several conversion blocks, the lengths on both sides of each threshold, and channels whose
sums leave the fast paths (NaN, infinity, overflow, subnormal float16) among plain ones. Each case is checked against
the float64 references of tests/reference.py, with the library's kernel proven to run, on every ISA this CPU runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import onnx_pools
import reference as R
from helpers import (
    assert_close_with_subnormals,
    check_float16_mean_flushed,
    each_isa,
    rerun_on_isa,
    run_flushed_check,
    run_op,
)

__all__ = ["cases", "check_all", "check_float16_means", "check_flushed_subnormals"]

PLANES = [1, 2, 3, 4, 5, 7, 8, 9, 10, 14, 17]  # H = W
LENGTHS = [31, 63, 64, 65, 100, 128, 129, 255, 256, 289, 511, 512, 513]  # 1-D channels around the thresholds
DTYPES = ["float32", "float64", "float16", "bfloat16"]
OPS: list[tuple[str, int, dict[str, Any]]] = [
    ("GlobalAveragePool", 22, {}),
    ("GlobalMaxPool", 22, {}),
    ("GlobalLpPool", 22, {"p": 1}),
    ("GlobalLpPool", 22, {"p": 2}),
    ("GlobalLpPool", 22, {"p": 3}),
    ("GlobalLpPool", 1, {"p": 1.5}),
]
HUGE = {"float32": 3e38, "float64": 1e308, "float16": 6e4, "bfloat16": 3e38}


def make_input(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Normal values, with channel 1 holding a NaN, 2 an infinity, 3 huge values (float lanes overflow), 4 only
    zeros of both signs and negative values, 5 subnormal values (float16: outside SSE2's fast conversion), 6 a NaN
    last (in the overlapping last vector of a maximum)."""
    x = rng.standard_normal(shape)
    flat = x.reshape(shape[0] * shape[1], -1)
    n = flat.shape[1]
    specials = {
        1: lambda c: c.__setitem__(n // 2, np.nan),
        2: lambda c: c.__setitem__(n - 1, np.inf),
        3: lambda c: c.__setitem__(slice(None), HUGE[dtype] * np.sign(c + 0.5)),
        4: lambda c: c.__setitem__(slice(None), rng.choice([0.0, -0.0, -1.0], n)),
        5: lambda c: c.__setitem__(slice(None), c * 2.0**-20),
        6: lambda c: c.__setitem__(n - 1, np.nan),
    }
    for channel, put in specials.items():
        if channel < flat.shape[0]:
            put(flat[channel])
    with np.errstate(over="ignore"):
        return R.to_dtype(x, dtype)


def cases() -> list[tuple[str, int, dict[str, Any], str, tuple[int, ...]]]:
    out = []
    for op, opset, attrs in OPS:
        for dtype in DTYPES:
            if opset == 1 and dtype == "bfloat16":
                continue  # version 1 of GlobalLpPool has no bfloat16
            for h in PLANES:
                out.append((op, opset, attrs, dtype, (2, 37, h, h)))  # 74 channels: several blocks of 1024
            for n in LENGTHS:
                out.append((op, opset, attrs, dtype, (1, 9, n)))
    return out


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(29)
    checked = 0
    for op, opset, attrs, dtype, shape in cases():
        x = make_input(dtype, shape, rng)
        y, _ = run_op(op, opset, dtype, x, attrs)
        what = f"{op} {attrs} {dtype} {shape} on {onnx_pools.active_isa()}"
        R.assert_close(y, R.global_pool(op, x, attrs.get("p", 2)), dtype, scale=R.input_scale(x), what=what)
        checked += 1
    return checked


def test_short_channels() -> None:
    assert check_all() == len(cases())


@each_isa
def test_short_channels_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_small_planes") == str(len(cases()))


# float16 means of short channels on the portable and avx2 paths: summed as converted, in groups of 256 channels
# (scaled_half_means), a group with an infinity or NaN left to the block conversion. Shapes over two groups,
# lengths around the thresholds of the sums (8 and 64 elements, the streamed length).
FLOAT16_MEAN_SHAPES = [(1, 300, 3, 3), (1, 300, 7, 7), (1, 300, 8, 8), (1, 300, 9, 9), (1, 300, 17, 17)]
FLOAT16_MEAN_SHAPES += [(1, 300, n) for n in (8, 15, 63, 65, 511)]
SUBNORMAL_CHANNEL = 3


def float16_means_input(shape: tuple[int, ...], rng: np.random.Generator, special: float | None) -> np.ndarray:
    """Normal values, with channel 3 subnormal (float16) only, channel 4 zeros of both signs and negative values, and
    `special` (an infinity or NaN), if given, in channel 280 (the second group)."""
    x = rng.standard_normal(shape)
    flat = x.reshape(shape[1], -1)
    flat[SUBNORMAL_CHANNEL] = rng.uniform(0.5, 1.0, flat.shape[1]) * 2.0**-16
    flat[4] = rng.choice([0.0, -0.0, -1.0], flat.shape[1])
    if special is not None:
        flat[280, flat.shape[1] // 3] = special
    return R.to_dtype(x, "float16")


def check_float16_means() -> int:
    """Every float16 mean case on this process's ISA; each output against the float64 reference, the subnormal
    channel against its own scale. Returns the number of cases."""
    rng = np.random.default_rng(31)
    checked = 0
    for shape in FLOAT16_MEAN_SHAPES:
        for special in (None, np.inf, np.nan):
            x = float16_means_input(shape, rng, special)
            y, _ = run_op("GlobalAveragePool", 22, "float16", x)
            ref = R.global_pool("GlobalAveragePool", x)
            what = f"GlobalAveragePool float16 {shape} special {special} on {onnx_pools.active_isa()}"
            R.assert_close(y, ref, "float16", scale=R.input_scale(x), what=what)
            tiny = slice(SUBNORMAL_CHANNEL, SUBNORMAL_CHANNEL + 1)
            assert_close_with_subnormals(
                y[:, tiny], ref[:, tiny], "float16", x[:, tiny], what=f"{what}, subnormal channel"
            )  # fmt: skip
            checked += 1
    return checked


def test_float16_means() -> None:
    assert check_float16_means() == 3 * len(FLOAT16_MEAN_SHAPES)


@each_isa
def test_float16_means_on_each_isa(isa: str) -> None:
    assert rerun_on_isa(isa, "test_small_planes", "check_float16_means") == str(3 * len(FLOAT16_MEAN_SHAPES))


def check_flushed_subnormals() -> str:
    """float16 means of subnormal values with ORT's denormals-as-zero option: the sums as converted keep subnormals
    only without that flag, so they must leave these channels to the block conversion (check_float16_mean_flushed;
    in a process of its own)."""
    x = R.to_dtype(np.random.default_rng(5).uniform(0.5, 1.0, (1, 20, 7, 7)) * 4e-5, "float16")
    return check_float16_mean_flushed(x, "flushed")


def test_float16_means_with_subnormals_flushed() -> None:
    """On the portable path, the only one that sums halves as converted (the others convert with F16C / NEON)."""
    run_flushed_check("test_small_planes", "portable")
