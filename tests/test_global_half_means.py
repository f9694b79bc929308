"""float16 GlobalAveragePool over short channels, on every ISA path.

On the portable and avx2 paths, channels of 8 to 63 float16 elements are summed as converted four at a time
(scaled_half_means in csrc/kernels/global/global_pools.h): a group's lanes transposed for the fold and the tail, the
last group padded with the last channel again, each mean divided in float. The cases below give every tail length
(n % 8), channel counts that leave 0 to 3 channels in the last group of four, counts over two groups of 256 channels
(the second ending in a partial group of four), and channels with distinct means, so that a mean stored for the wrong
channel cannot pass. Each output is checked against the float64 reference of tests/reference.py, with the library's
kernel proven to run, on every ISA this CPU runs.
"""

from __future__ import annotations

import numpy as np

import onnx_pools
import reference as R
from helpers import each_isa, rerun_on_isa, run_op

__all__ = ["cases", "check_all"]

LENGTHS = [*range(8, 17), 23, 31, 49, 63]  # every tail length, up to the last length of the four-channel loop
CHANNELS = [1, 2, 3, 4, 5, 259, 262]  # last group of four: 1, 2, 3, 0, 1 channels; 259, 262: two groups of 256


def cases() -> list[tuple[tuple[int, ...], float | None]]:
    """(shape, special value in the last channel or None)."""
    out: list[tuple[tuple[int, ...], float | None]] = []
    for c in CHANNELS:
        for n in LENGTHS:
            out.append(((1, c, n), None))
    # an infinity or NaN in the last channel, which also pads its group of four
    for special in (np.inf, -np.inf, np.nan):
        out += [((1, 5, 49), special), ((1, 259, 9), special)]
    return out


def make_input(shape: tuple[int, ...], special: float | None, rng: np.random.Generator) -> np.ndarray:
    """Channel c: its own mean ((c % 23 - 11) / 4) plus normal noise; channel 1 (if any) zeros of both signs and
    negative values; `special` in the last channel's last element."""
    c, n = shape[1], shape[2]
    x = (np.arange(c) % 23 - 11)[None, :, None] / 4.0 + rng.standard_normal(shape) / 8.0
    if c > 1:
        x[0, 1] = rng.choice([0.0, -0.0, -1.0], n)
    if special is not None:
        x[0, c - 1, n - 1] = special
    return R.to_dtype(x, "float16")


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(43)
    checked = 0
    for shape, special in cases():
        x = make_input(shape, special, rng)
        y, _ = run_op("GlobalAveragePool", 22, "float16", x)
        what = f"GlobalAveragePool float16 {shape} special {special} on {onnx_pools.active_isa()}"
        R.assert_close(y, R.global_pool("GlobalAveragePool", x), "float16", scale=R.input_scale(x), what=what)
        checked += 1
    return checked


def test_half_means() -> None:
    assert check_all() == len(cases())


@each_isa
def test_half_means_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_global_half_means") == str(len(cases()))
