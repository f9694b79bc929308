"""GlobalMaxPool over short channels (up to 512 bytes), on every ISA path.

Channels of up to 512 bytes of float32 or float64 take max_channel_block (csrc/kernels/global/global_pools.h): as
many channels as a vector has lanes, each in one vector (the narrowest of 16, 32 or the native width that holds a
channel: on avx512 16 bytes for up to 4 floats or 2 doubles, 32 bytes up to 8 floats or 4 doubles; on avx2 16 bytes)
or in running maxima over its vectors, then their maxima in one transposed fold; channels left after the last block
take max_short_vectors or max_streams. The cases give lengths on both sides of each width, channel counts that leave
channels outside the last block, and channels with a NaN, only -inf, or zeros of both signs among negative values.
Each output is checked against the float64 reference of tests/reference.py, with the library's kernel proven to run,
on every ISA this CPU runs.
"""

from __future__ import annotations

import numpy as np

import onnx_pools
import reference as R
from helpers import each_isa, rerun_on_isa, run_op

__all__ = ["cases", "check_all"]

# up to 15: one vector; then channels of several vectors up to 512 bytes (max_channel_block), each side of every
# multiple of the vector widths (4, 8, 16 floats; 2, 4, 8 doubles) and of four of them (its K = 4 running maxima)
LENGTHS = list(range(2, 18)) + [23, 31, 32, 33, 47, 49, 63, 64, 65, 81, 96, 127, 128]
# whole blocks of transposed_maxima (2 to 16 channels, by type and ISA) and channels left over after them
CHANNELS = [4, 9, 16, 34, 37]
DTYPES = ["float32", "float64"]


def cases() -> list[tuple[str, tuple[int, ...]]]:
    return [(dtype, (1, c, n)) for dtype in DTYPES for c in CHANNELS for n in LENGTHS]


def make_input(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Normal values; channel 1: a NaN in its last element; channel 2: only -inf; channel 3: zeros of both signs
    and negative values; channel 5 (if any): +inf first; channels 17 and 20 (if any): a NaN in the middle, a NaN
    first among zeros of both signs."""
    x = rng.standard_normal(shape)
    n = shape[2]
    x[0, 1, n - 1] = np.nan
    x[0, 2] = -np.inf
    x[0, 3] = rng.choice([0.0, -0.0, -1.0], n)
    if shape[1] > 5:
        x[0, 5, 0] = np.inf
    if shape[1] > 20:  # NaNs in a later block: in the middle, and first of a channel with zeros of both signs
        x[0, 17, n // 2] = np.nan
        x[0, 20] = rng.choice([0.0, -0.0, -1.0], n)
        x[0, 20, 0] = np.nan
    return R.to_dtype(x, dtype)


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(47)
    checked = 0
    for dtype, shape in cases():
        x = make_input(dtype, shape, rng)
        y, _ = run_op("GlobalMaxPool", 22, dtype, x)
        what = f"GlobalMaxPool {dtype} {shape} on {onnx_pools.active_isa()}"
        R.assert_close(y, R.global_pool("GlobalMaxPool", x), dtype, scale=R.input_scale(x), what=what)
        checked += 1
    return checked


def test_short_max() -> None:
    assert check_all() == len(cases())


@each_isa
def test_short_max_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_global_short_max") == str(len(cases()))
