"""--scaling and --spread: the library alone in its worker processes, many short interleaved rounds."""

from __future__ import annotations

import statistics
import sys

import numpy as np

from onnx_pools.bench.cases import Case, build_model, make_input, small_shape
from onnx_pools.bench.timing import settle_pool_threads
from onnx_pools.bench.workers import IsaWorker, worker_setup

__all__ = ["SCALING_ROUNDS", "SPREAD_ROUNDS", "scaling_table", "spread_table"]

SCALING_ROUNDS = 40  # --scaling: rounds of a few runs each, every thread count of every ISA in each round
SCALING_TARGET_S = 0.02  # seconds of runs per (ISA, thread count) in each round (see scaling_table)
SCALING_RUNS = 3
SPREAD_ROUNDS = 40  # --spread: rounds, each running every configuration of a shape on every ISA in turn
SMALL_ROUNDS = 3  # --small: a smoke test of the mode


def scaling_table(
    cases: list[Case], thread_counts: list[int], workers: list[IsaWorker], rng: np.random.Generator, small: bool
) -> tuple[str, bool]:
    """(markdown, every row ran the library's kernel): the library's own scaling from 1 to t threads for the
    compute-bound windowed cases (LpPool, QLinearAveragePool), each ISA timed alone: no stock or torch engine in
    the rounds, whose idle pool threads could take a core, and SCALING_ROUNDS rounds, because a ratio of two
    medians of 5 rounds scatters ±15% on a shared machine. Each turn runs for SCALING_TARGET_S and a
    multi-threaded one is followed by a wait until its spinning pool threads have stopped (they would take a core
    from the next turn). Reports the median times and their ratio, and the quartiles of the per-round ratios."""
    lines = [
        "| case | ISA | threads | lib ms (1 thread) | lib ms | scaling | per-round scaling, quartiles | kernel ran |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rounds = SMALL_ROUNDS if small else SCALING_ROUNDS
    ok_all = True
    for c in cases:
        if c.op not in ("LpPool", "QLinearAveragePool") or c.label.startswith("tiny"):
            continue
        shape = small_shape(c.shape) if small else c.shape
        print(f"  {c.name(shape)}: scaling ...", file=sys.stderr, flush=True)
        x = make_input(c, shape, rng)
        model = build_model(c, shape)
        for w in workers:
            worker_setup(w, model, x, thread_counts)
        samples: dict[tuple[str, int], list[float]] = {(str(w.isa), t): [] for w in workers for t in thread_counts}
        per_round: dict[tuple[str, int], list[float]] = {key: [] for key in samples}
        ok = {str(w.isa): True for w in workers}
        for _ in range(rounds):
            for w in workers:
                for t in thread_counts:
                    got, ran = w.time(c.op, t, SCALING_TARGET_S, SCALING_RUNS, 0.0)
                    ts = got["lib"]
                    ok[str(w.isa)] &= ran["lib"]
                    samples[(str(w.isa), t)] += ts
                    per_round[(str(w.isa), t)].append(statistics.median(ts))
                    if t > 1:
                        settle_pool_threads([w.process.pid for w in workers])
        for w in workers:
            w.call("clear")
            isa = str(w.isa)
            one = statistics.median(samples[(isa, 1)]) * 1e3
            for t in thread_counts:
                if t == 1:
                    continue
                ms = statistics.median(samples[(isa, t)]) * 1e3
                ratios = sorted(a / b for a, b in zip(per_round[(isa, 1)], per_round[(isa, t)]))
                q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
                lines.append(
                    f"| {c.name(shape)} | {isa} | {t} | {one:.3f} | {ms:.3f} | {one / ms:.2f} | {q1:.2f}-{q3:.2f} "
                    f"| {'yes' if ok[isa] else 'NO'} |"
                )
                ok_all &= ok[isa]
    return "\n".join(lines) + "\n", ok_all


def spread_table(
    cases: list[Case], workers: list[IsaWorker], rng: np.random.Generator, small: bool
) -> tuple[str, bool]:
    """(markdown, every row ran the library's kernel): the QLinearAveragePool configurations of one shape (u8 /
    s8, distinct / equal scales, count_include_pad 0 / 1) on the library alone, 1 thread, each ISA, every
    configuration in each of SPREAD_ROUNDS rounds: how much slower the slowest is than the fastest. (Rows of the
    default table are timed minutes apart, and on a shared host a stretch of load moves single rows by more than
    this spread.) Reports each configuration's median time and its ratio to the fastest of its shape and ISA."""

    def configuration(c: Case) -> str:  # "u8 NCHW distinct cip0" of the case's label
        return c.label.replace("QLinearAveragePool 3x3 pad1 ", "")

    groups: dict[tuple[str, tuple[int, ...]], list[Case]] = {}
    for c in cases:
        if c.op == "QLinearAveragePool" and not c.label.startswith("tiny"):
            shape = small_shape(c.shape) if small else c.shape
            layout = "NHWC" if c.attrs.get("channels_last") else "NCHW"
            groups.setdefault((layout, tuple(shape)), []).append(c)
    lines = [
        "| layout, shape | ISA | configuration | lib ms | vs the fastest | kernel ran |",
        "|---|---|---|---|---|---|",
    ]
    rounds = SMALL_ROUNDS if small else SPREAD_ROUNDS
    summary, ok_all = [], True
    for (layout, shape), members in groups.items():
        print(f"  QLinearAveragePool {layout} {'x'.join(map(str, shape))}: spread ...", file=sys.stderr, flush=True)
        for k, c in enumerate(members):
            x, model = make_input(c, shape, rng), build_model(c, shape)
            for w in workers:
                worker_setup(w, model, x, [1], key=(k,))
        samples: dict[tuple[str, int], list[float]] = {
            (str(w.isa), k): [] for w in workers for k in range(len(members))
        }
        ok = {str(w.isa): True for w in workers}
        for _ in range(rounds):
            for w in workers:
                for k, c in enumerate(members):
                    got, ran = w.time(c.op, 1, SCALING_TARGET_S, SCALING_RUNS, 0.0, k)
                    ok[str(w.isa)] &= ran["lib"]
                    samples[(str(w.isa), k)] += got["lib"]
        for w in workers:
            w.call("clear")
            isa = str(w.isa)
            ms = [statistics.median(samples[(isa, k)]) * 1e3 for k in range(len(members))]
            fastest = min(ms)
            for c, m in zip(members, ms):
                config = configuration(c).replace(f" {layout}", "")
                lines.append(
                    f"| {layout} {'x'.join(map(str, shape))} | {isa} | {config} | {m:.3f} | {m / fastest:.2f} "
                    f"| {'yes' if ok[isa] else 'NO'} |"
                )
            slowest = configuration(members[ms.index(max(ms))])
            summary.append(f"{layout} {isa}: slowest / fastest {max(ms) / fastest:.2f} ({slowest})")
            ok_all &= ok[isa]
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {line}" for line in summary) + "\n", ok_all
