"""--small-planes: the planes CNN heads pool, 1x1 to 17x17, over C = 1024 and C = 32 channels (batch 1), for every
global op and LpPool 3x3 s1 pad1 p=2, float32 and float16: the library on every ISA (worker processes with
ONNX_POOLS_ISA forced) against stock ONNX Runtime and PyTorch timed in the same process, in interleaved rounds of
short bursts. Inputs of microseconds, where a node's per-run cost is much of the time: a custom op must not lose to
stock there either."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from onnx_pools.bench.cases import GAP, GLP2, GMP, LP3X3, LP3X3_ATTRS, Case, build_model, make_input
from onnx_pools.bench.workers import IsaWorker, Runner, engine_of, time_interleaved, worker_setup

__all__ = ["small_plane_cases", "small_planes_table"]

SIDES = tuple(range(1, 18))
CHANNELS = (1024, 32)
FLOAT_TYPES = ("float32", "float16")
ROUNDS = 24  # --quick: half as many
SAMPLE_S = 200e-6  # a sample is the mean of a burst of runs this long


def small_plane_cases(small: bool) -> list[tuple[Case, tuple[int, ...]]]:
    """(case, shape) of the sweep: op, float type, channel count, then plane side (--small: a few of each)."""
    ops: list[tuple[str, str, dict[str, Any], Any]] = [
        ("GlobalAveragePool", "GlobalAveragePool", {}, GAP),
        ("GlobalMaxPool", "GlobalMaxPool", {}, GMP),
        ("GlobalLpPool p=2", "GlobalLpPool", {"p": 2}, GLP2),
        ("LpPool 3x3 s1 pad1 p=2", "LpPool", LP3X3_ATTRS, LP3X3),
    ]
    sides, channels = ((1, 4, 7), (32,)) if small else (SIDES, CHANNELS)
    cases = []
    for label, op, attrs, torch_call in ops:
        for dtype in FLOAT_TYPES:
            short = {"float32": "f32", "float16": "f16"}[dtype]
            for c in channels:
                for side in sides:
                    case = Case(f"{label} {short}", op, dtype, (1, c, side, side), attrs, False, *torch_call)
                    cases.append((case, case.shape))
    return cases


def _time_case(
    case: Case, shape: tuple[int, ...], threads: list[int], rounds: int, workers: list[IsaWorker], x: np.ndarray
) -> tuple[dict[tuple[str, int], float], dict[str, bool]]:
    """(median ms per (engine, threads), the library's kernel ran on each ISA): each worker times its library,
    stock ORT and PyTorch in its own process."""
    model = build_model(case, shape)
    for w in workers:
        worker_setup(w, model, x, threads, stock=True, torch_case=case)
    runners: list[tuple[str, int, Runner]] = [(engine_of(w), t, w) for t in threads for w in workers]
    samples, kernel_ok = time_interleaved(runners, case.op, rounds, 0.0, 1, SAMPLE_S, workers)
    return {key: statistics.median(ts) * 1e3 for key, ts in samples.items()}, kernel_ok


def small_planes_table(
    threads: list[int], workers: list[IsaWorker], rng: np.random.Generator, small: bool, quick: bool
) -> tuple[str, bool]:
    """(markdown: a summary per ISA, then one row per case, ISA and thread count; the library's kernel ran on
    every run of it)."""
    rounds = 2 if small else (ROUNDS // 2 if quick else ROUNDS)
    columns = ["case", "ISA", "threads", "lib ms", "stock ms", "torch ms", "speed-up vs stock", "speed-up vs torch"]
    columns += ["kernel ran"]
    rows: list[str] = []
    slower: dict[tuple[str, int], list[tuple[float, str]]] = {}
    counted: dict[tuple[str, int], int] = {}
    ok_all = True
    for case, shape in small_plane_cases(small):
        x = make_input(case, shape, rng)
        ms, kernel_ok = _time_case(case, shape, threads, rounds, workers, x)
        for w in workers:
            isa = engine_of(w)
            ok_all &= kernel_ok[isa]
            for t in threads:
                lib, stock = ms[(isa, t)], ms[(engine_of(w, "stock"), t)]
                torch = ms.get((engine_of(w, "torch"), t))
                vs_stock = stock / lib
                vs_torch = f"{torch / lib:.2f}" if torch else "-"
                counted[(isa, t)] = counted.get((isa, t), 0) + 1
                if vs_stock < 1.0:
                    slower.setdefault((isa, t), []).append((vs_stock, case.name(shape)))
                rows.append(
                    f"| {case.name(shape)} | {isa} | {t} | {lib:.4f} | {stock:.4f} | "
                    f"{f'{torch:.4f}' if torch else '-'} | {vs_stock:.2f} | {vs_torch} | "
                    f"{'yes' if kernel_ok[isa] else 'NO'} |"
                )
    summary = []
    for (isa, t), n in counted.items():
        worst = sorted(slower.get((isa, t), []))
        listed = ", ".join(f"{name} {ratio:.2f}x" for ratio, name in worst[:6]) + (", ..." if len(worst) > 6 else "")
        summary.append(
            f"- {isa}, {t} thread(s): {len(worst)} of {n} cases slower than stock" + (f" ({listed})" if worst else "")
        )
    lines = summary + ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns), *rows]
    lines += [
        "",
        f"speed-up = other time / lib time (> 1: the library is faster); medians of {rounds} interleaved rounds, each "
        f"sample the mean of a burst of runs of about {SAMPLE_S * 1e6:.0f} us; stock ORT and PyTorch timed in each "
        "ISA's worker process beside its library, samples alternating at 1 thread. Inputs standard normal; PyTorch "
        "calls as in the default table.",
    ]
    return "\n".join(lines) + "\n", ok_all
