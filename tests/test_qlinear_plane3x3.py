"""QLinearAveragePool's one-pass path for NCHW planes with 3x3 windows, stride 1 and pads 1 (Rows3x3Pool with d = 1, on
every path: planes of at least 32 columns with AVX2's and AVX-512's 8 lanes, 16 with SSE2's and NEON's 4; narrower
planes take the flat passes of QLinearPlan, checked here the same way). Pins the rows without a row above or below, the
lanes of column 0 and w - 1, the last step of a row moved back, the blocks of rows whose middle steps run across the
rows (2 to 62 rows with both neighbours: one block, several and a last row alone), the middle's 16-lane float pass of
the avx512 build and its marked steps, and the rounding ties of equal scales (count 4 and 6 windows at the edges land on
exact .5) settled as ORT does, and with or without count_include_pad the first and last value of every row redone down
the rows (plane_edge_columns: a last vector of rows reaching past the plane, or ending at it; by ShortRules for the
windows of 4 and 6 elements where both have one, else by the float pass, or by ORT's value with equal scales). Checked
against the float64 reference away from ties and against stock ORT (identical: the ties are ORT's own float sequence),
on every ISA path."""

from __future__ import annotations

from helpers import TIE_TOL, check_qlinear_3x3_cases, each_isa, qlinear_3x3_cases, rerun_on_isa
from reference_qlinear import near_tie, qlinear_average_pool

# (N, C, H, W): one plane of 3 rows; 2 x 3 planes with row lengths that wrap a step at different lanes; a wide plane;
# one plane of 5120 elements: a call large enough to decide whether the middle rows can mark (mark_table);
# plane_edge_columns' rows: one whole vector of them (8), two vectors and a row (17); planes of 16 and 19 columns (the
# row kernel with 4 lanes, the flat passes with 8), the first of 4 rows (one vector of them with 4 lanes)
SHAPES = [
    (1, 1, 3, 32),
    (2, 3, 4, 33),
    (1, 2, 23, 57),
    (1, 1, 9, 130),
    (1, 1, 64, 80),
    (1, 2, 8, 32),
    (1, 1, 17, 40),
    (1, 1, 4, 16),
    (2, 1, 6, 19),
]

# (x_scale, y_scale, which zero points): equal scales put the edge windows on ties; 0.03 / 0.0125 is tie-heavy too;
# 0.09 / 0.02 (4.5) puts every other 9-element window within rounding noise of a tie (the middle rows must mark),
# 0.05 / 0.031 none of them (they need not); equal scales of 1e-32 (below 2^-100) settle the edges' ties without
# taking ORT's value for every edge output (Ties::Rare, not OrtOnly); equal scales with the zero points at the
# range's ends: the 9-element windows' whole values (Ties::Whole, by a ShortRule) saturated at Q's lowest; 0.02 /
# 0.015 (4/3): distinct scales whose 9-element windows (and with count_include_pad every window) take a ShortRule too,
# and the edge windows of 4 and 6 elements too (plane_edge_columns' ShortRules; with the zero points at
# the range's ends saturating), where 0.09 / 0.02 has none (plane_edge_columns' float pass); 0.0452 / 0.0224 with
# zero points near the middle: 9-element windows on a tie at differences -756, -252, 252 and 756, common in random
# planes, so the middle's marks are settled, in blocks of rows too
SCALES = [
    (0.0452, 0.0224, "near middle"),
    (0.02, 0.015, "random"),
    (0.02, 0.015, "low high"),
    (0.05, 0.05, "equal"),
    (0.05, 0.05, "high low"),
    (1e-32, 1e-32, "equal"),
    (0.05, 0.05, "random"),
    (0.0371, 0.0297, "random"),
    (0.03, 0.0125, "random"),
    (0.09, 0.02, "random"),
    (0.05, 0.031, "random"),
]


def cases():
    return qlinear_3x3_cases(20261123, SHAPES, SCALES)


def check_all():
    """Every case against the reference (away from ties) and stock ORT (everywhere); rerun_on_isa runs this with each
    ISA forced. Returns the number of cases."""
    return check_qlinear_3x3_cases(cases(), channels_last=0)


def test_plane3x3_matches_reference_and_stock_ort():
    check_all()


def test_equal_scales_put_edge_windows_on_ties():
    """The equal-scales cases do reach the tie path: pre-rounding values at the edges on .5, none inside."""
    x, xs, xz, ys, yz, cip = next(
        c for c in cases() if c[0].shape[2] >= 23 and c[1] == c[3] and c[2] == c[4] and not c[5]
    )
    _, pre = qlinear_average_pool(x, xs, xz, ys, yz, [3, 3], None, [1, 1, 1, 1], "NOTSET", 0, cip, 0)
    on_tie = near_tie(pre, TIE_TOL)
    assert on_tie[..., 0, :].any() and on_tie[..., :, 0].any() and not on_tie[..., 1:-1, 1:-1].any()


def test_middle_windows_reach_the_ties():
    """The 0.0452 / 0.0224 cases put some middle windows (9 elements) on a tie."""
    reached = 0
    for x, xs, xz, ys, yz, cip in cases():
        if (xs, ys) == (0.0452, 0.0224):
            _, pre = qlinear_average_pool(x, xs, xz, ys, yz, [3, 3], None, [1, 1, 1, 1], "NOTSET", 0, cip, 0)
            reached += int(near_tie(pre[..., 1:-1, 1:-1], 1e-4).any())
    assert reached >= 4


@each_isa
def test_plane3x3_on_each_isa(isa):
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_qlinear_plane3x3") == str(len(cases()))
