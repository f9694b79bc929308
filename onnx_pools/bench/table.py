"""The default table: each case timed on the library (every ISA, in worker processes, each also timing stock ONNX
Runtime, PyTorch and OpenVINO, where installed, for its rows), at each thread count, in interleaved rounds; and the
read-bandwidth ceiling the big cases are measured against."""

from __future__ import annotations

import functools
import statistics
from typing import Any, Callable

import numpy as np

from onnx_pools.bench.cases import Case, build_model, make_input
from onnx_pools.bench.engines import bound_runner, ort_session, torch_module
from onnx_pools.bench.reference import agrees, reference
from onnx_pools.bench.timing import time_runs
from onnx_pools.bench.workers import IsaWorker, Runner, engine_of, time_interleaved, worker_setup
from onnx_pools.model_tools import max_abs_diff

__all__ = ["ROUNDS", "SMALL_BYTES", "bench_case", "compare", "markdown_table", "read_ceiling"]

ROUNDS = 15  # measurements are interleaved in rounds, so that a noisy stretch of a shared machine hits every engine
# Inputs this small run in microseconds to tens of microseconds, much of it the per-run cost of a node: each
# sample is then the mean of a burst of runs taking SMALL_SAMPLE_S, with the engines alternating in SMALL_ROUNDS
# short rounds, so that a shared machine's noise (preemptions of tens of microseconds) hits every engine alike
# instead of single runs of one engine.
SMALL_BYTES = 1 << 20
SMALL_SAMPLE_S = 300e-6
SMALL_ROUNDS = 40
CEILING_VALUES = 32 * 1024 * 1024  # float32 values of the ceiling's array: 128 MB, four times the last-level cache
SMALL_CEILING_VALUES = 1024 * 1024  # --small: 4 MB, a smoke test of the mode, not a ceiling


@functools.cache
def ceiling_array(values: int) -> np.ndarray:
    """The ceiling's array, made once: read_ceiling and every case's in-rounds ceiling read the same one."""
    return np.ones(values, dtype=np.float32)


@functools.cache
def ceiling_runner(threads: int, values: int) -> tuple[Callable[[], Any], int]:
    """(run, bytes): the library's GlobalMaxPool over the ceiling's array in 2048 channels (see read_ceiling), at
    `threads` threads; one session per thread count for the whole run (read_ceiling, then each case's rounds)."""
    a = ceiling_array(values)
    shape = (1, 2048, values // 2048)  # channels of 64 KB: far apart (MBs) several streams gained nothing
    case = Case("GlobalMaxPool f32", "GlobalMaxPool", "float32", shape)
    run, _ = bound_runner(ort_session(build_model(case, shape), True, threads), a.reshape(shape))
    return run, a.nbytes


def read_ceiling(threads: int, target: float, small: bool = False) -> dict[str, float]:
    """GB/s of plain reads of a float32 array four times the size of the last-level cache (128 MB): numpy's
    vectorised max and sum (one thread), torch's sum and amax and the library's GlobalMaxPool over 2048 channels of
    it (`threads` threads); the fastest is the ceiling. (The library reads 2-4 channels side by side: one core
    reads several concurrent streams faster than one on some CPUs, e.g. AMD EPYC.)"""
    values = SMALL_CEILING_VALUES if small else CEILING_VALUES
    a = ceiling_array(values)
    res = {}
    for name, fn in (("numpy_max_1thread", a.max), ("numpy_sum_1thread", a.sum)):
        samples, _ = time_runs(fn, target, 5)
        res[name] = a.nbytes / statistics.median(samples) / 1e9
    run, nbytes = ceiling_runner(threads, values)
    samples, _ = time_runs(run, target, 5)
    res[f"onnx_pools_max_{threads}threads"] = nbytes / statistics.median(samples) / 1e9
    torch = torch_module()
    if torch is not None:
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        ta = torch.from_numpy(a)
        for name, fn in ((f"torch_sum_{threads}threads", ta.sum), (f"torch_amax_{threads}threads", ta.amax)):
            samples, _ = time_runs(fn, target, 5)
            res[name] = a.nbytes / statistics.median(samples) / 1e9
        torch.set_num_threads(old)
    res["ceiling"] = max(res.values())
    return res


def compare(y_lib: np.ndarray, y_stock: np.ndarray) -> float:
    """max |lib - stock|: in quantization steps for integers, relative to max |stock| for floats."""
    d = max_abs_diff(y_lib, y_stock)
    if y_lib.dtype.kind in "iu" or y_lib.size == 0 or y_lib.shape != y_stock.shape:
        return d
    return d / max(float(np.max(np.abs(y_stock.astype(np.float64)))), 1e-30)


def bench_case(
    case: Case,
    shape: tuple[int, ...],
    thread_counts: list[int],
    target: float,
    min_runs: int,
    rng: np.random.Generator,
    workers: list[IsaWorker],
    small: bool = False,
) -> list[dict[str, Any]]:
    """One row per (ISA, thread count). Every engine (the library, stock ORT, torch and OpenVINO in each ISA's
    worker, the ceiling here) and thread count of the case is timed in each of ROUNDS rounds (SMALL_ROUNDS of bursts
    for small inputs), in turn; its time is the median over all its samples. A row's stock, torch and OpenVINO
    times are those of its ISA's worker; OpenVINO's output is checked against the float64 reference."""
    x = make_input(case, shape, rng)
    model = build_model(case, shape)
    base: dict[int, dict[str, Any]] = {
        t: {
            "case": case.name(shape),
            "op": case.op,
            "dtype": case.dtype,
            "shape": list(shape),
            "attrs": case.attrs,
            "threads": t,
            "bytes_read": x.nbytes,
            "torch_call": case.torch_desc or None,
        }
        for t in thread_counts
    }
    runners: list[tuple[str, int, Runner]] = [(engine_of(w), t, w) for t in thread_counts for w in workers]
    outputs: dict[tuple[str, int], np.ndarray] = {}
    setup_errors: dict[tuple[str, int], str] = {}
    for w in workers:  # the library, stock ORT, PyTorch and OpenVINO of each ISA's row, timed in its worker's process
        got, errors = worker_setup(w, model, x, thread_counts, stock=True, torch_case=case, openvino=True)
        outputs.update(got)
        setup_errors.update(errors)
    ref = reference(case, x) if any(e.startswith("openvino:") for e, _ in outputs) else None
    # The big global pools' and LpPool's targets are shares of the read ceiling, and a shared host's read speed
    # drifts: their ceiling is read again in their own rounds (the library's GlobalMaxPool over the ceiling's array)
    ceiling_bytes = None
    if (case.op.startswith("Global") or case.op == "LpPool") and x.nbytes > SMALL_BYTES:
        for t in thread_counts:
            run_ceiling, ceiling_bytes = ceiling_runner(t, SMALL_CEILING_VALUES if small else CEILING_VALUES)
            runners.append(("ceiling", t, run_ceiling))
    rounds, sample_s = (SMALL_ROUNDS, SMALL_SAMPLE_S) if x.nbytes <= SMALL_BYTES else (ROUNDS, 0.0)
    if small:
        rounds = 2
    runs = max(1, min_runs // rounds + 1)
    samples, kernel_ok = time_interleaved(runners, case.op, rounds, target / rounds, runs, sample_s, workers)
    medians = {key: statistics.median(ts) * 1e3 for key, ts in samples.items()}
    rows = []
    for w in workers:
        isa = str(w.isa)
        for t in thread_counts:
            r = dict(
                base[t],
                isa=isa,
                lib_ms=medians[(isa, t)],
                lib_runs=len(samples[(isa, t)]),
                lib_kernel_ok=kernel_ok[isa],
            )
            if ("baseline:" + isa, t) in medians:
                r["baseline_ms"] = medians[("baseline:" + isa, t)]
                # sample i of each build ran side by side in one process: the median of their ratios
                pairs = zip(samples[("baseline:" + isa, t)], samples[(isa, t)])
                r["speedup_vs_baseline"] = statistics.median(b / lib for b, lib in pairs)
                r["lib_kernel_ok"] &= kernel_ok["baseline:" + isa]
                before, after = outputs[("baseline:" + isa, t)], outputs[(isa, t)]
                r["same_as_baseline"] = before.tobytes() == after.tobytes()
            stock, openvino = (engine_of(w, "stock"), t), (engine_of(w, "openvino"), t)
            if stock in setup_errors:
                r["stock_error"] = setup_errors[stock]
            if openvino in setup_errors:
                r["openvino_error"] = setup_errors[openvino]
            if openvino in outputs and ref is not None and not agrees(case, outputs[openvino], ref):
                r["openvino_wrong"] = True
            r["stock_ms"] = medians.get(stock)
            r["torch_ms"] = medians.get((engine_of(w, "torch"), t))
            r["openvino_ms"] = medians.get(openvino)
            if ceiling_bytes is not None:
                r["ceiling_in_rounds_GBps"] = ceiling_bytes / (medians[("ceiling", t)] * 1e-3) / 1e9
            r["max_diff_vs_stock"] = compare(outputs[(isa, t)], outputs[stock]) if stock in outputs else None
            for k in ("lib", "stock", "torch", "openvino"):
                ms = r.get(f"{k}_ms")
                r[f"{k}_GBps"] = r["bytes_read"] / (ms * 1e-3) / 1e9 if ms else None
            for k in ("stock", "torch", "openvino"):
                r[f"speedup_vs_{k}"] = r[f"{k}_ms"] / r["lib_ms"] if r.get(f"{k}_ms") else None
            r["threads_speedup"] = None
            rows.append(r)
    for r in rows:  # the library's own 2-thread (or more) scaling: time at 1 thread / time at t threads
        one = next((o for o in rows if o["isa"] == r["isa"] and o["threads"] == 1), None)
        if one is not None and r["threads"] > 1:
            r["threads_speedup"] = one["lib_ms"] / r["lib_ms"]
    return rows


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _ceiling_range(results: list[dict[str, Any]]) -> str:
    """The in-rounds ceilings of the results, per thread count, as text."""
    by_threads: dict[int, list[float]] = {}
    for r in results:
        if r.get("ceiling_in_rounds_GBps"):
            by_threads.setdefault(r["threads"], []).append(r["ceiling_in_rounds_GBps"])
    if not by_threads:
        return "none in this run"
    return ", ".join(f"{min(v):.1f}-{max(v):.1f} GB/s at {t} thread(s)" for t, v in sorted(by_threads.items()))


def openvino_cell(r: dict[str, Any]) -> str:
    """OpenVINO's time, "wrong result" where its output missed the float64 reference, "fails" where it cannot
    run the model, "-" without OpenVINO."""
    if r.get("openvino_wrong"):
        return "wrong result"
    if r.get("openvino_error"):
        return "fails"
    return _f(r.get("openvino_ms"), ".3f")


COLUMNS = [
    "case",
    "ISA",
    "threads",
    "lib ms",
    "stock ms",
    "torch ms",
    "openvino ms",
    "speed-up vs stock",
    "speed-up vs torch",
    "speed-up vs openvino",
    "lib vs 1 thread",
    "lib GB/s",
    "stock GB/s",
    "lib % of ceiling",
    "lib kernel ran",
    "max diff vs stock",
]
BASELINE_COLUMNS = ["baseline ms", "speed-up vs baseline", "same bits as baseline"]


def markdown_table(ceilings: dict[int, dict[str, float]], results: list[dict[str, Any]]) -> str:
    """The default table in markdown, with its notes."""
    with_baseline = any("baseline_ms" in r for r in results)
    columns = COLUMNS + (BASELINE_COLUMNS if with_baseline else [])
    lines = []
    for t, c in sorted(ceilings.items()):
        parts = ", ".join(f"{k} {v:.1f}" for k, v in c.items() if k != "ceiling")
        lines.append(f"read-bandwidth ceiling at {t} thread(s): {c['ceiling']:.1f} GB/s ({parts})")
    lines += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in results:
        ceil = r.get("ceiling_in_rounds_GBps") or ceilings[r["threads"]]["ceiling"]
        stock = _f(r.get("stock_ms"), ".3f") if r.get("stock_ms") else "fails"
        ov_speedup = None if r.get("openvino_wrong") else r.get("speedup_vs_openvino")
        cells = [
            r["case"],
            r["isa"],
            str(r["threads"]),
            f"{r['lib_ms']:.3f}",
            stock,
            _f(r.get("torch_ms"), ".3f"),
            openvino_cell(r),
            _f(r["speedup_vs_stock"], ".2f"),
            _f(r["speedup_vs_torch"], ".2f"),
            _f(ov_speedup, ".2f"),
            _f(r.get("threads_speedup"), ".2f"),
            _f(r["lib_GBps"], ".1f"),
            _f(r["stock_GBps"], ".1f"),
            f"{100 * r['lib_GBps'] / ceil:.0f}%",
            "yes" if r["lib_kernel_ok"] else "NO",
            _f(r.get("max_diff_vs_stock"), ".2g"),
        ]
        if with_baseline:
            same = {True: "yes", False: "NO", None: "-"}[r.get("same_as_baseline")]
            cells += [_f(r.get("baseline_ms"), ".3f"), _f(r.get("speedup_vs_baseline"), ".2f"), same]
        lines.append("| " + " | ".join(cells) + " |")
    torch_calls = sorted({f"{r['case'].rsplit(' ', 1)[0]}: {r['torch_call']}" for r in results if r.get("torch_ms")})
    lines += [
        "",
        "speed-up = other time / lib time (> 1: the library is faster). GB/s = input bytes / median time. "
        "max diff vs stock: relative to max |stock| (float), in quantization steps (integers). lib % of ceiling: of "
        "the ceiling above, but for the global pools and LpPool over 1 MiB, whose ceiling (the library's "
        "GlobalMaxPool over the same array) is read again in their own rounds: " + _ceiling_range(results) + ". "
        "openvino: the same model compiled for OpenVINO's CPU plugin (INFERENCE_NUM_THREADS = threads, "
        "PERFORMANCE_HINT = LATENCY), timed in each kernel set's worker process beside the library, as stock and "
        'torch are; "wrong result" where its output misses the float64 reference.',
        "torch calls: " + ("; ".join(torch_calls) if torch_calls else "none (torch not installed)"),
    ]
    return "\n".join(lines) + "\n"
