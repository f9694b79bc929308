"""Windows of zeros (ReLU outputs) in LpPool and GlobalLpPool, on every path and ISA.

A window sum below the trusted minimum is recomputed exactly (scaled, in double), but not a sum of exactly +0 in a
plane whose every nonzero element's |x|^p is at least twice that minimum: such a sum comes only from zeros, and its
root, +0, is already the exact one (zero_sums_exact, csrc/kernels/common/lp_math.h). Zeros take neither the exact
recomputation nor a redo of the plane at a new scale.

The LpPool cases take the geometries of every plane path (tiles of 2x2 and 3x3, 3x3 pad 1 over the strips, the
fused and the flat rows, row stride 2, a 5x3 kernel, 1-D rows short and longer than a blocked row, 1x1, 3-D windows,
one-element planes) for p = 1, 2, 3, 4 and 1.5 and every float type. Per case, one run of clean planes: ReLU-like
values (half of them zeros: many all-zero windows), the upper half of a plane zero (the probe of its first values
all zeros), a plane of zeros and one of negative zeros; its outputs match the float64 reference and no window is
recomputed (lp_windows_recomputed). Then one run of the same zero-topped plane with one tiny value (its |x|^p below
the minimum: a zero sum can no longer tell zeros from underflowed terms) and one with a NaN: they match the reference,
and where the tiny value's power underflows the zero windows are recomputed (the count goes up).

GlobalLpPool: channels of zeros (the result +0 without the exact path), zeros with one NaN (NaN), zeros with a
tiny value, and ReLU-like channels, short and long, against the reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import onnx_pools
import reference as R
from helpers import assert_close_with_subnormals, each_isa, rerun_on_isa, run_op

__all__ = ["check_all", "check_global", "global_cases", "lp_cases"]

DTYPES = ["float32", "float64", "float16", "bfloat16"]
# (attributes, plane shape): the geometries of the plane paths
GEOMETRIES: list[tuple[dict[str, Any], tuple[int, ...]]] = [
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, (40, 40)),
    ({"kernel_shape": [3, 3], "strides": [3, 3]}, (30, 33)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (40, 40)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (12, 8)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 1]}, (20, 24)),
    ({"kernel_shape": [5, 3], "pads": [2, 1, 2, 1]}, (20, 20)),
    ({"kernel_shape": [2], "strides": [2]}, (300,)),
    ({"kernel_shape": [3], "pads": [1, 1]}, (20000,)),
    ({"kernel_shape": [1, 1]}, (20, 20)),
    ({"kernel_shape": [2, 2, 2]}, (6, 7, 8)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 1)),
]
# (opset, p): whole p from the later versions, float p from version 1
POWERS: list[tuple[int, float]] = [(18, 1), (18, 2), (18, 3), (18, 4), (1, 1.5)]
# the accumulator's trusted minimum of a window sum (csrc/kernels/common/lp_math.h, kSmallestTrustedSum)
MINIMUM = {"float32": 2.0**-80, "float64": 2.0**-900, "float16": 2.0**-80, "bfloat16": 2.0**-80}
# a value whose |x|^p underflows below the minimum for some p (float16: its smallest subnormal)
TINY = {"float32": 1e-30, "float64": 1e-280, "float16": 2.0**-24, "bfloat16": 1e-30}
# relative error allowed where the reference is tiny (float16: its subnormal TINY is exact)
RELATIVE = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 2e-2}
# planes of the clean run: ReLU-like, upper half zero, zeros, negative zeros
CLEAN_PLANES = 4


def lp_cases() -> list[tuple[dict[str, Any], tuple[int, ...], int, float, str]]:
    out = []
    for attrs, plane in GEOMETRIES:
        for opset, p in POWERS:
            for dtype in DTYPES:
                if opset == 1 and dtype == "bfloat16":
                    continue  # version 1 of LpPool has no bfloat16
                out.append((attrs, plane, 22 if dtype == "bfloat16" else opset, p, dtype))
    return out


def relu_like(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """max(0, 2 N(0, 1)): half the values zeros."""
    return np.maximum(rng.standard_normal(shape) * 2, 0.0)


def zero_topped(plane: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A ReLU-like plane whose first half (in memory order) is zeros."""
    x = relu_like(plane, rng).reshape(-1)
    x[: x.size // 2] = 0.0
    return x.reshape(plane)


def run_planes(x: np.ndarray, opset: int, p: float, dtype: str, attrs: dict[str, Any]) -> tuple[int, str]:
    """Runs LpPool over x's planes and checks each against the float64 reference at its own scale. Returns (the
    windows recomputed during the run, the case's description)."""
    attrs = dict(attrs, p=p)
    xd = R.to_dtype(x, dtype)
    before = onnx_pools.lp_windows_recomputed()
    y, _ = run_op("LpPool", opset, dtype, xd, attrs)
    recomputed = onnx_pools.lp_windows_recomputed() - before
    ref = R.lp_pool(xd, attrs["kernel_shape"], attrs.get("strides"), attrs.get("pads"), p=p)
    what = f"LpPool-{opset} {attrs} {dtype} {x.shape} on {onnx_pools.active_isa()}"
    assert y.shape == ref.shape, what
    for c in range(x.shape[1]):
        assert_close_with_subnormals(y[0, c], ref[0, c], dtype, xd[0, c], f"{what} plane {c}")
    return recomputed, what


def check_all() -> int:
    """Every LpPool case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of
    cases."""
    rng = np.random.default_rng(53)
    checked = 0
    for attrs, plane, opset, p, dtype in lp_cases():
        clean = np.stack([relu_like(plane, rng), zero_topped(plane, rng), np.zeros(plane), np.full(plane, -0.0)])
        recomputed, what = run_planes(clean[None], opset, p, dtype, attrs)
        assert recomputed == 0, f"{what}: {recomputed} windows of zeros and normal values recomputed exactly"

        # a tiny value, then a NaN, among the zeros of zero-topped planes: the windows that hold it hold zeros else
        tiny = zero_topped(plane, rng).reshape(-1)
        tiny[tiny.size // 4] = TINY[dtype]
        with_nan = zero_topped(plane, rng).reshape(-1)
        with_nan[with_nan.size // 4] = np.nan
        special = np.stack([tiny.reshape(plane), with_nan.reshape(plane)])[None]
        recomputed, what = run_planes(special, opset, p, dtype, attrs)
        # the tiny windows to their own scale (the plane's scale, above, cannot see them): not zeros
        y, _ = run_op("LpPool", opset, dtype, R.to_dtype(special, dtype), dict(attrs, p=p))
        ref = R.lp_pool(R.to_dtype(special, dtype), attrs["kernel_shape"], attrs.get("strides"), attrs.get("pads"), p=p)
        got, want = R.to_f64(y)[0, 0], ref[0, 0]
        small = (want > 0) & (want <= 2 * TINY[dtype])
        assert small.any(), what
        assert np.all(np.abs(got[small] - want[small]) <= RELATIVE[dtype] * want[small]), (
            f"{what}: windows of a tiny value and zeros give {got[small][:4]}, expected {want[small][:4]}"
        )
        underflows = float(TINY[dtype]) ** p < MINIMUM[dtype]
        if underflows and plane != (1, 1):  # (a one-element plane is scaled to its element instead)
            assert recomputed > 0, f"{what}: zero windows beside a value whose power underflows not recomputed"
        checked += 1
    return checked


# channel sizes: short (a CNN head's 7x7) and long (the streamed paths)
GLOBAL_PLANES = [(7, 7), (64, 64)]


def global_cases() -> list[tuple[tuple[int, int], float, str]]:
    return [
        (plane, p, dtype)
        for plane in GLOBAL_PLANES
        for p in (1, 2, 3, 1.5)
        for dtype in DTYPES
        if p != 1.5 or dtype != "bfloat16"
    ]


def check_global() -> int:
    """GlobalLpPool over channels of zeros, zeros and a NaN, zeros and a tiny value, and ReLU-like values. Returns the
    number of cases."""
    rng = np.random.default_rng(59)
    checked = 0
    for plane, p, dtype in global_cases():
        x = np.stack([np.zeros(plane), np.zeros(plane), np.zeros(plane), relu_like(plane, rng), np.full(plane, -0.0)])
        x[1, -1, -1] = np.nan
        x[2, -1, -1] = TINY[dtype]
        xd = R.to_dtype(x[None], dtype)
        opset = 1 if p == 1.5 else (22 if dtype == "bfloat16" else 18)
        y, _ = run_op("GlobalLpPool", opset, dtype, xd, {"p": p})
        ref = R.global_lp_pool(xd, p)
        what = f"GlobalLpPool-{opset} p={p} {dtype} {plane} on {onnx_pools.active_isa()}"
        got = R.to_f64(y).reshape(-1)
        assert got[0] == 0 and got[4] == 0, f"{what}: zero channels give {got[[0, 4]]}"
        assert np.isnan(got[1]), f"{what}: zeros and a NaN give {got[1]}"
        for c in (2, 3):
            assert_close_with_subnormals(y[0, c], ref[0, c], dtype, xd[0, c], f"{what} channel {c}")
        checked += 1
    return checked


def test_zero_windows() -> None:
    assert check_all() == len(lp_cases())


@each_isa
def test_zero_windows_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_lppool_zero_windows") == str(len(lp_cases()))


def test_global_zero_channels() -> None:
    assert check_global() == len(global_cases())


@each_isa
def test_global_zero_channels_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_lppool_zero_windows", "check_global") == str(len(global_cases()))
