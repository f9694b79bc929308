"""GlobalMaxPool over long float32 and float64 channels (streamed: 2048 bytes and more), on every ISA path.

Long channels take max_streams (csrc/kernels/global/global_pools.h); on SSE2 its steps go four at a time through
max_pairs_unrolled, which detects a NaN or an infinity by a product of +0 and the elements, and a channel it flags is
scanned again vector by vector. The lengths give channels that end inside the unrolled steps, after one more paired
step and with a tail of single vectors (the last overlapping); the channels hold a NaN in the first vector, in the
last element and after an infinity, two NaNs (the first in memory order is the result, bit for bit), +inf without a
NaN, -inf among normal values, only -inf, zeros of both signs among negative values and the maximum in the first or the
last element. Each output is checked exactly against the float64 reference of tests/reference.py (a maximum is exact),
with the library's kernel proven to run, on every ISA this CPU runs.
"""

from __future__ import annotations

import numpy as np

import onnx_pools
import reference as R
from helpers import each_isa, rerun_on_isa, run_op

__all__ = ["cases", "check_all", "make_input"]

# from the shortest streamed channel (2048 bytes) on; multiples of the unrolled step (64 floats, 32 doubles) and not
LENGTHS = {"float32": [512, 575, 4096, 4096 + 16 + 4 + 3], "float64": [256, 287, 2048, 2048 + 8 + 2 + 1]}
CHANNELS = 12
FIRST_NAN_BITS = {"float32": np.uint32(0x7FC01234), "float64": np.uint64(0x7FF8000000001234)}
SECOND_NAN_BITS = {"float32": np.uint32(0xFFC05678), "float64": np.uint64(0xFFF8000000005678)}


def cases() -> list[tuple[str, int]]:
    return [(dtype, n) for dtype, lengths in LENGTHS.items() for n in lengths]


def make_input(dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Normal values of (1, CHANNELS, n), the channels' special cases as the module's docstring lists them."""
    x = R.to_dtype(rng.standard_normal((1, CHANNELS, n)), dtype)
    bits = x.view(np.uint32 if dtype == "float32" else np.uint64)
    x[0, 1, 1] = np.nan
    x[0, 2, n - 1] = np.nan
    x[0, 3, n // 3] = np.inf
    x[0, 3, n // 2] = np.nan
    bits[0, 4, n // 2] = FIRST_NAN_BITS[dtype]
    bits[0, 4, n - 2] = SECOND_NAN_BITS[dtype]
    x[0, 4, 3] = np.inf
    x[0, 5, n // 5] = np.inf
    x[0, 6, :: max(1, n // 7)] = -np.inf
    x[0, 7] = -np.inf
    x[0, 8] = rng.choice([0.0, -0.0, -1.0, -2.5], n)
    x[0, 9, 0] = 100.0
    x[0, 10, n - 1] = 100.0
    x[0, 11] = -np.abs(x[0, 11])
    return x


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(53)
    checked = 0
    for dtype, n in cases():
        x = make_input(dtype, n, rng)
        y, _ = run_op("GlobalMaxPool", 22, dtype, x)
        what = f"GlobalMaxPool {dtype} (1, {CHANNELS}, {n}) on {onnx_pools.active_isa()}"
        ref = R.global_pool("GlobalMaxPool", x)
        assert y.dtype == x.dtype and y.shape == ref.shape, what
        np.testing.assert_array_equal(y.astype(np.float64), ref, err_msg=what)  # NaN where the reference's
        y_bits = y.view(np.uint32 if dtype == "float32" else np.uint64)
        assert y_bits[0, 4, 0] == FIRST_NAN_BITS[dtype], f"{what}: the first NaN's bits, got {y_bits[0, 4, 0]:#x}"
        assert y[0, 5, 0] == np.inf and y[0, 7, 0] == -np.inf and y[0, 8, 0] == 0.0, what
        checked += 1
    return checked


def test_long_max() -> None:
    assert check_all() == len(cases())


@each_isa
def test_long_max_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_global_long_max") == str(len(cases()))
