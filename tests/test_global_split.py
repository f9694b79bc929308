"""The work split of the global pools (parallel_for in csrc/ort/ops.cc) on 2 and 3 intra-op threads, on every ISA
path.

A job worth several chunks is cut into chunks of channels, each pooled by one kernel call, whose boundaries fall
anywhere: inside the kernels' blocks of channels (up to 16), leaving each chunk a short last block or single
channels. The shapes give from 2 to 8 chunks of every element type, batches whose chunks span images, as many
chunks as channels (few channels of long planes), and 16-bit floats (an element converted or mapped to an integer
key); NaNs and infinities sit in channels next to multiples of 16 and in the last channel, so that the fallbacks to
one channel at a time are taken inside chunks.

Each output is checked against the float64 reference of tests/reference.py and must have the same bits as the
single-threaded run, with the library's kernel proven to run (run_op), on every ISA this CPU runs.
"""

from __future__ import annotations

import numpy as np

import onnx_pools
import reference as R
from helpers import each_isa, rerun_on_isa, run_op

__all__ = ["check_all"]

OPS = ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]
DTYPES = ["float32", "float16", "bfloat16", "float64"]
# (N, C, H, W): CNN heads (2048 channels of 7x7), 1000 channels of 14x14, 2 x 515 channels (chunks across the
# batch), 37 channels of 64x64 (few channels per chunk), 3 long channels (a chunk each), 1024 channels of 16x16
SHAPES = [(1, 2048, 7, 7), (1, 1000, 14, 14), (2, 515, 9, 9), (1, 37, 64, 64), (1, 3, 200, 200), (1, 1024, 16, 16)]
THREADS = [2, 3]


def split_input(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Normal values around each channel's own offset; a NaN or an infinity in the channels next to multiples of 16
    and in the last channel."""
    n, c = shape[0], shape[1]
    x = rng.standard_normal(shape) + (np.arange(c) % 7 - 3)[None, :, None, None] / 2.0
    flat = x.reshape(n * c, -1)
    for j in [k for m in range(16, n * c, 16 * 5) for k in (m - 1, m)] + [n * c - 1]:
        flat[j, (j * 7) % flat.shape[1]] = np.nan if j % 2 else -np.inf
    return R.to_dtype(flat.reshape(shape), dtype)


def check_all() -> int:
    """Every case on this process's ISA (rerun_on_isa runs it with each ISA forced). Returns the number of cases."""
    rng = np.random.default_rng(83)
    checked = 0
    for shape in SHAPES:
        for dtype in DTYPES:
            x = split_input(dtype, shape, rng)
            for op in OPS:
                attrs = {"p": 2} if op == "GlobalLpPool" else {}
                ref = R.global_pool(op, x, 2)
                single, _ = run_op(op, 22, dtype, x, attrs)
                for threads in THREADS:
                    y, _ = run_op(op, 22, dtype, x, attrs, threads=threads)
                    what = f"{op} {dtype} {shape} {threads} threads on {onnx_pools.active_isa()}"
                    if op == "GlobalMaxPool":
                        with np.errstate(invalid="ignore"):
                            np.testing.assert_array_equal(R.to_f64(y), R.to_f64(R.to_dtype(ref, dtype)), err_msg=what)
                    else:
                        R.assert_close(y, ref, dtype, R.input_scale(x), what)
                    assert y.tobytes() == single.tobytes(), what
                    checked += 1
    return checked


EXPECTED = len(SHAPES) * len(DTYPES) * len(OPS) * len(THREADS)


def test_split() -> None:
    assert check_all() == EXPECTED


@each_isa
def test_split_on_each_isa(isa: str) -> None:
    """The same checks with each other path forced."""
    assert rerun_on_isa(isa, "test_global_split") == str(EXPECTED)
