"""--in-cache: the global pools on 4 MB inputs, which stay in the last-level cache between runs, so that the
kernels' own speed shows rather than memory's: the library on each kernel set of --isa (each in its own worker
process, IOBinding with pre-bound OrtValues, so that ORT's per-call cost is small) against PyTorch (bfloat16
included) and OpenVINO where installed, both timed in the same worker process, for every global op (GlobalLpPool
p=1 and p=2) and float type, at each thread count, in interleaved rounds."""

from __future__ import annotations

import statistics

import numpy as np

from onnx_pools.bench.cases import GAP, GLP1, GLP2, GMP, Case, build_model
from onnx_pools.bench.engines import torch_module
from onnx_pools.bench.reference import agrees, reference
from onnx_pools.bench.workers import IsaWorker, Runner, engine_of, time_interleaved, worker_setup
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
        ("GlobalLpPool", "GlobalLpPool p=1", {"p": 1}, GLP1),
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


def in_cache_table(thread_counts: list[int], workers: list[IsaWorker], small: bool) -> tuple[str, bool]:
    """(markdown: a row per case, kernel set and thread count; the library's kernel ran on every run of it on
    every kernel set)."""
    rng = np.random.default_rng(0)
    torch = torch_module()
    columns = ["case", "ISA", "threads", "lib ms", "torch ms", "openvino ms", "speed-up vs torch"]
    columns += ["speed-up vs openvino", "lib GB/s", "lib kernel ran"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    rounds = 2 if small else ROUNDS
    ok_all = True
    slower: list[str] = []
    for case in in_cache_cases(small):
        x = _input(case, rng)
        model = build_model(case, case.shape)
        ref = reference(case, x)
        # {(engine, threads): why its time is not shown}: OpenVINO's that failed or missed the float64 reference
        notes: dict[tuple[str, int], str] = {}
        for w in workers:  # PyTorch and OpenVINO timed in each ISA's worker, beside its library
            got, errors = worker_setup(
                w, model, x, thread_counts, torch_case=case if torch is not None else None, openvino=True
            )
            notes.update({key: "fails" for key in errors})
            for key, y in got.items():
                if key[0].startswith("openvino:") and ref is not None and not agrees(case, y, ref):
                    notes[key] = "wrong result"
        runners: list[tuple[str, int, Runner]] = [(engine_of(w), t, w) for t in thread_counts for w in workers]
        # each burst right after an untimed run of its own engine: at 1 thread the engines alternate sample by
        # sample, and the run before (another engine's) would otherwise have evicted the input
        samples, kernel_ok = time_interleaved(runners, case.op, rounds, TARGET_S, 3, SAMPLE_S, workers, warm_each=True)
        ms = {key: statistics.median(v) * 1e3 for key, v in samples.items()}
        for w in workers:
            isa = engine_of(w)
            ok_all &= kernel_ok[isa]
            for t in thread_counts:
                lib = ms[(isa, t)]
                engines = {e: (engine_of(w, e), t) for e in ("torch", "openvino")}

                def cell(e: str) -> str:
                    return notes.get(engines[e]) or (f"{ms[engines[e]]:.4f}" if engines[e] in ms else "-")

                def speedup(e: str) -> str:
                    return f"{ms[engines[e]] / lib:.2f}" if engines[e] in ms and engines[e] not in notes else "-"

                if any(engines[e] in ms and engines[e] not in notes and ms[engines[e]] < lib for e in engines):
                    slower.append(f"{case.name()} ({isa}, {t} thread(s))")
                lines.append(
                    f"| {case.name()} | {isa} | {t} | {lib:.4f} | {cell('torch')} | {cell('openvino')} | "
                    f"{speedup('torch')} | {speedup('openvino')} | {x.nbytes / (lib * 1e-3) / 1e9:.1f} | "
                    f"{'yes' if kernel_ok[isa] else 'NO'} |"
                )
    lines += [
        "",
        f"- slower than PyTorch or OpenVINO: {len(slower)} of {len(lines) - 2} rows"
        + (f" ({', '.join(slower)})" if slower else ""),
        f"- medians of {rounds} interleaved rounds, each sample the mean of a burst of runs of about "
        f"{SAMPLE_S * 1e6:.0f} us; the library on each kernel set in its own process (ONNX_POOLS_ISA forced), PyTorch "
        "and OpenVINO timed in that process too, samples alternating at 1 thread, each burst right after an untimed "
        "run of its own engine (the input in cache)",
    ]
    return "\n".join(lines) + "\n", ok_all
