"""QLinearAveragePool with x_scale == y_scale: a window of c elements whose values less x_zero_point add up to D has
the exact value y_zero_point + D / c, on a rounding tie exactly when D = c / 2 (mod c) (even c: D = 2 mod 4, 3 mod 6),
else at least 1 / (2 c) from one. The float pass every path runs first (RequantiseLanes::requantised: D x float(1 / c)
+ y_zero_point in float32, clamped, rounded half to even, marked where within kMarkBand of a tie) must mark exactly the
tied values and round every other one as the exact value, y_zero_point + floor((2 D + c) / (2 c)) clamped: what
Requantiser::marks_are_ties and the 3x3 rows' Ties kinds rely on. Checked exhaustively for every count a 3x3 window
holds (1 to 9), every D its elements can add up to for any x_zero_point, every y_zero_point and both types; the float
pass mirrored in numpy float32 (the library is built without fused multiply-adds, so each operation rounds alone)."""

from __future__ import annotations

import numpy as np
import pytest

from reference_qlinear import QRANGE

MARK_BAND = np.float32(0.5) - np.float32(2e-4)  # requantise.h's kMarkBand, computed as the C++ constant is


def float_pass(d: np.ndarray, count: int, y_zero_point: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """RequantiseLanes::requantised in float32 for equal scales (scale float(1.0 / count), as Requantiser::
    window_scale gives it): (the rounded value, whether it is marked)."""
    scale = np.float32(1.0 / count)
    value = d.astype(np.float32) * scale + y_zero_point.astype(np.float32)
    value = np.minimum(np.maximum(value, np.float32(lo)), np.float32(hi))
    whole = np.rint(value)
    return whole.astype(np.int64), np.abs(value - whole) > MARK_BAND


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("count", range(1, 10))
def test_float_pass_marks_exactly_the_ties(dtype, count):
    lo, hi = QRANGE[np.dtype(dtype)]
    # any x_zero_point: each element less it lies in [lo - hi, hi - lo]
    d = np.arange(count * (lo - hi), count * (hi - lo) + 1, dtype=np.int64)[:, None]
    y_zero_point = np.arange(lo, hi + 1, dtype=np.int64)[None, :]
    whole, marked = float_pass(d, count, y_zero_point, lo, hi)
    twice = 2 * y_zero_point * count + 2 * d  # 2 c x the exact value: strictly inside the range and odd / c on a tie
    tie = (2 * d % (2 * count) == count) & (twice > 2 * count * lo) & (twice < 2 * count * hi)
    exact = np.clip(y_zero_point + (2 * d + count) // (2 * count), lo, hi)
    np.testing.assert_array_equal(marked, tie)
    np.testing.assert_array_equal(whole[~tie], np.broadcast_to(exact, whole.shape)[~tie])
    assert tie.any() == (count % 2 == 0)
