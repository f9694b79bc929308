"""QLinearAveragePool's one-pass path for NHWC images with 3x3 windows, stride 1 and pads 1 (Rows3x3Pool with d = C;
images of at least 2 channels and 16 values a row with AVX2's and AVX-512's 8 lanes, 8 with SSE2's and NEON's 4, and
with SSE2 only where the middle windows take a ShortRule; the others take QLinearStreamPlan's passes, checked here
the same way). Pins channel counts below, at and off the vector length (vectors reaching column 0 or w - 1 with lanes
of several columns), images of 1 to 4 rows or columns, rows without a row above or below, rows too short for the
kernel (sent elsewhere), the rounding ties of equal scales (count 4 and 6 windows at the edges land on exact .5) and
of scales whose ratio puts count 9 windows on ties (settled from the exact value, then as ORT does), zero points at
the range ends, batches. Checked against the float64 reference away from ties and against stock ORT (identical: the
ties are ORT's own float sequence), on every ISA path.
"""

from __future__ import annotations

from helpers import TIE_TOL, check_qlinear_3x3_cases, each_isa, qlinear_3x3_cases, rerun_on_isa
from reference_qlinear import near_tie, qlinear_average_pool

# (N, H, W, C): 16 values a row (the least the path takes) in 2 and 8 channels; one row; one and two columns;
# odd channel counts below, between and above vector lengths; a row of 15 values (not taken: the streamed path);
# an image of 4608 values; rows of 8 values (the least with 4 lanes)
SHAPES = [
    (1, 3, 4, 2),
    (1, 3, 8, 2),
    (1, 1, 16, 3),
    (2, 2, 3, 7),
    (1, 4, 1, 17),
    (1, 3, 2, 8),
    (2, 5, 9, 8),
    (1, 4, 4, 13),
    (1, 6, 7, 24),
    (1, 9, 12, 33),
    (1, 5, 6, 64),
    (2, 4, 5, 3),
    (1, 12, 24, 16),
]

# (x_scale, y_scale, which zero points): equal scales put the edge windows on ties; 0.03 / 0.02 (ratio 1.5) and
# 0.045 / 0.01 (4.5) put count 9 windows near ties too, so the middle columns' marks are settled; equal scales of
# 1e-32 (below 2^-100) settle the edges' ties after the float pass instead of taking ORT's value for every edge window;
# equal scales with the zero points at the range's ends: the 9-element windows' whole values (Ties::Whole, by a
# ShortRule) saturated; 0.0452 / 0.0224 with zero points near the middle: 9-element windows on a tie at four
# differences common in random images
SCALES = [
    (0.0452, 0.0224, "near middle"),
    (0.05, 0.05, "equal"),
    (1e-32, 1e-32, "equal"),
    (0.05, 0.05, "low high"),
    (0.0371, 0.0297, "random"),
    (0.03, 0.02, "random"),
    (0.045, 0.01, "high low"),
]


def cases():
    return qlinear_3x3_cases(20261124, SHAPES, SCALES)


def check_all():
    """Every case against the reference (away from ties) and stock ORT (everywhere); rerun_on_isa runs this with each
    ISA forced. Returns the number of cases."""
    return check_qlinear_3x3_cases(cases(), channels_last=1)


def test_nhwc3x3_matches_reference_and_stock_ort():
    check_all()


def _pre(case):
    x, xs, xz, ys, yz, cip = case
    return qlinear_average_pool(x, xs, xz, ys, yz, [3, 3], None, [1, 1, 1, 1], "NOTSET", 0, cip, 1)[1]


def test_cases_reach_the_ties():
    """The equal-scales cases put edge windows on ties and no others; the 0.03 / 0.02 ones interior windows too."""
    all_cases = cases()
    equal = next(c for c in all_cases if c[0].shape == (1, 5, 6, 64) and c[1] == c[3] and c[2] == c[4] and not c[5])
    on_tie = near_tie(_pre(equal), TIE_TOL)
    assert on_tie[:, 0].any() and on_tie[:, :, 0].any() and not on_tie[:, 1:-1, 1:-1].any()
    heavy = next(c for c in all_cases if c[0].shape == (1, 9, 12, 33) and c[1] == 0.03 and c[5])
    assert near_tie(_pre(heavy), TIE_TOL)[:, 1:-1, 1:-1].any()


@each_isa
def test_nhwc3x3_on_each_isa(isa):
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_qlinear_nhwc3x3") == str(len(cases()))
