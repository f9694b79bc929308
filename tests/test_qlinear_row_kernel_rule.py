"""Which QLinearAveragePool 3x3 stride-1 pads-1 inputs each ISA path pools with the row kernel (rows3x3.h), read from
its counter (qlinear_row_kernel_units), every output checked against the float64 reference and stock ORT. The rule:
a plane needs a step of four vectors in a row (32 columns with 8 int32 lanes, AVX2 and AVX-512; 16 with 4, SSE2 and
NEON) and an image two vectors of values; with SSE2's 4 lanes an image takes the row kernel only where its middle
windows take a ShortRule (their float pass is slower there than the streamed passes') or where a quarter or more of
them are marked near a tie (settled a vector at a time), while NEON takes it always."""

from __future__ import annotations

import platform

import numpy as np

import onnx_pools
from helpers import check_qlinear_against_reference_and_stock, each_isa, rerun_on_isa

__all__ = ["row_kernel_taken"]

# (name, shape, channels_last, x_scale, x_zero_point, y_scale, y_zero_point): a plane of 16 columns; of 40; an image
# with equal scales (9-element windows by a ShortRule); an image whose scale ratio (4.5) puts every other 9-element
# window near a tie (the float pass marks them, no ShortRule); one whose ratio (1.5) marks a sixth of them
PROBES = [
    ("plane w16", (1, 2, 5, 16), 0, 0.05, 120, 0.031, 130),
    ("plane w40", (1, 2, 5, 40), 0, 0.05, 120, 0.031, 130),
    ("image equal scales", (1, 4, 8, 8), 1, 0.05, 128, 0.05, 128),
    ("image half marked", (1, 4, 8, 8), 1, 0.09, 120, 0.02, 131),
    ("image sixth marked", (1, 4, 8, 8), 1, 0.03, 120, 0.02, 131),
]


def row_kernel_taken() -> str:
    """Per probe, '1' where the row kernel pooled it on this process's path, else '0' (outputs checked either way)."""
    rng = np.random.default_rng(20261128)
    taken = ""
    for name, shape, channels_last, xs, xz, ys, yz in PROBES:
        x = rng.integers(0, 256, shape).astype(np.uint8)
        attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": channels_last}
        before = onnx_pools.qlinear_row_kernel_units()
        check_qlinear_against_reference_and_stock(x, xs, xz, ys, yz, attrs, f"{name} x{list(shape)}")
        units = onnx_pools.qlinear_row_kernel_units() - before
        assert units in (0, shape[0] * (1 if channels_last else shape[1])), f"{name}: {units} units"
        taken += "1" if units else "0"
    return taken


def expected(isa: str) -> str:
    """The rule above for the path `isa` of this machine."""
    if platform.machine() in ("aarch64", "arm64"):
        return "11111"  # 4 lanes and NEON on both paths
    return "01111" if isa in ("avx2", "avx512") else "11110"


def test_row_kernel_rule_of_this_path():
    assert row_kernel_taken() == expected(onnx_pools.active_isa())


@each_isa
def test_row_kernel_rule_on_each_isa(isa):
    """The same probes with each other path forced."""
    assert rerun_on_isa(isa, "test_qlinear_row_kernel_rule", "row_kernel_taken") == expected(isa)
