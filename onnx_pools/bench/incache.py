"""--in-cache: the global pools on 4 MB inputs, which stay in the last-level cache between runs, so that the
kernels' own speed shows rather than memory's: the library (in this process, IOBinding with pre-bound OrtValues,
so that ORT's per-call cost is small) against PyTorch and OpenVINO where installed, for every global op and float
type, at each thread count."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np

import onnx_pools
from onnx_pools.bench.cases import GAP, GLP2, GMP, Case, build_model
from onnx_pools.bench.engines import bound_runner, openvino_module, openvino_runner, ort_session, torch_module
from onnx_pools.bench.reference import agrees, reference
from onnx_pools.bench.timing import SPIN_SETTLE_S, time_runs
from onnx_pools.ortvalues import bfloat16

__all__ = ["in_cache_cases", "in_cache_table"]

BYTES = 4 << 20
SMALL_BYTES = 16 << 10
ROUNDS = 20
SAMPLE_S = 300e-6  # a sample is the mean of a burst of runs this long (runs of tens of microseconds)
TARGET_S = 0.01  # seconds of samples per engine in each round
FLOAT_TYPES = ("float32", "float64", "float16", "bfloat16")


def in_cache_cases(small: bool) -> list[Case]:
    """Every global op and float type, over (1, C, 64, 64) inputs of BYTES, C from the type (--small: 16 x 16
    planes, SMALL_BYTES)."""
    cases = []
    for op, label, attrs, torch_call in (
        ("GlobalAveragePool", "GlobalAveragePool", {}, GAP),
        ("GlobalMaxPool", "GlobalMaxPool", {}, GMP),
        ("GlobalLpPool", "GlobalLpPool p=2", {"p": 2}, GLP2),
    ):
        for dtype in FLOAT_TYPES:
            itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
            side = 16 if small else 64
            channels = (SMALL_BYTES if small else BYTES) // (itemsize * side * side)
            shape = (1, channels, side, side)
            cases.append(Case(f"{label} {dtype}", op, dtype, shape, attrs, False, torch_call[0], torch_call[1]))
    return cases


def _input(case: Case, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(size=case.shape, dtype=np.float32)
    return np.asarray(x.astype(bfloat16() if case.dtype == "bfloat16" else np.dtype(case.dtype)))


def in_cache_table(thread_counts: list[int], small: bool) -> tuple[str, bool]:
    """(markdown, the library's kernel ran on every run of it)."""
    rng = np.random.default_rng(0)
    torch = torch_module()
    columns = ["case", "threads", "lib ms", "torch ms", "openvino ms", "speed-up vs torch", "speed-up vs openvino"]
    columns += ["lib GB/s", "lib kernel ran"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    rounds = 2 if small else ROUNDS
    ok_all = True
    for case in in_cache_cases(small):
        x = _input(case, rng)
        model = build_model(case, case.shape)
        ref = reference(case, x)
        for t in thread_counts:
            engines: dict[str, Callable[[], Any]] = {}
            notes: dict[str, str] = {}
            engines["lib"], _ = bound_runner(ort_session(model, True, t), x)
            if torch is not None and case.torch_call is not None and case.dtype != "bfloat16":
                engines["torch"] = case.torch_call(case, x)
            if openvino_module() is not None:
                try:
                    run, y = openvino_runner(model, x, t)
                except Exception:
                    notes["openvino"] = "fails"
                else:
                    if ref is not None and not agrees(case, y, ref):
                        notes["openvino"] = "wrong result"
                    engines["openvino"] = run
            samples: dict[str, list[float]] = {e: [] for e in engines}
            before = onnx_pools.call_counts()[case.op]
            lib_calls = 0
            old = torch.get_num_threads() if torch is not None else None
            try:
                for _ in range(rounds):
                    for e, fn in engines.items():
                        if e == "torch":
                            torch.set_num_threads(t)
                        ts, calls = time_runs(fn, TARGET_S, 3, sample_s=SAMPLE_S)
                        samples[e] += ts
                        lib_calls += calls if e == "lib" else 0
                        if t > 1:
                            time.sleep(SPIN_SETTLE_S)
            finally:
                if torch is not None:
                    torch.set_num_threads(old)
            ran = onnx_pools.call_counts()[case.op] - before == lib_calls
            ok_all &= ran
            ms = {e: statistics.median(v) * 1e3 for e, v in samples.items()}

            def cell(e: str) -> str:
                return notes.get(e) or (f"{ms[e]:.4f}" if e in ms else "-")

            def speedup(e: str) -> str:
                return f"{ms[e] / ms['lib']:.2f}" if e in ms and e not in notes else "-"

            lines.append(
                f"| {case.name()} | {t} | {ms['lib']:.4f} | {cell('torch')} | {cell('openvino')} | {speedup('torch')} "
                f"| {speedup('openvino')} | {x.nbytes / (ms['lib'] * 1e-3) / 1e9:.1f} | {'yes' if ran else 'NO'} |"
            )
    return "\n".join(lines) + "\n", ok_all
