"""LpPool over float16 and bfloat16 planes through the float paths (lp_pool_converted, csrc/kernels/lp/lp_pool.h).

A group of planes is converted to float, pooled by the path a float plane of that geometry takes (triple strips,
fused and flat rows, pipelined rows, pair tiles, side-by-side rows, the blocked and streamed paths, the exact and
scaled forms) and rounded back once. Every float16 and bfloat16 value is exact in float and each path sums and roots
a window with the same float operations in the same order, so the result must be the float32 result of the same
values rounded to the type, bit for bit - and close to the float64 reference. Planes whose input and output floats
together exceed kConvertedPlaneLimit (2^22) stay on the row-block paths of the type itself: the same two checks hold
on both sides of that limit. Groups of planes: more planes than one group, and a count that is not a multiple of it.

Each case is run on every ISA this CPU runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import onnx_pools
import reference as R
from helpers import assert_close_with_subnormals, each_isa, rerun_on_isa, run_op

__all__ = ["cases", "check_all", "check_limit"]

DTYPES = ["float16", "bfloat16"]
TINY = {"float16": 1e-6, "bfloat16": 1e-30}
# (attributes but p, N x C x spatial shape): a geometry of each float path
GEOMETRIES: list[tuple[dict[str, Any], list[int]]] = [
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [1, 3, 20, 37]),  # triple strips
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [1, 2, 5, 400]),  # fused rows (rows too long for the strips)
    ({"kernel_shape": [2, 3], "pads": [0, 1, 0, 1]}, [1, 2, 9, 30]),  # flat rows
    ({"kernel_shape": [3, 3], "strides": [3, 3]}, [1, 2, 13, 40]),  # pipelined rows
    ({"kernel_shape": [2, 3], "strides": [2, 3]}, [1, 2, 12, 31]),
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, [1, 2, 30, 70]),  # pair tiles (p = 2)
    ({"kernel_shape": [2, 2]}, [1, 2, 11, 29]),  # side-by-side rows
    ({"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}, [1, 2, 10, 17]),  # blocked rows
    ({"kernel_shape": [2, 2], "dilations": [2, 2], "ceil_mode": 1, "strides": [2, 2]}, [1, 2, 11, 12]),  # streamed
    ({"kernel_shape": [3], "pads": [1, 1]}, [1, 3, 50]),
    ({"kernel_shape": [3, 3, 3], "pads": [1, 1, 1, 1, 1, 1]}, [1, 2, 5, 6, 7]),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [2, 350, 7, 7]),  # 700 planes: more than a group of 334
]
# (opset, p): whole p from the later versions, float p from version 1 (1.5: every window in the scaled form)
POWERS: list[tuple[int, float]] = [(18, 1), (18, 2), (18, 3), (18, 4), (1, 1.5)]


def cases() -> list[tuple[dict[str, Any], list[int], int, float, str]]:
    """(attributes, input shape, opset, p, dtype) of every case."""
    return [(dict(a, p=p), shape, opset, p, d) for a, shape in GEOMETRIES for opset, p in POWERS for d in DTYPES]


def planes_of(shape: list[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Normal values at a random scale; every third plane ReLU-like (half zeros); in every fifth plane a tiny value
    (its power may underflow: its windows are recomputed) and in every seventh a NaN."""
    x = rng.standard_normal(shape) * float(rng.choice([1.0, 3.0, 0.25]))
    planes = x.reshape(shape[0] * shape[1], -1)
    planes[::3] = np.maximum(planes[::3], 0.0)
    planes[1::5, planes.shape[1] // 2] = TINY[dtype]
    planes[2::7, planes.shape[1] // 3] = np.nan
    return R.to_dtype(x, dtype)


def check_case(x: np.ndarray, attrs: dict[str, Any], opset: int, dtype: str) -> None:
    """x's LpPool in dtype: the float32 LpPool of the same values rounded to dtype, bit for bit (NaN where it is NaN),
    and close to the float64 reference plane by plane."""
    y, _ = run_op("LpPool", opset, dtype, x, attrs)
    y32, _ = run_op("LpPool", opset, "float32", x.astype(np.float32), attrs)
    what = f"LpPool-{opset} {attrs} {dtype} {list(x.shape)} on {onnx_pools.active_isa()}"
    rounded = y32.astype(y.dtype)
    nan = np.isnan(R.to_f64(y))
    assert np.array_equal(nan, np.isnan(R.to_f64(rounded))), f"{what}: NaN where the float32 result has none"
    bits, want = y.view(np.uint16)[~nan], rounded.view(np.uint16)[~nan]
    assert np.array_equal(bits, want), (
        f"{what}: {int((bits != want).sum())} of {bits.size} outputs differ from the float32 result rounded to {dtype}"
    )
    ref = R.lp_pool(
        x, attrs["kernel_shape"], attrs.get("strides"), attrs.get("pads"), attrs.get("dilations"),
        ceil_mode=attrs.get("ceil_mode", 0), p=attrs["p"],
    )  # fmt: skip
    planes = x.reshape(x.shape[0] * x.shape[1], -1)
    y_planes, ref_planes = y.reshape(len(planes), -1), ref.reshape(len(planes), -1)
    for i in range(len(planes)):
        assert_close_with_subnormals(y_planes[i], ref_planes[i], dtype, planes[i], f"{what} plane {i}")


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(71)
    for attrs, shape, opset, _, dtype in cases():
        check_case(planes_of(shape, dtype, rng), attrs, opset, dtype)
    return len(cases())


# One plane of 3x3 pad 1 windows: input and output floats 2 x 1448 x 1448 = 4193408, within 2^22 (converted whole);
# 2 x 1449 x 1448 = 4196304, past it (the type's own row-block paths).
LIMIT_PLANES = [[1, 1, 1448, 1448], [1, 1, 1449, 1448]]


def check_limit() -> int:
    """A plane each side of kConvertedPlaneLimit, both types, p = 2. Returns the number of cases."""
    rng = np.random.default_rng(72)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}
    for shape in LIMIT_PLANES:
        for dtype in DTYPES:
            check_case(planes_of(shape, dtype, rng), attrs, 18, dtype)
    return len(LIMIT_PLANES) * len(DTYPES)


def test_converted_planes() -> None:
    assert check_all() == len(cases())


@each_isa
def test_converted_planes_on_each_isa(isa: str) -> None:
    """The same cases with each ISA path forced."""
    assert rerun_on_isa(isa, "test_lppool_converted") == str(len(cases()))


def test_plane_limit() -> None:
    assert check_limit() == 4


@each_isa
def test_plane_limit_on_each_isa(isa: str) -> None:
    """The same planes with each ISA path forced."""
    assert rerun_on_isa(isa, "test_lppool_converted", "check_limit") == "4"
