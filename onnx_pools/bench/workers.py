"""Timing workers: one process per instruction set (ONNX_POOLS_ISA forced when it loads the library), and with
--baseline one more per instruction set running another build of the library, so that every path and build is
timed in the same interleaved rounds. Run as `python -m onnx_pools.bench.workers` by IsaWorker; messages are
pickles on stdin / stdout."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from typing import Any, Callable, Union

import numpy as np

import onnx_pools
from onnx_pools.bench.engines import bound_runner, ort_session, python_path_env, torch_module
from onnx_pools.bench.timing import SPIN_SETTLE_S, time_runs

__all__ = ["ISA_ORDER", "IsaWorker", "Runner", "engine_of", "start_workers", "stop_all", "time_interleaved"]

ISA_ORDER = ["avx512", "avx2", "neon", "portable"]


def _serve() -> int:
    """The worker's loop: builds library sessions for the cases the parent sends and times them when asked."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply stream

    def send(value: Any) -> None:
        pickle.dump(value, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()

    runners: dict[tuple[Any, ...], Callable[[], Any]] = {}
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
            outputs = {}
            for t in threads:
                run, y = bound_runner(ort_session(model, True, t), x)
                run()
                runners[(*key, t)] = run
                outputs[t] = y
            send(outputs)
        elif kind == "time":
            _, op, t, target, min_runs, sample_s, *key = msg
            before = onnx_pools.call_counts()[op]
            samples, calls = time_runs(runners[(*key, t)], target, min_runs, sample_s=sample_s)
            send((samples, onnx_pools.call_counts()[op] - before == calls))
        elif kind == "clear":
            runners.clear()
            send(None)
        else:
            return 0


class IsaWorker:
    """A worker process with ONNX_POOLS_ISA=isa; with `library`, that build of the library instead of the one this
    process loaded (python_path_env)."""

    def __init__(self, isa: str, library: str | None = None) -> None:
        env = dict(os.environ, ONNX_POOLS_ISA=isa)
        self.baseline = library is not None
        if library is not None:
            env["ONNX_POOLS_LIBRARY"] = os.path.abspath(library)
        else:
            env.pop("ONNX_POOLS_LIBRARY", None)
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

    def stop(self) -> None:
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        finally:
            self.process.wait(timeout=30)


def start_workers(requested: list[str], baseline: str | None = None) -> list[IsaWorker]:
    """One worker per requested ISA the CPU runs (in ISA_ORDER), and with `baseline` (another build of the library)
    a second one per ISA running that build; ISAs the CPU lacks are reported and left out."""
    started = []
    for isa in sorted(set(requested), key=lambda i: ISA_ORDER.index(i) if i in ISA_ORDER else 99):
        started.append(IsaWorker(isa))
        if baseline:
            started.append(IsaWorker(isa, baseline))
    workers = []
    for w in started:
        w.isa = w.call("isa")  # the dispatcher never picks a path the CPU lacks: it falls back instead
        if w.isa != w.requested:
            if not w.baseline:
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


def engine_of(worker: IsaWorker) -> str:
    """The worker's engine name in the timing tables: its ISA, "baseline:ISA" for the baseline build."""
    return ("baseline:" if worker.baseline else "") + str(worker.isa)


Runner = Union[IsaWorker, Callable[[], Any]]


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
    `per_round` seconds and at least `runs` runs in each of `rounds` rounds, in turn; the workers' sessions are
    cleared afterwards."""
    torch = torch_module() if any(engine == "torch" for engine, _, _ in runners) else None
    samples: dict[tuple[str, int], list[float]] = {(e, t): [] for e, t, _ in runners}
    kernel_ok = {engine_of(w): True for w in workers}
    old_threads = torch.get_num_threads() if torch is not None else None
    try:
        for _ in range(rounds):
            for engine, t, fn in runners:
                if isinstance(fn, IsaWorker):
                    ts, ok = fn.call("time", op, t, per_round, runs, sample_s)
                    kernel_ok[engine] &= ok
                else:
                    if engine == "torch" and torch is not None:
                        torch.set_num_threads(t)
                    ts, _ = time_runs(fn, per_round, runs, sample_s=sample_s)
                samples[(engine, t)] += ts
                if t > 1 or engine == "openvino":
                    time.sleep(SPIN_SETTLE_S)
    finally:
        if torch is not None:
            torch.set_num_threads(old_threads)
    for w in workers:
        w.call("clear")
    return samples, kernel_ok


if __name__ == "__main__":
    sys.exit(_serve())
