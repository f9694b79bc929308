"""LpPool p=3 roots, bit for bit: every float window sum's root is its correctly rounded cube root.

The avx2, avx512 and neon builds take the roots of float window sums with fused multiply-adds (fused_cube_root in
csrc/kernels/common/lp_math.h), which leaves the few sums whose root it cannot vouch for to cube_root
(settle_roots). The pairs below are (a, b) whose window sum a^3 + b^3 is such a sum *and* whose fused value is one
ulp off (found by running that function's arithmetic over random pairs: about 1 sum in 19000 is unsure, and a third
of those are off), so a path that skipped the settling would fail here. Windows of (a, b), mixed with random
windows, on each LpPool path that takes roots in a loop: pipelined (2x2 stride 2, over a zero row), blocked (1x2
stride 1x2, and 1-D windows of 2) and streamed (1x2 stride 2x2: the row stride above the row kernel), on every ISA
path. The expected roots are computed exactly (integer arithmetic on the midpoints), from the sums as float32 forms
them.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

import onnx_pools
from helpers import each_isa, rerun_on_isa, run_op

HARD_PAIRS = [  # hexadecimal float32 values (float.fromhex)
    ("0x1.cc9f5cp+0", "0x1.ace1e2p-1"),
    ("0x1.905d7p+0", "0x1.26efbp-1"),
    ("0x1.8f8abp+0", "0x1.823c58p-1"),
    ("0x1.a1f974p+0", "0x1.847ffcp-1"),
    ("0x1.f52f16p+0", "0x1.bf4e7ep-1"),
    ("0x1.d0152cp+0", "0x1.9241a6p-1"),
    ("0x1.a18c28p+0", "0x1.dc7df8p-1"),
    ("0x1.98fb1ep+0", "0x1.09f124p-1"),
    ("0x1.872292p+0", "0x1.986c64p-1"),
    ("0x1.f7c81p+0", "0x1.6b96f4p-1"),
    ("0x1.d61c1p+0", "0x1.430d34p-1"),
    ("0x1.d44c66p+0", "0x1.5b91dep-1"),
    ("0x1.354dfcp+0", "0x1.b324e4p-1"),
    ("0x1.2e7a44p+0", "0x1.75b014p-1"),
    ("0x1.b0c738p+0", "0x1.728316p-1"),
    ("0x1.26e4eap+0", "0x1.705b62p-1"),
]


def hard_pairs() -> np.ndarray:
    return np.array([[float.fromhex(v) for v in pair] for pair in HARD_PAIRS], dtype=np.float32)


def correctly_rounded_cbrt(s: np.float32) -> np.float32:
    """The float32 nearest to s^(1/3) (s > 0 normal), decided exactly: y is it iff the cubes of the midpoints
    between y and its neighbours bracket s."""
    exact = Fraction(float(s))
    y = np.float32(np.cbrt(np.float64(s)))
    while True:
        up, down = np.nextafter(y, np.float32(np.inf)), np.nextafter(y, np.float32(0))
        if ((Fraction(float(y)) + Fraction(float(up))) / 2) ** 3 < exact:
            y = up
        elif ((Fraction(float(y)) + Fraction(float(down))) / 2) ** 3 > exact:
            y = down
        else:
            return y


def window_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a^3 + b^3 as the kernels form it in float32: (a * a) * a, then the pair's sum (zeros add exactly)."""
    return (a * a) * a + (b * b) * b


def cases():
    """(attrs, x, expected y): windows of (a, b) pairs, the hard ones at scattered positions among random ones."""
    rng = np.random.default_rng(20261124)
    hard = hard_pairs()
    out = []
    # (windows per row, rows, planes): a vector's worth and more per row, tails, several planes and rows
    for per_row, rows, planes in ((16, 1, 1), (21, 3, 2), (40, 5, 3)):
        n = per_row * rows * planes
        pairs = np.stack([1 + rng.random(n), 0.5 + rng.random(n) / 2], axis=1).astype(np.float32)
        spots = rng.choice(n, size=min(n, 3 * len(hard)), replace=False)
        pairs[spots] = hard[np.arange(len(spots)) % len(hard)]
        a, b = pairs[:, 0], pairs[:, 1]
        expected = np.array([correctly_rounded_cbrt(s) for s in window_sums(a, b)], dtype=np.float32)
        ab = pairs.reshape(planes, rows, 2 * per_row)  # each row: a0 b0 a1 b1 ...
        # 2x2 stride 2: the pairs over a zero row
        x2 = np.zeros((1, planes, 2 * rows, 2 * per_row), np.float32)
        x2[0, :, 0::2, :] = ab
        out.append(
            ({"kernel_shape": [2, 2], "strides": [2, 2], "p": 3}, x2, expected.reshape(1, planes, rows, per_row))
        )
        # 1x2 stride 1x2: the pairs alone
        x1 = ab.reshape(1, planes, rows, 2 * per_row)
        out.append(
            ({"kernel_shape": [1, 2], "strides": [1, 2], "p": 3}, x1, expected.reshape(1, planes, rows, per_row))
        )
        # 1x2 stride 2x2 (a row stride above the row kernel: streamed): the pairs, with rows skipped between them
        xs = rng.random((1, planes, 2 * rows, 2 * per_row)).astype(np.float32)
        xs[0, :, 0::2, :] = ab
        out.append(
            ({"kernel_shape": [1, 2], "strides": [2, 2], "p": 3}, xs, expected.reshape(1, planes, rows, per_row))
        )
        # 1-D windows of 2, stride 2
        xd = ab.reshape(planes, rows, 2 * per_row)
        out.append(({"kernel_shape": [2], "strides": [2], "p": 3}, xd, expected.reshape(planes, rows, per_row)))
    return out


def check_all():
    """Every case (rerun_on_isa runs this with each ISA forced). Returns the number of cases."""
    checked = 0
    for attrs, x, expected in cases():
        y, _ = run_op("LpPool", 18, "float32", x, attrs)
        bad = np.flatnonzero(y.ravel().view(np.uint32) != expected.ravel().view(np.uint32))
        assert bad.size == 0, (
            f"{attrs} {x.shape} on {onnx_pools.active_isa()}: {bad.size} roots not correctly rounded, "
            f"first at {bad[0]}: {y.ravel()[bad[0]]!r} vs {expected.ravel()[bad[0]]!r}"
        )
        checked += 1
    return checked


def test_hard_pairs_are_hard_sums():
    """The pairs' sums are not cubes of floats (their roots lie strictly between floats, so rounding is at stake)."""
    a, b = hard_pairs().T
    for s in window_sums(a, b):
        y = correctly_rounded_cbrt(s)
        assert Fraction(float(y)) ** 3 != Fraction(float(s))


def test_cube_roots_correctly_rounded():
    check_all()


@each_isa
def test_cube_roots_on_each_isa(isa):
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_cube_roots") == str(len(cases()))
