"""The streamed (long-channel) loops of the global pools, on every ISA path: float16 means, float16 and bfloat16 Lp
norms, float32 / float64 means, L2 norms and maxima.

float16 GlobalAveragePool over channels of 512 elements and more (streamed_channels in
csrc/kernels/global/global_pools.h): on the portable path summed in ScaledHalves' scaled domain, the halves taken two
per 32-bit word (even and odd elements in separate partial sums, put back in lane order before the fold), the
conversion checked once per channel. The lengths end in a full block of 1024, in a block of 1 to 63 elements (summed
by short_sum), of exactly 64, and inside a step of 32; channels hold an infinity or a NaN in a later block, subnormal
halves, large values cancelling over small ones (so that another order of the additions gives other bits) and zeros
of both signs. float16 GlobalLpPool over the same channels (p = 2, and p = 1 and 3 against the reference only): on
the portable path one channel at a time, its halves taken two per word as the means take them, converted by the
multiply by 2^112 before the power. bfloat16 GlobalLpPool (p = 2, 1, 3) over the same channels: on the portable path
one channel at a time too, two halves per word (a shift and a mask each), the L2 norms bit for bit against the same
order.

float32 / float64 GlobalAveragePool and GlobalLpPool p=2 over long channels (streamed_channels inlined with its block
sums on SSE2, and for power sums on every path): block ends, short last blocks, tails inside a step, large values
cancelling over small ones and a NaN.

Each mean and norm is checked against the float64 reference of tests/reference.py, and bit for bit against a model of
the order the library documents: kLanes (128 bytes of the accumulator type) lanes per block of 1024, lane l adding
elements l, l + kLanes, ... from +0, the tail zero-padded, the lanes folded pairwise (lane l += lane l + w for
w = kLanes / 2, ..., 1), blocks below 2 kLanes as short_sum's 8 running sums, the blocks' sums added in double (an L2
sum first over kLanes elements, its blocks from there). A fold or lane assignment in another order fails it.

float32 / float64 GlobalMaxPool over long channels (max_streams; on SSE2 paired, after max_pairs_unrolled's steps):
NaNs in the first and the second vector of a pair, past the paired steps and in the last, overlapping vector, two
NaNs (the first in memory order is the result, bit for bit), infinities, and the maximum in each of those places.
"""

from __future__ import annotations

import numpy as np

import onnx_pools
import reference as R
from helpers import each_isa, rerun_on_isa, run_op, short_sum_order

__all__ = [
    "bfloat16_cases",
    "bfloat16_l2_model",
    "case_count",
    "check_all",
    "float_cases",
    "float_model",
    "half_cases",
    "half_l2_model",
    "half_mean_model",
    "max_cases",
]

BLOCK = 1024
LANES = 32
# streamed from 512 halves on (2048 bytes of float); last block: full, 1, 63, 64, 952 (tail of 24), 256; the L2
# sums' blocks start at 32 (after the probe): their last blocks of 1 to 64 elements at 1089 and 1119 / 1120
HALF_LENGTHS = [512, 1024, 1025, 1087, 1088, 1089, 1119, 1120, 3000, 4096, 12544]
HALF_CHANNELS = 5


def _short_sum(v: np.ndarray) -> np.floating:
    """short_sum of one block (in v's type)."""
    return short_sum_order(v[np.newaxis])[0]


def _lane_sum(v: np.ndarray) -> np.floating:
    """A block of >= 2 kLanes elements (kLanes: 128 bytes of v's type): lanes from +0, the zero-padded tail, then
    lane l += lane l + w for w = kLanes / 2, ..., 1 (the pairwise fold, as vectors of any width take it)."""
    lanes = 128 // v.itemsize
    padded = np.zeros(-(-v.size // lanes) * lanes, v.dtype)
    padded[: v.size] = v
    acc = np.zeros(lanes, v.dtype)
    for row in padded.reshape(-1, lanes):
        acc = acc + row
    width = lanes // 2
    while width >= 1:
        acc[:width] = acc[:width] + acc[width : 2 * width]
        width //= 2
    return v.dtype.type(acc[0])


def _block_total(v: np.ndarray) -> float:
    """Blocks of 1024 from v's start, each as _lane_sum or (below 2 kLanes) _short_sum, added in double."""
    total = 0.0
    for off in range(0, v.size, BLOCK):
        block = v[off : off + BLOCK]
        total += float(_lane_sum(block) if block.size >= 2 * (128 // v.itemsize) else _short_sum(block))
    return total


def half_mean_model(channel: np.ndarray) -> np.float16:
    """The library's float16 mean of one long channel of finite values, by the documented order (module docstring)."""
    return np.float16(np.float32(_block_total(channel.astype(np.float32)) / channel.size))


def half_l2_model(channel: np.ndarray) -> np.float16:
    """The library's float16 L2 norm of one long channel of finite values: float_model's of the converted values,
    rounded to float16 from float."""
    with np.errstate(over="ignore"):  # a norm past float16's range is +inf, as the library's
        return np.float16(float_model("GlobalLpPool", channel.astype(np.float32)))


def bfloat16_l2_model(channel: np.ndarray) -> np.ndarray:
    """The library's bfloat16 L2 norm of one long channel of finite values: float_model's of the values as float32,
    rounded to bfloat16."""
    return R.to_dtype(np.float64(float_model("GlobalLpPool", R.to_f64(channel).astype(np.float32))), "bfloat16")


def float_model(op: str, channel: np.ndarray) -> np.floating:
    """The library's float32 / float64 mean or L2 norm of one long channel by the documented order: the mean's blocks
    from the start; the L2 sum of squares (in the channel's type) first over kLanes elements (short_sum), then in
    blocks from there, added to it in double, its square root in double rounded to the type (sums of a normal
    range)."""
    if op == "GlobalAveragePool":
        return channel.dtype.type(_block_total(channel) / channel.size)
    squares = channel * channel
    first = 128 // channel.itemsize
    probe = float(_short_sum(squares[:first]))
    return channel.dtype.type(np.sqrt(probe + _block_total(squares[first:])))


HALF_LP = [None, 2, 1, 3]  # None: GlobalAveragePool; else GlobalLpPool's p


def half_cases() -> list[tuple[int | None, int]]:
    return [(p, n) for p in HALF_LP for n in HALF_LENGTHS]


BFLOAT16_LP = [2, 1, 3]


def bfloat16_cases() -> list[tuple[int, int]]:
    return [(p, n) for p in BFLOAT16_LP for n in HALF_LENGTHS]


def make_half_input(n: int, rng: np.random.Generator, dtype: str = "float16") -> np.ndarray:
    """(1, HALF_CHANNELS, n) of dtype: mixed magnitudes; channel 1 subnormals (of float16; bfloat16's too, whose
    squares underflow) and zeros of both signs, channel 2 large
    values cancelling over small ones, channel 3 an infinity in its last block, channel 4 a NaN in its last element
    (channel 0 then -inf in its first element when n is odd)."""
    x = rng.standard_normal((1, HALF_CHANNELS, n)) * np.exp2(rng.integers(-6, 7, (1, HALF_CHANNELS, n)))
    x[0, 1] = rng.choice([0.0, -0.0, 2.0**-24, -(2.0**-20), 3 * 2.0**-17, 2.0**-14, -(2.0**-130), 2.0**-133], n)
    # small values, each block's first 32 elements +2^15 (lanes 0..15) and -2^15 (lanes 16..31): every lane's sum
    # rounds the small values to its float step at 2^15 and the fold cancels the large parts, so a sum in another
    # order (other lanes, another fold) gives other bits
    i = np.arange(n)
    large = np.where(i % LANES < LANES // 2, 32768.0, -32768.0)
    x[0, 2] = np.where(i % BLOCK < LANES, large, rng.uniform(-1, 1, n))
    x[0, 3, n - 1 - n % BLOCK // 2] = np.inf
    x[0, 4, n - 1] = np.nan
    if n % 2:
        x[0, 0, 0] = -np.inf
    return R.to_dtype(x, dtype)


# float32 / float64 means and L2 norms of long channels (streamed_channels inlined on SSE2 and, for power sums,
# everywhere): block ends, a short last block, tails inside a step; the L2 blocks start after the first kLanes
FLOAT_LENGTHS = {"float32": [512, 1000, 1056, 1087, 2080, 4113], "float64": [256, 1041, 1050, 3136]}
FLOAT_CHANNELS = 3


def float_cases() -> list[tuple[str, str, int]]:
    ops = ("GlobalAveragePool", "GlobalLpPool")
    return [(op, dtype, n) for op in ops for dtype, lengths in FLOAT_LENGTHS.items() for n in lengths]


def make_float_input(dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """(1, FLOAT_CHANNELS, n): magnitudes over 2^-8..2^8; channel 1 as channel 2 of make_half_input (large values
    cancelling over small ones, at 2^20); channel 2 a NaN in its last block."""
    x = rng.standard_normal((1, FLOAT_CHANNELS, n)) * np.exp2(rng.integers(-8, 9, (1, FLOAT_CHANNELS, n)))
    i = np.arange(n)
    x[0, 1] = np.where(i % BLOCK < LANES, np.where(i % LANES < LANES // 2, 2.0**20, -(2.0**20)), x[0, 1])
    x[0, 2, n - 2] = np.nan
    return R.to_dtype(x, dtype)


# float32 and float64 long channels: steps of 2 or 4 vectors (SSE2: after its unrolled steps of 64 floats / 32
# doubles), then single vectors and a last overlapping one
MAX_LENGTHS = {"float32": [512, 512 + 16, 512 + 16 + 8 + 3, 1024 + 64 + 7], "float64": [256, 264, 269, 543]}
MAX_CHANNELS = 10
FIRST_NAN_BITS = {"float32": np.uint32(0x7FC0ABCD), "float64": np.uint64(0x7FF800000000ABCD)}
SECOND_NAN_BITS = {"float32": np.uint32(0xFFC01357), "float64": np.uint64(0xFFF8000000001357)}


def max_cases() -> list[tuple[str, int]]:
    return [(dtype, n) for dtype, lengths in MAX_LENGTHS.items() for n in lengths]


def make_max_input(dtype: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """(x, the channel with two NaNs): NaN in the second vector of the first pair (channel 0), in the first vector of
    a later pair (1), in the last element (2), past the paired steps (3); two NaNs (4); +inf after the middle (5); the
    maximum first (6), last (7) and just past the paired steps (8); only -inf and one finite value (9)."""
    lanes = 8 if dtype == "float32" else 4
    x = R.to_dtype(rng.standard_normal((1, MAX_CHANNELS, n)), dtype)
    bits = x.view(np.uint32 if dtype == "float32" else np.uint64)
    past_pairs = n - n % (4 * lanes)
    x[0, 0, 2 * lanes + 1] = np.nan
    x[0, 1, 4 * lanes + 2] = np.nan
    x[0, 2, n - 1] = np.nan
    x[0, 3, min(past_pairs + 1, n - 1)] = np.nan
    bits[0, 4, n // 3] = FIRST_NAN_BITS[dtype]
    bits[0, 4, n - 3] = SECOND_NAN_BITS[dtype]
    x[0, 5, n // 2 + 1] = np.inf
    x[0, 6, 0] = 50.0
    x[0, 7, n - 1] = 50.0
    x[0, 8, min(past_pairs, n - 1)] = 50.0
    x[0, 9] = -np.inf
    x[0, 9, n - 2] = -7.5
    return x, 4


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(61)
    checked = 0
    for p, n in half_cases():
        x = make_half_input(n, rng)
        op = "GlobalAveragePool" if p is None else "GlobalLpPool"
        y, _ = run_op(op, 22, "float16", x, {} if p is None else {"p": p})
        what = f"{op} p={p} float16 (1, {HALF_CHANNELS}, {n}) on {onnx_pools.active_isa()}"
        ref = R.global_pool(op, x, p or 2)
        scale = R.input_scale(x) if p is None else float(np.abs(ref[np.isfinite(ref)]).max())
        R.assert_close(y, ref, "float16", scale=scale, what=what)
        for c in range(HALF_CHANNELS):
            if p in (None, 2) and np.isfinite(R.to_f64(x[0, c])).all():
                model = half_mean_model(x[0, c]) if p is None else half_l2_model(x[0, c])
                assert y[0, c, 0].tobytes() == model.tobytes(), f"{what}, channel {c}: {y[0, c, 0]!r} vs {model!r}"
        assert np.isposinf(y[0, 3, 0]) and np.isnan(y[0, 4, 0]), what
        checked += 1
    for p, n in bfloat16_cases():
        x = make_half_input(n, rng, "bfloat16")
        y, _ = run_op("GlobalLpPool", 22, "bfloat16", x, {"p": p})
        what = f"GlobalLpPool p={p} bfloat16 (1, {HALF_CHANNELS}, {n}) on {onnx_pools.active_isa()}"
        ref = R.global_pool("GlobalLpPool", x, p)
        R.assert_close(y, ref, "bfloat16", scale=float(np.abs(ref[np.isfinite(ref)]).max()), what=what)
        for c in range(HALF_CHANNELS):
            if p == 2 and np.isfinite(R.to_f64(x[0, c])).all():
                model = bfloat16_l2_model(x[0, c])
                assert y[0, c, 0].tobytes() == model.tobytes(), f"{what}, channel {c}: {y[0, c, 0]!r} vs {model!r}"
        assert np.isposinf(y[0, 3, 0]) and np.isnan(y[0, 4, 0]), what
        checked += 1
    for op, dtype, n in float_cases():
        x = make_float_input(dtype, n, rng)
        attrs = {"p": 2} if op == "GlobalLpPool" else {}
        y, _ = run_op(op, 22, dtype, x, attrs)
        what = f"{op} {dtype} (1, {FLOAT_CHANNELS}, {n}) on {onnx_pools.active_isa()}"
        R.assert_close(y, R.global_pool(op, x), dtype, scale=R.input_scale(x), what=what)
        for c in range(2):
            model = float_model(op, x[0, c])
            assert y[0, c, 0].tobytes() == model.tobytes(), f"{what}, channel {c}: {y[0, c, 0]!r} vs {model!r}"
        assert np.isnan(y[0, 2, 0]), what
        checked += 1
    for dtype, n in max_cases():
        x, two_nans = make_max_input(dtype, n, rng)
        y, _ = run_op("GlobalMaxPool", 22, dtype, x)
        what = f"GlobalMaxPool {dtype} (1, {MAX_CHANNELS}, {n}) on {onnx_pools.active_isa()}"
        ref = R.global_pool("GlobalMaxPool", x)
        assert y.dtype == x.dtype and y.shape == ref.shape, what
        np.testing.assert_array_equal(y.astype(np.float64), ref, err_msg=what)  # NaN where the reference's
        y_bits = y.view(np.uint32 if dtype == "float32" else np.uint64)
        assert y_bits[0, two_nans, 0] == FIRST_NAN_BITS[dtype], f"{what}: the first NaN's bits"
        assert y[0, 5, 0] == np.inf and y[0, 9, 0] == -7.5 and y[0, 8, 0] == 50.0, what
        checked += 1
    return checked


def case_count() -> int:
    return len(half_cases()) + len(bfloat16_cases()) + len(float_cases()) + len(max_cases())


def test_stream_paths() -> None:
    assert check_all() == case_count()


@each_isa
def test_stream_paths_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_global_stream_paths") == str(case_count())
