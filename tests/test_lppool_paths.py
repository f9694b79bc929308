"""LpPool paths of csrc/kernels/lp/lp_pool.h for particular geometries, on every ISA path.

Planes of one element (the 1x1 planes of CNN heads under padded windows) take a loop of their own
(lp_pool_single_elements): each output is the root of its element's |x|^p, many planes per loop in blocks of kBlock
planes; a plane whose |x|^p is not trusted (huge or tiny values, NaN, infinity) is handed back to the plane paths
alone. The cases put more planes than one block in a run, groups of huge and tiny values (the powers overflow or
underflow the accumulator) between plain ones, NaN, infinities and zeros of both signs, over 1-D, 2-D and 3-D windows
that hold the element, for p = 1, 2, 3, 4, 1.5 and 0.1 (version 1's float p; the smallest takes every window exactly).

Windows of 3 columns at stride 1 with one column of padding each side, over float and double planes, take
lp_pool_blocked's flat rows: a block's column sums in one run of vectors across its rows (padded_triple_rows), the
edge columns redone after it, and with row stride 1 (row kernels of 1 to 3) the roots of the whole block in one loop
(else a row at a time). 3x3 windows at stride 1 with one row and column of padding each side and p = 1, 2 or 4 (roots
that are square roots) take fused_triple_rows for the output rows whose lower input row is inside the plane: the
column sums and the roots in one run of vectors (rows at least one vector wide), the plane's last row as above.
Those 3x3 windows over float and double planes of at least 3 rows, of rows at least one vector and 6 values wide
and at most 341 (the first three rows among the plane's first 1024 values) take lp_pool_triple_strips first: a
column strip of the plane at a time down blocks of 8 rows (the last strip overlapping the one before, the edge
strips' outside neighbours shifted in as +0), the row sums of two rows carried in registers and across blocks; a
plane with a sum that may not be trusted, or with sums too large for the plane paths' probe to be trusted, is
handed back to the plane paths above. The cases take rows of 2 columns up to rows of 341 and 342 (blocks of a few
rows), rows of exactly one and two vectors, planes of several blocks, and per plane: plain values, a NaN and an
infinity (windows recomputed exactly), tiny values throughout (the plane scaled by a power of two from the start),
huge values throughout (the plane redone at a new scale), tiny values past the first rows (more than 1/16 of the
windows untrusted: redone), zeros of both signs, large values whose windows' sums are trusted but whose plane's sum
overflows.

Windows that tile float and double planes (kernel = stride = 2 or 3 along both axes, no padding) take the pipelined
path: the next output row's window sums made while this row's roots are taken. 2x2 windows whose root has a vector
form (p = 2; p = 3 in float on the avx2 and avx512 paths) over rows of at least a vector of windows take
lp_pool_pair_tiles instead: a block of rows' window sums, then the block's roots in one run of vectors (the last
vector of a row or block overlapping the one before). The cases take output heights of 1 to 75 (several blocks of
rows), rows of fewer windows than a vector and of several vectors with a tail, and the planes of the flat rows above.

Each plane or group of planes is checked against the float64 reference of tests/reference.py at its own scale, with
the library's kernel proven to run, on every ISA this CPU runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import onnx_pools
import reference as R
from helpers import assert_close_with_subnormals, each_isa, rerun_on_isa, run_op

__all__ = ["cases", "check_all", "check_all_rows", "check_all_tiles", "row_cases", "tile_cases"]

DTYPES = ["float32", "float64", "float16", "bfloat16"]
HUGE = {"float32": 3e38, "float64": 1e308, "float16": 6e4, "bfloat16": 3e38}
# values whose squares summed over a 3x3 window stay finite, but not over 1024 values
LARGE = {"float32": 1.5e18, "float64": 1e153}
TINY = {"float32": 1e-30, "float64": 1e-200, "float16": 1e-6, "bfloat16": 1e-30}
# (attributes, spatial rank): windows over a one-element plane that hold the element
GEOMETRIES: list[tuple[dict[str, Any], int]] = [
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 2),
    ({"kernel_shape": [1, 1]}, 2),
    ({"kernel_shape": [2, 2], "pads": [1, 1, 0, 0], "strides": [2, 2]}, 2),
    ({"kernel_shape": [3], "pads": [1, 1]}, 1),
    ({"kernel_shape": [3, 3, 3], "pads": [1, 1, 1, 1, 1, 1]}, 3),
]
# (opset, p): whole p from the later versions, float p from version 1
POWERS: list[tuple[int, float]] = [(18, 1), (18, 2), (18, 3), (18, 4), (1, 1.5), (1, 0.1)]
PLANES = (2, 700)  # N x C = 1400 planes: more than one block of 1024
# groups of planes (flat plane index ranges) checked each at its own scale
PLAIN, HUGE_GROUP, TINY_GROUP, REST = (0, 1000), (1000, 1100), (1100, 1200), (1200, 1400)


def run_against_reference(
    x: np.ndarray, opset: int, dtype: str, attrs: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, str]:
    """(the library's LpPool of x, the float64 reference, the case's description), the shapes checked equal."""
    y, _ = run_op("LpPool", opset, dtype, x, attrs)
    ref = R.lp_pool(x, attrs["kernel_shape"], attrs.get("strides"), attrs.get("pads"), p=attrs["p"])
    what = f"LpPool-{opset} {attrs} {dtype} {x.shape} on {onnx_pools.active_isa()}"
    assert y.shape == ref.shape, what
    return y, ref, what


def cases() -> list[tuple[dict[str, Any], int, int, float, str]]:
    out = []
    for attrs, rank in GEOMETRIES:
        for opset, p in POWERS:
            for dtype in DTYPES:
                if opset == 1 and dtype == "bfloat16":
                    continue  # version 1 of LpPool has no bfloat16
                # bfloat16 from version 22 (ORT's own schemas, on the plugin-EP route, refuse it before)
                out.append((attrs, rank, 22 if dtype == "bfloat16" else opset, p, dtype))
    return out


def make_input(dtype: str, rank: int, rng: np.random.Generator) -> np.ndarray:
    """Standard normal values times 2 but for the huge and tiny groups; NaN, infinities and zeros of both signs
    among the plain ones."""
    flat = rng.standard_normal(PLANES[0] * PLANES[1]) * 2
    flat[slice(*HUGE_GROUP)] = HUGE[dtype] * rng.uniform(0.25, 1.0, 100) * rng.choice([-1.0, 1.0], 100)
    flat[slice(*TINY_GROUP)] *= TINY[dtype]
    flat[[3, 500, 1300]] = np.nan
    flat[[7, 1250]] = np.inf
    flat[[9, 1030 - 1000 + 1200]] = -np.inf
    flat[[11, 1023, 1024]] = 0.0
    flat[[13, 1399]] = -0.0
    with np.errstate(over="ignore"):
        return R.to_dtype(flat.reshape(PLANES + (1,) * rank), dtype)


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(41)
    checked = 0
    for attrs, rank, opset, p, dtype in cases():
        x = make_input(dtype, rank, rng)
        y, ref, what = run_against_reference(x, opset, dtype, dict(attrs, p=p))
        yf, rf, xf = (a.reshape(-1) for a in (y, ref, x))
        for lo, hi in (PLAIN, HUGE_GROUP, TINY_GROUP, REST):
            assert_close_with_subnormals(yf[lo:hi], rf[lo:hi], dtype, xf[lo:hi], f"{what} planes {lo}..{hi}")
        checked += 1
    return checked


# (attributes, opset, p) of the flat rows: 3 columns with one column of padding each side, row kernels 1 to 3
ROW_GEOMETRIES: list[tuple[dict[str, Any], int, float]] = [
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 18, 2),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 18, 3),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 18, 1),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 18, 4),
    ({"kernel_shape": [3, 3], "pads": [0, 1, 2, 1]}, 18, 4),
    ({"kernel_shape": [1, 3], "pads": [0, 1, 0, 1]}, 18, 2),
    ({"kernel_shape": [2, 3], "pads": [1, 1, 0, 1]}, 18, 3),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 1, 1.5),
    # the same column sums under the per-row roots: row stride 2, a row kernel of 5
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 1]}, 18, 3),
    ({"kernel_shape": [5, 3], "pads": [2, 1, 2, 1]}, 18, 2),
]
# H, W; rows of exactly one vector (8 and 16 columns) for the fused rows and the strips, of two (16 and 32), the
# narrowest and the widest rows the strips take (6 and 341 columns) and one wider, one block of 8 rows and more
ROW_PLANES = [
    (7, 2),
    (5, 3),
    (4, 9),
    (6, 8),
    (5, 16),
    (21, 56),
    (9, 17),
    (11, 150),
    (3, 6),
    (17, 16),
    (8, 32),
    (10, 24),
    (3, 341),
    (4, 342),
]
# planes per case: plain, NaN and inf, tiny, huge, tiny past the first rows, zeros, large, plain
ROW_SPECIALS = 8


def row_cases() -> list[tuple[dict[str, Any], int, float, str, tuple[int, int]]]:
    out = []
    for attrs, opset, p in ROW_GEOMETRIES:
        for dtype in ("float32", "float64"):
            for plane in ROW_PLANES:
                out.append((attrs, opset, p, dtype, plane))
    return out


def make_row_input(dtype: str, plane: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    h, w = plane
    x = rng.standard_normal((1, ROW_SPECIALS, h, w)) * 2
    x[0, 1, h // 2, w // 2] = np.nan
    x[0, 1, h - 1, 0] = -np.inf
    x[0, 2] *= TINY[dtype]
    x[0, 3] = HUGE[dtype] * rng.uniform(0.25, 1.0, (h, w)) * rng.choice([-1.0, 1.0], (h, w))
    x[0, 4, h // 3 :] *= TINY[dtype]
    x[0, 5] = rng.choice([0.0, -0.0], (h, w))
    x[0, 6] = LARGE[dtype] * rng.uniform(0.5, 1.0, (h, w)) * rng.choice([-1.0, 1.0], (h, w))
    with np.errstate(over="ignore"):
        return R.to_dtype(x, dtype)


def assert_each_plane(y: np.ndarray, ref: np.ndarray, x: np.ndarray, dtype: str, what: str) -> None:
    """make_row_input's planes, each at its own scale."""
    for c in range(ROW_SPECIALS):
        assert_close_with_subnormals(y[0, c], ref[0, c], dtype, x[0, c], f"{what} plane {c}")


def check_all_rows() -> int:
    """Every flat-rows case on this process's ISA. Returns the number of cases."""
    rng = np.random.default_rng(43)
    checked = 0
    for attrs, opset, p, dtype, plane in row_cases():
        x = make_row_input(dtype, plane, rng)
        y, ref, what = run_against_reference(x, opset, dtype, dict(attrs, p=p))
        assert_each_plane(y, ref, x, dtype, what)
        checked += 1
    return checked


TILE_KERNELS = [[2, 2], [2, 3], [3, 2], [3, 3]]
TILE_PLANES = [
    (3, 6),
    (7, 9),
    (8, 46),
    (19, 112),
    (27, 35),
    (150, 34),
]  # H, W (windows past the last whole one are dropped)


def tile_cases() -> list[tuple[list[int], float, str, tuple[int, int]]]:
    out = []
    for kernel in TILE_KERNELS:
        for p in (2, 3):
            for dtype in ("float32", "float64"):
                for plane in TILE_PLANES:
                    out.append((kernel, p, dtype, plane))
    return out


def check_all_tiles() -> int:
    """Every tiling case on this process's ISA. Returns the number of cases."""
    rng = np.random.default_rng(47)
    checked = 0
    for kernel, p, dtype, plane in tile_cases():
        x = make_row_input(dtype, plane, rng)
        y, ref, what = run_against_reference(x, 18, dtype, {"kernel_shape": kernel, "strides": kernel, "p": p})
        assert_each_plane(y, ref, x, dtype, what)
        checked += 1
    return checked


def test_single_element_planes() -> None:
    assert check_all() == len(cases())


@each_isa
def test_single_element_planes_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_lppool_paths") == str(len(cases()))


def test_flat_rows() -> None:
    assert check_all_rows() == len(row_cases())


@each_isa
def test_flat_rows_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_lppool_paths", "check_all_rows") == str(len(row_cases()))


def test_tiles() -> None:
    assert check_all_tiles() == len(tile_cases())


@each_isa
def test_tiles_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_lppool_paths", "check_all_tiles") == str(len(tile_cases()))
