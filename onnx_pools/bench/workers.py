"""Timing workers: one process per instruction set (ONNX_POOLS_ISA forced when it loads the library), so that every
path is timed in the same interleaved rounds. The engines a row compares the library with (stock ONNX Runtime,
PyTorch, OpenVINO) are timed in the same worker process, in the same turn: at 1 thread their samples alternate with
the library's one by one, so that a process's own conditions (the CPU it was woken on, its memory layout, the load of
other processes at that moment) hit them alike. With --baseline the worker also runs another build of the library
(ONNX_POOLS_BASELINE) in the same process, its samples alternating with the library's one by one. Run as
`python -m onnx_pools.bench.workers` by IsaWorker; messages are pickles on stdin / stdout."""

from __future__ import annotations

import ctypes
import functools
import os
import pickle
import subprocess
import sys
from dataclasses import replace
from typing import Any, Callable, Union

import numpy as np

import onnx_pools
from onnx_pools.bench.cases import Case, torch_call_name, with_torch_call
from onnx_pools.bench.engines import (
    bound_runner,
    openvino_module,
    openvino_runner,
    ort_session,
    python_path_env,
    torch_module,
)
from onnx_pools.bench.timing import settle_pool_threads, time_alternating, time_runs

__all__ = [
    "ISA_ORDER",
    "IsaWorker",
    "Runner",
    "engine_of",
    "start_workers",
    "stop_all",
    "time_interleaved",
    "worker_setup",
]

ISA_ORDER = ["avx512", "avx2", "neon", "portable"]
TURN_WARMUP_S = 1e-3


def _serve() -> int:
    """The worker's loop: builds the sessions (and PyTorch calls, OpenVINO's compiled models) of the cases the
    parent sends and times them when asked. torch and openvino are imported on the first case that asks for them."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply stream

    def send(value: Any) -> None:
        pickle.dump(value, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()

    baseline = os.environ.get("ONNX_POOLS_BASELINE")
    # The builds' counters: ctypes gets the instance ORT loaded from the same file
    counters = [_call_counter(os.path.realpath(path)) for path in (onnx_pools.get_library_path(), baseline) if path]
    builds = ["lib", "baseline"] if baseline else ["lib"]
    # per (key, threads): the engines' run functions, by engine ("lib", "baseline", then the others asked for)
    runners: dict[tuple[Any, ...], dict[str, Callable[[], Any]]] = {}
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
            _, model, x, threads, others, *key = msg
            # An unpickled array lives in the pickle's buffer, which numpy did not allocate: it gets no transparent
            # huge pages, where arrays numpy allocates do, and a stream over 4 KiB pages reads markedly slower
            # (the parent's read ceiling reads an array numpy allocated). A copy by numpy.
            x = np.array(x, copy=True)
            if not key:
                runners.clear()
            outputs: dict[tuple[str, int], np.ndarray] = {}
            errors: dict[tuple[str, int], str] = {}
            for t in threads:
                runners[(*key, t)] = engines = {}
                for build in builds:
                    engines[build], outputs[(build, t)] = bound_runner(
                        ort_session(model, True, t, baseline if build == "baseline" else None), x
                    )
                if others.get("stock"):
                    try:
                        engines["stock"], outputs[("stock", t)] = bound_runner(ort_session(model, False, t), x)
                    except Exception as e:  # e.g. a type stock ORT has no kernel for
                        errors[("stock", t)] = str(e).splitlines()[0][:200]
                if others.get("torch") and torch_module() is not None:
                    case, name = others["torch"]
                    case = with_torch_call(case, name)
                    assert case.torch_call is not None
                    engines["torch"] = case.torch_call(case, x)
                if others.get("openvino") and openvino_module() is not None:
                    try:  # compiled once per case and thread count, run in every turn
                        engines["openvino"], outputs[("openvino", t)] = openvino_runner(model, x, t)
                    except Exception as e:  # e.g. an op OpenVINO's ONNX reader does not know
                        errors[("openvino", t)] = str(e).splitlines()[0][:200]
            send((outputs, errors))
        elif kind == "time":  # ({engine: samples}, {build: its kernel ran every time})
            _, op, t, target, min_runs, sample_s, warm_each, *key = msg
            engines = runners[(*key, t)]
            before = [count(op) for count in counters]
            turns += 1
            samples, calls = _time_turn(engines, builds, t, target, min_runs, sample_s, turns, warm_each)
            # with the library itself as the baseline the two builds share one counter: it counts both's runs
            ran = {
                build: count(op) - b == sum(calls[other] for other, c in zip(builds, counters) if c is count)
                for build, count, b in zip(builds, counters, before)
            }
            send((samples, ran))
        elif kind == "clear":
            runners.clear()
            send(None)
        else:
            return 0


def _time_turn(
    engines: dict[str, Callable[[], Any]],
    builds: list[str],
    threads: int,
    target: float,
    min_runs: int,
    sample_s: float,
    turn: int,
    warm_each: bool = False,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """A worker's turn of a round: (samples per engine, calls per engine), every engine timed for about `target`
    seconds and at least `min_runs` samples. At 1 thread all engines alternate sample by sample (OpenVINO's
    single-thread inference runs on the calling thread, and leaves no thread spinning); at more threads the
    library's builds alternate with each other, and each other engine (stock ORT, PyTorch, OpenVINO) takes a turn of
    its own, followed by a wait until its pool threads stop spinning (they would take a core from the next). Each
    call starts with another engine, `turn` rotating it; `warm_each`: time_alternating's (cache-resident inputs)."""
    torch = torch_module() if "torch" in engines else None
    if torch is not None:
        torch.set_num_threads(threads)
    groups = [list(engines)] if threads == 1 else [builds, *([e] for e in engines if e not in builds)]
    groups = groups[turn % len(groups) :] + groups[: turn % len(groups)]
    samples: dict[str, list[float]] = {}
    calls: dict[str, int] = {}
    for group in groups:
        got, made = time_alternating(
            [engines[e] for e in group],
            target * len(group),
            min_runs,
            sample_s=sample_s,
            start=turn,
            warmup_s=_turn_warmup_s(sample_s),
            warm_each=warm_each,
        )
        samples.update(zip(group, got))
        calls.update(zip(group, made))
        if threads > 1:
            settle_pool_threads()
    return samples, calls


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

    def time(
        self, op: str, threads: int, target_s: float, runs: int, sample_s: float, *key: Any, warm_each: bool = False
    ) -> tuple[dict[str, list[float]], dict[str, bool]]:
        """A turn of the worker's engines of the sessions set up for `key` at `threads` (_time_turn): ({engine:
        samples}, {"lib" (and "baseline"): its kernel ran every time})."""
        samples, ran = self.call("time", op, threads, target_s, runs, sample_s, warm_each, *key)
        return samples, ran

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


def engine_of(worker: IsaWorker, engine: str = "lib") -> str:
    """The engine name in the timing tables of an engine of the worker: its library (its ISA), or "baseline:ISA",
    "stock:ISA", "torch:ISA", "openvino:ISA" (that build of the library, stock ORT, PyTorch, OpenVINO, timed in the
    worker's process)."""
    return ("" if engine == "lib" else engine + ":") + str(worker.isa)


def worker_setup(
    worker: IsaWorker,
    model: bytes,
    x: np.ndarray,
    threads: list[int],
    stock: bool = False,
    torch_case: Case | None = None,
    key: tuple[Any, ...] = (),
    openvino: bool = False,
) -> tuple[dict[tuple[str, int], Any], dict[tuple[str, int], str]]:
    """Sets up the worker's sessions of the model at each thread count: the library (both builds with a
    baseline), with `stock` a stock ORT session, with `torch_case` its PyTorch call (when torch is installed), with
    `openvino` the model compiled for OpenVINO's CPU plugin (when openvino is installed), all timed in the worker's
    turns. ({(engine, threads): output} of the ORT sessions and OpenVINO, {(engine, threads): why it could not be
    made}); `key`: kept beside the sessions of other keys (--spread), else they replace them."""
    name = torch_call_name(torch_case) if torch_case is not None else None
    others = {
        "stock": stock,
        "torch": (replace(torch_case, torch_call=None), name) if torch_case and name else None,
        "openvino": openvino,
    }
    outputs, errors = worker.call("setup", model, x, threads, others, *key)
    return (
        {(engine_of(worker, e), t): y for (e, t), y in outputs.items()},
        {(engine_of(worker, e), t): why for (e, t), why in errors.items()},
    )


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
    warm_each: bool = False,
) -> tuple[dict[tuple[str, int], list[float]], dict[str, bool]]:
    """(samples in seconds per (engine, threads), the library's kernel ran on each worker's builds): every runner
    (a worker, whose engines are timed in its process and turn: _time_turn; or a callable timed here: the read
    ceiling) timed for `per_round` seconds and at least `runs` runs in each of `rounds` rounds, in turn;
    the workers' sessions are cleared afterwards. `warm_each`: an untimed run before each burst (time_alternating)."""
    samples: dict[tuple[str, int], list[float]] = {}
    kernel_ok = {engine_of(w, b): True for w in workers for b in ("lib", "baseline")[: 1 + w.baseline]}
    for _ in range(rounds):
        for engine, t, fn in runners:
            if isinstance(fn, IsaWorker):
                got, ran = fn.time(op, t, per_round, runs, sample_s, warm_each=warm_each)
                for e, ts in got.items():
                    samples.setdefault((engine_of(fn, e), t), []).extend(ts)
                for b, ok in ran.items():
                    kernel_ok[engine_of(fn, b)] &= ok
            else:
                ts, _ = time_runs(fn, per_round, runs, sample_s=sample_s, warmup_s=_turn_warmup_s(sample_s))
                samples.setdefault((engine, t), []).extend(ts)
            if t > 1:
                settle_pool_threads([w.process.pid for w in workers])
    for w in workers:
        w.call("clear")
    return samples, kernel_ok


if __name__ == "__main__":
    sys.exit(_serve())
