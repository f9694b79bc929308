"""Global pools over long channels (the streamed path of csrc/kernels/global/global_pools.h), on every ISA path.

Channels from kStreamMinBytes (2048 bytes) on take streamed_channels: float and double channels one at a time, in
blocks of kBlock (1024) elements, each block's partial sums in kLanes lanes and its tail loaded zero-padded; on
avx512 the float and double means load 32-byte vectors (NarrowLoader); maxima keep one NaN mask per running
maximum. 16-bit floats stream several channels side by side. The lengths below put block ends and tails on both
sides of each boundary (a whole block, one element more or less, a tail shorter than a vector), and the channels
whose sums leave the fast paths (NaN, infinity, float lanes overflowing, subnormal values) lie among plain ones.
Each case is checked against the float64 references of tests/reference.py, with the library's kernel proven to
run, on every ISA this CPU runs. Without F16C (the portable path) float16 means are summed as converted in a scaled
domain that needs subnormals kept: with ORT's denormals-as-zero option they must take the block conversion instead.
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

__all__ = ["cases", "check_all", "check_flushed_subnormals"]

# elements per channel: 2048 bytes of the type and up, around 1024-element blocks and 32-lane (float) steps
LENGTHS = {
    "float32": [512, 513, 1000, 1023, 1024, 1025, 1056, 1057, 2047, 2080, 3136, 4113],
    "float64": [256, 257, 1000, 1024, 1025, 1041, 3136],
    "float16": [1022, 1024, 1025, 1057, 1148, 3136, 4113],
    "bfloat16": [1022, 1024, 1025, 1057, 1148, 3136, 4113],
}
OPS: list[tuple[str, int, dict[str, Any]]] = [
    ("GlobalAveragePool", 22, {}),
    ("GlobalMaxPool", 22, {}),
    ("GlobalLpPool", 22, {"p": 2}),
    ("GlobalLpPool", 22, {"p": 3}),
]
HUGE = {"float32": 3e38, "float64": 1e308, "float16": 6e4, "bfloat16": 3e38}
CHANNELS = 9


def make_input(dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """(1, CHANNELS, n) normal values, with channel 1 holding a NaN, 2 an infinity, 3 huge values (float lanes
    overflow), 4 only zeros of both signs and negative values, 5 subnormal values, 6 values of a large mean (the
    order of the additions shows), channel 7 a NaN in its last element."""
    x = rng.standard_normal((1, CHANNELS, n))
    c = x[0]
    c[1, n // 2] = np.nan
    c[2, n - 3] = np.inf
    c[3] = HUGE[dtype] * np.sign(c[3] + 0.5)
    c[4] = rng.choice([0.0, -0.0, -1.0], n)
    c[5] *= 2.0**-20
    c[6] += 1000.0
    c[7, n - 1] = np.nan
    with np.errstate(over="ignore"):
        return R.to_dtype(x, dtype)


def cases() -> list[tuple[str, int, dict[str, Any], str, int]]:
    return [
        (op, opset, attrs, dtype, n) for op, opset, attrs in OPS for dtype, lengths in LENGTHS.items() for n in lengths
    ]


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(31)
    checked = 0
    for op, opset, attrs, dtype, n in cases():
        x = make_input(dtype, n, rng)
        y, _ = run_op(op, opset, dtype, x, attrs)
        expected = R.global_pool(op, x, attrs.get("p", 2))
        # each channel at its own scale (the huge one would hide the others' errors); outputs that round to a
        # subnormal (channel 5's means in float16) to within one step of it
        for c in range(CHANNELS):
            what = f"{op} {attrs} {dtype} (1, {CHANNELS}, {n}) channel {c} on {onnx_pools.active_isa()}"
            part = np.s_[:, c : c + 1]
            assert_close_with_subnormals(y[part], expected[part], dtype, x[part], what)
        checked += 1
    return checked


def test_long_channels() -> None:
    assert check_all() == len(cases())


@each_isa
def test_long_channels_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_long_channels") == str(len(cases()))


def check_flushed_subnormals() -> str:
    """float16 means of long channels of subnormal and normal values with ORT's denormals-as-zero option
    (check_float16_mean_flushed; in a process of its own)."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.0, (1, 6, 3136)) * 4e-5
    x[0, 3:] *= 1e4  # normal values in the last channels
    return check_float16_mean_flushed(R.to_dtype(x, "float16"), "flushed, long")


@each_isa
def test_float16_means_with_subnormals_flushed(isa: str) -> None:
    run_flushed_check("test_long_channels", isa)
