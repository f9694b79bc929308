"""--qlinear-times: QLinearAveragePool 3x3 pad1 in each configuration (u8/s8, NCHW 8x64x56x56 / NHWC 8x56x56x64,
distinct / equal scales and zero points, count_include_pad 0/1): min and median of runs of the library as loaded
(ONNX_POOLS_ISA / ONNX_POOLS_LIBRARY choose it), PyTorch's quantized avg_pool2d on channels_last where installed;
with --baseline, that build's session in the same process, the two run alternately (one run each per round) and
the median of the per-round ratios baseline / library reported, so that load from other processes hits both."""

from __future__ import annotations

import statistics
from typing import Any, Callable

import numpy as np

import onnx_pools
from onnx_pools.bench.cases import Q3X3_ATTRS, QAVG3X3, QLINEAR_CONFIGS, Case, build_model, make_input, small_shape
from onnx_pools.bench.engines import library_at, short_spin, torch_module
from onnx_pools.bench.timing import time_alternating, time_runs

__all__ = ["qlinear_cases", "qlinear_table"]

RUNS = 80
ROUNDS = 150


def qlinear_cases() -> list[Case]:
    return [
        Case(
            f"QLinearAveragePool 3x3 pad1 {short} {layout} {config}",
            "QLinearAveragePool",
            dtype,
            (8, 56, 56, 64) if layout == "NHWC" else (8, 64, 56, 56),
            {**Q3X3_ATTRS, "channels_last": int(layout == "NHWC"), "count_include_pad": int(config.endswith("cip1"))},
            torch_call=QAVG3X3[0],
        )
        for layout in ("NCHW", "NHWC")
        for short, dtype in (("u8", "uint8"), ("s8", "int8"))
        for config in QLINEAR_CONFIGS
    ]


def _session(model: bytes, threads: int, library: str | None) -> Any:
    """A session with the library (or the build at `library`) taking every op."""
    import onnxruntime as ort

    with library_at(library):
        so = onnx_pools.session_options(ops="all", model=model)
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(model, short_spin(so), providers=["CPUExecutionProvider"])


def qlinear_table(threads: int, baseline: str | None, small: bool) -> tuple[str, bool]:
    """(markdown, the library's kernel ran on every run of it)."""
    torch = torch_module()
    columns = ["configuration", "threads", "lib min ms", "lib median ms", "torch min ms", "kernel ran"]
    if baseline:
        columns += ["baseline min ms", "baseline median ms", "baseline / lib, median of rounds"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    runs, rounds = (3, 3) if small else (RUNS, ROUNDS)
    ok_all = True
    for case in qlinear_cases():
        shape = small_shape(case.shape) if small else case.shape
        x = make_input(case, shape, np.random.default_rng(0))
        model = build_model(case, shape)
        sess = _session(model, threads, None)

        def run(sess: Any = sess) -> Any:
            return sess.run(None, {"X": x})

        before = onnx_pools.call_counts()["QLinearAveragePool"]
        samples, calls = time_runs(run, runs=runs)
        ran = onnx_pools.call_counts()["QLinearAveragePool"] - before == calls
        ok_all &= ran
        cells = [case.name(shape), str(threads), f"{min(samples) * 1e3:.3f}", f"{statistics.median(samples) * 1e3:.3f}"]
        if torch is not None and case.attrs["channels_last"] and case.torch_call is not None:
            torch.set_num_threads(threads)
            torch_samples, _ = time_runs(case.torch_call(case, x), runs=runs)
            cells.append(f"{min(torch_samples) * 1e3:.3f}")
        else:
            cells.append("-")
        cells.append("yes" if ran else "NO")
        if baseline:
            cells += _interleaved(run, _session(model, threads, baseline), x, rounds)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", ok_all


def _interleaved(run: Callable[[], Any], other: Any, x: np.ndarray, rounds: int) -> list[str]:
    """Cells of the baseline: its min and median ms and the median of the per-round ratios baseline / library, the
    two run alternately, one run each per round."""

    def run_other() -> Any:
        return other.run(None, {"X": x})

    (lib, other_samples), _ = time_alternating([run, run_other], runs=rounds)
    times = np.array([lib, other_samples]).T
    ratio = float(np.median(times[:, 1] / times[:, 0]))
    return [f"{times[:, 1].min() * 1e3:.3f}", f"{np.median(times[:, 1]) * 1e3:.3f}", f"{ratio:.2f}"]
