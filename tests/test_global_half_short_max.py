"""GlobalMaxPool over float16 and bfloat16 channels of 2 to 7 elements (planes such as 2x2, 1x7, 2x3), on every ISA
path.

Channels shorter than max_halves' narrowest vector (8 halves; csrc/kernels/global/global_pools.h) are pooled as
their order-preserving integer keys (halves_to_keys) held exactly in floats, by the float kernel's blocks of channels
side by side, a block of kBlock = 1024 keys at a time; a block in which a NaN's bits came by has its NaN channels
scanned again by max_halves. The cases take every length from 2 to 7, channel counts that leave channels outside a
block of keys and outside the float kernel's blocks of channels, and channels with a NaN (first, last, signalling,
negative), only -inf, zeros of both signs among negative values, infinities and subnormals. Each output is checked
against the float64 maximum of tests/reference.py (NaN where the channel has one), a zero's sign against IEEE 754's
maximum (+0 above -0), with the library's kernel proven to run (run_op), on every ISA this CPU runs.
"""

from __future__ import annotations

import numpy as np

import onnx_pools
import reference as R
from helpers import each_isa, rerun_on_isa, run_op

__all__ = ["cases", "check_all"]

LENGTHS = [2, 3, 4, 5, 6, 7]
# channels: within one block of float lanes, several blocks with some left over, and past a block of 1024 keys
CHANNELS = [1, 3, 17, 37, 300, 1030]
DTYPES = ["float16", "bfloat16"]
NAN_BITS = {"float16": [0x7E00, 0x7C01, 0xFE00], "bfloat16": [0x7FC0, 0x7F81, 0xFFC0]}  # quiet, signalling, negative
SUBNORMAL = {"float16": 2.0**-20, "bfloat16": 1e-40}


def cases() -> list[tuple[str, tuple[int, ...]]]:
    return [(dtype, (1, c, n)) for dtype in DTYPES for c in CHANNELS for n in LENGTHS]


def make_input(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Normal values (channel j's offset j % 13 - 6, so a maximum stored for the wrong channel fails); then per
    channel index modulo 23: 1 a NaN last, 2 only -inf, 3 zeros of both signs and negative values, 4 only -0,
    5 +inf, 6 subnormal values of both signs, 7 a signalling NaN first, 8 a negative NaN in the middle."""
    c, n = shape[1], shape[2]
    x64 = (np.arange(c) % 13 - 6)[None, :, None] + rng.standard_normal(shape)
    kind = np.arange(c) % 23
    x64[0, kind == 2] = -np.inf
    x64[0, kind == 3] = rng.choice([0.0, -0.0, -1.0], (int(np.sum(kind == 3)), n))
    x64[0, kind == 4] = -0.0
    x64[0, kind == 5, 0] = np.inf
    x64[0, kind == 6] = SUBNORMAL[dtype] * rng.choice([-3.0, -1.0, 1.0, 2.0], (int(np.sum(kind == 6)), n))
    x = R.to_dtype(x64, dtype)
    bits = x.view(np.uint16)
    nan_quiet, nan_signalling, nan_negative = NAN_BITS[dtype]
    bits[0, kind == 1, n - 1] = nan_quiet
    bits[0, kind == 7, 0] = nan_signalling
    bits[0, kind == 8, n // 2] = nan_negative
    return x


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(61)
    checked = 0
    for dtype, shape in cases():
        x = make_input(dtype, shape, rng)
        y, _ = run_op("GlobalMaxPool", 22, dtype, x)
        what = f"GlobalMaxPool {dtype} {shape} on {onnx_pools.active_isa()}"
        with np.errstate(invalid="ignore"):  # signalling NaNs converted to float64
            x64 = R.to_f64(x)
            ref = R.global_pool("GlobalMaxPool", x)
            R.assert_close(y, ref, dtype, scale=R.input_scale(x), what=what)
            got_negative = np.signbit(R.to_f64(y))
        # IEEE 754's maximum: +0 above -0, so a zero maximum is -0 only where the channel has no +0
        has_positive_zero = np.any((x64 == 0) & ~np.signbit(x64), axis=2, keepdims=True)
        zero = ref == 0
        assert np.array_equal(got_negative[zero], ~has_positive_zero[zero]), f"{what}: sign of a zero maximum"
        checked += 1
    return checked


def test_half_short_max() -> None:
    assert check_all() == len(cases())


@each_isa
def test_half_short_max_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_global_half_short_max") == str(len(cases()))
