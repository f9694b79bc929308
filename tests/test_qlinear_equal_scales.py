"""QLinearAveragePool with x_scale == y_scale (TFLite-style quantized average pools): every window whose element
count is even can land exactly on a rounding tie, and the library then takes ORT's own float value (the float pass
marks exactly the tied values: Requantiser::marks_are_ties, Rows3x3Pool's edge_columns). Pinned for the paths
that shortcut on it: NHWC images streamed and NCHW planes pooled whole (Requantiser::settled), and kernels up
to 11x11 (121 elements, int16 sums), with equal and distinct zero points: identical to stock ORT everywhere, and to
the float64 reference away from ties.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import check_qlinear_against_reference_and_stock
from reference_qlinear import QRANGE

# (layout, N x C x H x W, kernel, pads): 3x3 edges, 5x5 and 11x11 windows cut by the pads (counts up to 121)
CASES = [
    ("NHWC", (2, 19, 13, 24), [3, 3], [1, 1, 1, 1]),
    ("NHWC", (1, 8, 17, 21), [5, 5], [2, 2, 2, 2]),
    ("NCHW", (2, 3, 17, 21), [5, 5], [2, 2, 2, 2]),
    ("NCHW", (1, 2, 23, 29), [11, 11], [5, 5, 5, 5]),
    ("NHWC", (1, 16, 23, 29), [11, 11], [5, 5, 5, 5]),
]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("layout,shape,kernel,pads", CASES)
def test_equal_scales_match_stock_ort(dtype, layout, shape, kernel, pads):
    rng = np.random.default_rng(sum(shape) + kernel[0] + (dtype == np.int8))
    lo, hi = QRANGE[np.dtype(dtype)]
    x = rng.integers(lo, hi + 1, shape).astype(dtype)
    for xz, yz in (((lo + hi + 1) // 2,) * 2, (int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1)))):
        for cip in (0, 1):
            attrs = {"kernel_shape": kernel, "pads": pads, "count_include_pad": cip}
            xin = x
            if layout == "NHWC":
                attrs["channels_last"] = 1
                xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
            what = f"{layout} {x.dtype} x{list(shape)} k{kernel} zero points {xz}/{yz} cip={cip}"
            check_qlinear_against_reference_and_stock(xin, 0.05, xz, 0.05, yz, attrs, what)
