"""The benchmark's one timing loop: every timed thing of onnx_pools.bench (and of the command line's demo) goes
through time_runs."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

__all__ = ["SPIN_SETTLE_S", "median_time", "time_runs"]

# After a multi-threaded engine, its idle pool threads (ORT's and OpenMP's) keep spinning for a while; in another
# process they would take a core from the next engine timed. A pause lets them go to sleep first.
SPIN_SETTLE_S = 0.02


def time_runs(
    fn: Callable[[], Any],
    target_s: float = 0.15,
    min_runs: int = 5,
    max_runs: int = 5000,
    sample_s: float = 0.0,
    runs: int | None = None,
    warmup: int = 1,
) -> tuple[list[float], int]:
    """(seconds of each sample, calls of fn made). `warmup` untimed runs first (the last of them, when timed
    alone, sizes the samples); then the samples: `runs` of them when given, else as many as take about
    `target_s` (at least min_runs, at most max_runs). A sample is one run, or with `sample_s` the mean of as many
    back-to-back runs as take about that long (runs of microseconds, where a single run is mostly the clock and
    a preemption would hit one engine alone)."""
    for _ in range(warmup - 1):
        fn()
    first = 1e-7
    if warmup > 0:
        t0 = time.perf_counter()
        fn()
        first = max(time.perf_counter() - t0, 1e-7)
    burst = max(1, round(sample_s / first)) if sample_s else 1
    n = runs if runs is not None else int(min(max_runs, max(min_runs, round(target_s / (first * burst)))))
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        samples.append((time.perf_counter() - t0) / burst)
    return samples, n * burst + warmup


def median_time(fn: Callable[[], Any], target_s: float = 0.15, min_runs: int = 5, max_runs: int = 200) -> float:
    """Median seconds of a run of fn, after a warm-up run (time_runs)."""
    samples, _ = time_runs(fn, target_s, min_runs, max_runs, warmup=2)
    return statistics.median(samples)
