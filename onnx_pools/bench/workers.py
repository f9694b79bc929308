"""Timing workers: one process per instruction set (ONNX_POOLS_ISA forced when it loads the library), so that every
path is timed in the same interleaved rounds. With --baseline the worker also runs another build of the library
(ONNX_POOLS_BASELINE) in the same process, its samples alternating with the library's one by one: a comparison of
two builds that neither the load of other processes nor one process's memory layout tilts. Run as
`python -m onnx_pools.bench.workers` by IsaWorker; messages are pickles on stdin / stdout."""

from __future__ import annotations

import ctypes
import functools
import os
import pickle
import subprocess
import sys
from typing import Any, Callable, Union

import numpy as np

import onnx_pools
from onnx_pools.bench.engines import bound_runner, ort_session, python_path_env, torch_module
from onnx_pools.bench.timing import settle_pool_threads, time_alternating, time_runs

__all__ = [
    "ISA_ORDER",
    "IsaWorker",
    "Runner",
    "engine_of",
    "start_workers",
    "stop_all",
    "time_interleaved",
    "worker_outputs",
]

ISA_ORDER = ["avx512", "avx2", "neon", "portable"]
TURN_WARMUP_S = 1e-3


def _serve() -> int:
    """The worker's loop: builds library sessions for the cases the parent sends and times them when asked."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply stream

    def send(value: Any) -> None:
        pickle.dump(value, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()

    baseline = os.environ.get("ONNX_POOLS_BASELINE")
    # The builds' counters: ctypes gets the instance ORT loaded from the same file
    counters = [_call_counter(os.path.realpath(path)) for path in (onnx_pools.get_library_path(), baseline) if path]
    runners: dict[tuple[Any, ...], list[Callable[[], Any]]] = {}
    turns = 0
    while True:
        try:
            msg = pickle.load(requests)
        except EOFError:
            return 0
        kind = msg[0]
        if kind == "isa":
            send(onnx_pools.active_isa())
        elif kind == "setup":  # (a key: kept beside the sessions of other keys, for --spread)
            _, model, x, threads, *key = msg
            # An unpickled array lives in the pickle's buffer, which numpy did not allocate: it gets no transparent
            # huge pages, where the parent's arrays (stock ORT's, PyTorch's, OpenVINO's and the ceiling's input)
            # do, and a stream over 4 KiB pages reads markedly slower. A copy by numpy reads like theirs.
            x = np.array(x, copy=True)
            if not key:
                runners.clear()
            outputs: dict[tuple[str, int], np.ndarray] = {}
            for t in threads:
                runners[(*key, t)] = []
                for build in ("lib", "baseline") if baseline else ("lib",):
                    run, outputs[(build, t)] = bound_runner(
                        ort_session(model, True, t, baseline if build == "baseline" else None), x
                    )
                    runners[(*key, t)].append(run)
            send(outputs)
        elif kind == "time":  # [the library's samples, the baseline's], each with "its kernel ran every time"
            _, op, t, target, min_runs, sample_s, *key = msg
            builds = runners[(*key, t)]
            before = [count(op) for count in counters]
            # each call starts with the other build: the first samples after the parent's engines ran are slower
            turns += 1
            samples, calls = time_alternating(
                builds,
                target * len(builds),
                min_runs,
                sample_s=sample_s,
                start=turns,
                warmup_s=_turn_warmup_s(sample_s),
            )
            # with the library itself as the baseline the two builds share one counter: it counts both's runs
            ran = [
                count(op) - b == sum(c for other, c in zip(counters, calls) if other is count)
                for count, b in zip(counters, before)
            ]
            send(list(zip(samples, ran)))
        elif kind == "clear":
            runners.clear()
            send(None)
        else:
            return 0


@functools.cache
def _call_counter(path: str) -> Callable[[str], int]:
    """The call counter of the build of the library at `path` (a real path), by op name (one function per build)."""
    lib = ctypes.CDLL(path)
    lib.onnx_pools_op_name.restype, lib.onnx_pools_op_name.argtypes = ctypes.c_char_p, [ctypes.c_int]
    lib.onnx_pools_call_count.restype, lib.onnx_pools_call_count.argtypes = ctypes.c_uint64, [ctypes.c_int]
    index = {lib.onnx_pools_op_name(i).decode(): i for i in range(lib.onnx_pools_op_count())}
    return lambda op: int(lib.onnx_pools_call_count(index[op]))


class IsaWorker:
    """A worker process with ONNX_POOLS_ISA=isa running the library this process loaded (python_path_env); with
    `baseline`, that other build too, in the same process."""

    def __init__(self, isa: str, baseline: str | None = None) -> None:
        env = dict(os.environ, ONNX_POOLS_ISA=isa)
        env.pop("ONNX_POOLS_LIBRARY", None)
        env.pop("ONNX_POOLS_BASELINE", None)
        if baseline is not None:
            env["ONNX_POOLS_BASELINE"] = os.path.abspath(baseline)
        self.baseline = baseline is not None
        self.process = subprocess.Popen(
            [sys.executable, "-m", "onnx_pools.bench.workers"],
            env=python_path_env(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.requested = isa
        self.isa: str | None = None  # asked by start_workers once every worker has started (side by side)

    def call(self, *msg: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        pickle.dump(msg, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.flush()
        try:
            return pickle.load(self.process.stdout)
        except EOFError:
            raise RuntimeError(f"the benchmark's worker process exited (code {self.process.wait()})") from None

    def time(self, op: str, threads: int, target_s: float, runs: int, sample_s: float, *key: Any) -> list[Any]:
        """[(the library's samples, its kernel ran every time)] and with a baseline the same of the baseline
        build, their samples taken in turn (time_alternating)."""
        return list(self.call("time", op, threads, target_s, runs, sample_s, *key))

    def stop(self) -> None:
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        finally:
            self.process.wait(timeout=30)


def start_workers(requested: list[str], baseline: str | None = None) -> list[IsaWorker]:
    """One worker per requested ISA the CPU runs (in ISA_ORDER), each also running `baseline` (another build of
    the library) when given; ISAs the CPU lacks are reported and left out."""
    started = [
        IsaWorker(isa, baseline)
        for isa in sorted(set(requested), key=lambda i: ISA_ORDER.index(i) if i in ISA_ORDER else 99)
    ]
    workers = []
    for w in started:
        w.isa = w.call("isa")  # the dispatcher never picks a path the CPU lacks: it falls back instead
        if w.isa != w.requested:
            print(
                f"  ISA {w.requested}: not available on this CPU (the library chose {w.isa}); left out",
                file=sys.stderr,
            )
            w.stop()
            continue
        workers.append(w)
    return workers


def stop_all(workers: list[IsaWorker]) -> None:
    for w in workers:
        w.stop()


def engine_of(worker: IsaWorker, build: str = "lib") -> str:
    """The engine name in the timing tables of the worker's library (its ISA) or of its baseline build
    ("baseline:ISA")."""
    return ("baseline:" if build == "baseline" else "") + str(worker.isa)


def worker_outputs(worker: IsaWorker, model: bytes, x: np.ndarray, threads: list[int]) -> dict[tuple[str, int], Any]:
    """Sets up the worker's sessions of the model (both builds with a baseline): {(engine, threads): output}."""
    return {(engine_of(worker, build), t): y for (build, t), y in worker.call("setup", model, x, threads).items()}


Runner = Union[IsaWorker, Callable[[], Any]]


def _turn_warmup_s(sample_s: float) -> float:
    """Untimed runs at the start of each turn of microsecond runs (timed in bursts of `sample_s`): a turn of them
    is a few bursts, and the runs right after another engine's turn are slower (for whoever comes first in a
    round, 0.85x of its later turns' speed)."""
    return TURN_WARMUP_S if sample_s else 0.0


def time_interleaved(
    runners: list[tuple[str, int, Runner]],
    op: str,
    rounds: int,
    per_round: float,
    runs: int,
    sample_s: float,
    workers: list[IsaWorker],
) -> tuple[dict[tuple[str, int], list[float]], dict[str, bool]]:
    """(samples in seconds per (engine, threads), the library's kernel ran on each worker's engine): every runner
    (a worker, timed in its process, or a callable: stock ORT, torch with its thread count set, ...) timed for
    `per_round` seconds and at least `runs` runs in each of `rounds` rounds, in turn; a worker's baseline build in
    its turn, sample for sample with the library (sample i of each comparable); the workers' sessions are
    cleared afterwards."""
    torch = torch_module() if any(engine == "torch" for engine, _, _ in runners) else None
    samples: dict[tuple[str, int], list[float]] = {(e, t): [] for e, t, _ in runners}
    kernel_ok = {engine_of(w, b): True for w in workers for b in ("lib", "baseline")[: 1 + w.baseline]}
    old_threads = torch.get_num_threads() if torch is not None else None
    try:
        for _ in range(rounds):
            for engine, t, fn in runners:
                if isinstance(fn, IsaWorker):
                    (ts, ok), *baseline = fn.time(op, t, per_round, runs, sample_s)
                    kernel_ok[engine] &= ok
                    for base_ts, base_ok in baseline:
                        samples.setdefault((engine_of(fn, "baseline"), t), []).extend(base_ts)
                        kernel_ok[engine_of(fn, "baseline")] &= base_ok
                else:
                    if engine == "torch" and torch is not None:
                        torch.set_num_threads(t)
                    ts, _ = time_runs(fn, per_round, runs, sample_s=sample_s, warmup_s=_turn_warmup_s(sample_s))
                samples[(engine, t)] += ts
                if t > 1 or engine == "openvino":
                    settle_pool_threads([w.process.pid for w in workers])
    finally:
        if torch is not None:
            torch.set_num_threads(old_threads)
    for w in workers:
        w.call("clear")
    return samples, kernel_ok


if __name__ == "__main__":
    sys.exit(_serve())
