"""QLinearAveragePool's 3x3 rows path keeps its pool per thread while the parameters and the shape stay the same
(qlinear_pool: ORT calls the NCHW kernel once per chunk of a few planes). Pins that a pool is not reused for a call
that differs in any one of them: x_scale, y_scale, either zero point, count_include_pad, the rows, the columns, the
channels or the layout, each run after the base case and the base case run again after it, every output checked
against the float64 reference and stock ORT, with each ISA forced."""

from __future__ import annotations

import numpy as np

from helpers import check_qlinear_against_reference_and_stock, each_isa, rerun_on_isa

__all__ = ["check_all"]

# (dtype, shape, channels_last, x_scale, x_zero_point, y_scale, y_zero_point, count_include_pad): the base case, then
# each variant changes one thing (the NHWC variant: the same values per image as the base's planes)
BASE = (np.uint8, (1, 2, 5, 40), 0, 0.05, 120, 0.031, 130, 0)
VARIANTS = [
    {3: 0.04},
    {5: 0.02},
    {4: 121},
    {6: 131},
    {7: 1},
    {1: (1, 2, 6, 40)},
    {1: (1, 2, 5, 41)},
    {1: (1, 3, 5, 40)},
    {1: (1, 5, 40, 2), 2: 1},
    {0: np.int8, 4: -8, 6: 2},
]


def _check(case: tuple, rng: np.random.Generator) -> None:
    dtype, shape, channels_last, xs, xz, ys, yz, cip = case
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": cip, "channels_last": channels_last}
    what = f"{np.dtype(dtype)} x{list(shape)} channels_last={channels_last} scales {xs}/{ys} zps {xz}/{yz} cip={cip}"
    check_qlinear_against_reference_and_stock(x, xs, xz, ys, yz, attrs, what)


def check_all() -> int:
    """The base case, then each variant followed by the base case again. Returns the number of runs checked."""
    rng = np.random.default_rng(20261126)
    runs = [BASE]
    for change in VARIANTS:
        runs += [tuple(change.get(k, v) for k, v in enumerate(BASE)), BASE]
    for case in runs:
        _check(case, rng)
    return len(runs)


def test_pool_not_reused_across_parameters_or_shapes() -> None:
    assert check_all() == 1 + 2 * len(VARIANTS)


@each_isa
def test_pool_reuse_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_qlinear_rows3x3_reuse") == str(1 + 2 * len(VARIANTS))
