"""The benchmark's one timing loop: every timed thing of onnx_pools.bench (and of the command line's demo) goes
through time_alternating (time_runs: of one function)."""

from __future__ import annotations

import gc
import os
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any, Callable

__all__ = ["SPIN_SETTLE_S", "median_time", "settle_pool_threads", "time_alternating", "time_runs"]

# After a multi-threaded engine, its idle pool threads (ORT's, OpenMP's, TBB's) keep spinning for a while (an ORT
# session's, by default, 80-90 ms on a 2-vCPU Linux host: engines.short_spin shortens it); the next engine timed
# would share its cores with them. settle_pool_threads waits until they have stopped; where /proc is missing, a
# pause of this length stands in.
SPIN_SETTLE_S = 0.02
# Threads count as idle when, together, they ran less than this share of a polling interval.
_IDLE_SHARE = 0.1
_POLL_S = 0.002


def _thread_run_ns(pids: list[str], caller: int) -> int:
    """Nanoseconds run so far by every thread of `pids` except the caller's thread."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            if int(tid) == caller:
                continue
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total


def settle_pool_threads(children: Sequence[int] = (), timeout_s: float = 0.3) -> float:
    """Wait until no other thread of this process or of the processes `children` (the benchmark's workers) runs
    (spinning pool threads have gone to sleep), at most `timeout_s`; the seconds waited. The caller's own thread is
    not counted."""
    t0 = time.perf_counter()
    if not os.path.exists("/proc/self/schedstat"):
        time.sleep(SPIN_SETTLE_S)
        return SPIN_SETTLE_S
    pids, caller = [str(os.getpid()), *map(str, children)], threading.get_native_id()
    before = _thread_run_ns(pids, caller)
    while time.perf_counter() - t0 < timeout_s:
        time.sleep(_POLL_S)
        now = _thread_run_ns(pids, caller)
        if now - before < _IDLE_SHARE * _POLL_S * 1e9:
            break
        before = now
    return time.perf_counter() - t0


def time_runs(
    fn: Callable[[], Any],
    target_s: float = 0.15,
    min_runs: int = 5,
    max_runs: int = 5000,
    sample_s: float = 0.0,
    runs: int | None = None,
    warmup: int = 1,
    warmup_s: float = 0.0,
) -> tuple[list[float], int]:
    """(seconds of each sample, calls of fn made). `warmup` untimed runs first (the last of them, when timed
    alone, sizes the samples); then the samples: `runs` of them when given, else as many as take about
    `target_s` (at least min_runs, at most max_runs). A sample is one run, or with `sample_s` the mean of as many
    back-to-back runs as take about that long (runs of microseconds, where a single run is mostly the clock and
    a preemption would hit one engine alone)."""
    samples, calls = time_alternating([fn], target_s, min_runs, max_runs, sample_s, runs, warmup, warmup_s=warmup_s)
    return samples[0], calls[0]


def time_alternating(
    fns: Sequence[Callable[[], Any]],
    target_s: float = 0.15,
    min_runs: int = 5,
    max_runs: int = 5000,
    sample_s: float = 0.0,
    runs: int | None = None,
    warmup: int = 1,
    start: int = 0,
    warmup_s: float = 0.0,
    warm_each: bool = False,
) -> tuple[list[list[float]], list[int]]:
    """time_runs of several functions whose samples alternate (a sample of each in turn, the order rotating), so
    that a slow stretch of a shared machine hits them alike and sample i of each is comparable: (samples per
    function, calls per function). `target_s` is the time of all functions' samples together; `start`: the
    function whose sample comes first (a caller timing in short calls changes it from call to call); `warmup_s`: the
    warm-up runs of each function last at least this long (after another process ran, the first few hundred
    microseconds of runs are slower: caches, branch predictors, a core waking up); `warm_each`: an untimed run
    right before each burst, so that every sample is timed on the data its own function just read (cache-resident
    inputs: the function before, another engine, evicts them, and a burst of one run would then be timed cold)."""
    # no cyclic garbage collection inside the timed loop (as timeit): a collection in a process holding torch's and
    # OpenVINO's objects takes milliseconds and would land on whichever function happened to allocate
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _alternate(fns, target_s, min_runs, max_runs, sample_s, runs, warmup, start, warmup_s, warm_each)
    finally:
        if collecting:
            gc.enable()


def _alternate(
    fns: Sequence[Callable[[], Any]],
    target_s: float,
    min_runs: int,
    max_runs: int,
    sample_s: float,
    runs: int | None,
    warmup: int,
    start: int,
    warmup_s: float,
    warm_each: bool,
) -> tuple[list[list[float]], list[int]]:
    firsts, warmups = [], []
    for fn in fns:
        for _ in range(warmup - 1):
            fn()
        extra, until = 0, time.perf_counter() + warmup_s
        while time.perf_counter() < until:
            fn()
            extra += 1
        warmups.append(warmup + extra)
        first = 1e-7
        if warmup > 0:
            t0 = time.perf_counter()
            fn()
            first = max(time.perf_counter() - t0, 1e-7)
        firsts.append(first)
    # One burst length for all: the first run after another function is the slow one of a burst, and a function
    # whose timed warm-up run happened to be slow would get shorter bursts, paying it over fewer runs.
    burst = max(1, round(sample_s / max(firsts))) if sample_s else 1
    bursts = [(burst, first) for first in firsts]
    per_sample = sum(burst * first for burst, first in bursts)
    n = runs if runs is not None else int(min(max_runs, max(min_runs, round(target_s / per_sample))))
    samples: list[list[float]] = [[] for _ in fns]
    for i in range(start, start + n):
        for k in _sample_order(i, len(fns)):
            fn, burst = fns[k], bursts[k][0]
            if warm_each:
                fn()
            t0 = time.perf_counter()
            for _ in range(burst):
                fn()
            samples[k].append((time.perf_counter() - t0) / burst)
    return samples, [n * (burst + warm_each) + w for (burst, _), w in zip(bursts, warmups)]


def _sample_order(i: int, count: int) -> list[int]:
    """The order of the functions in sample i: it rotates from sample to sample, so that a function run right
    after a heavier one (its caches evicted) is not always the same one; with three or more functions every other
    cycle of rotations runs in reverse, since a rotation keeps who follows whom (function k would always follow
    function k - 1)."""
    order = [*range(i % count, count), *range(i % count)]
    return order[::-1] if count > 2 and (i // count) % 2 else order


def median_time(fn: Callable[[], Any], target_s: float = 0.15, min_runs: int = 5, max_runs: int = 200) -> float:
    """Median seconds of a run of fn, after a warm-up run (time_runs)."""
    samples, _ = time_runs(fn, target_s, min_runs, max_runs, warmup=2)
    return statistics.median(samples)
