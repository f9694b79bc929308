"""The benchmark's command line: `onnx-pools bench [options]`, `python -m onnx_pools.bench [options]`.

Modes (one or several; none: the default table):
  (default)        each case (a one-node ONNX model) timed on the library (every ISA the CPU runs, each in its own
                   worker process with ONNX_POOLS_ISA forced), stock ONNX Runtime and PyTorch (in each worker, beside
                   its library) and OpenVINO (where installed), at each thread count, in interleaved rounds; the
                   read-bandwidth ceiling
  --baseline LIB   adds another build of the library, timed on each ISA in the same process, samples alternating
  --scaling        the library's own 1 -> t thread scaling of the windowed cases, alone, in many short rounds
  --spread         each QLinearAveragePool configuration of a shape against the fastest, library only
  --memory         peak memory of one run on a 1 GiB input (the kernels' scratch), per case, ISA and thread count
  --denormals      normal vs subnormal vs underflowing inputs, library and stock ORT
  --whole-models   the bundled whole-model benchmark set: stock vs the library's ways of registering
  --qlinear-times  QLinearAveragePool per configuration: min and median of runs (with --baseline: interleaved)
  --in-cache       the global pools on 4 MB inputs (cache-resident), library vs PyTorch vs OpenVINO
  --small-planes   planes 1x1..17x17, C = 1024 and 32, global pools and LpPool 3x3, float32 and float16: the
                   library on every ISA vs stock ONNX Runtime and PyTorch
  --routes         the custom-op route vs the plugin-EP route, node for node (onnxruntime >= 1.24)
  --table          the default table, also when other modes are given
  --all            every mode above in turn
Every mode takes --small (tiny shapes, few rounds: a smoke test, not a measurement). ORT runs: intra_op_num_threads
= t, inter_op_num_threads = 1, sequential execution, IOBinding with pre-created OrtValues. Time = median of the
samples of all rounds. Exit status: 0 ok; 1 the library's kernel did not run in some row (its call counter); 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any, Callable

# numpy's OpenBLAS worker threads (none of this timing uses BLAS) take CPU from the timed thread on a small
# machine: one thread, before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import onnx_pools  # noqa: E402
from onnx_pools.bench.cases import Case, make_cases, small_shape  # noqa: E402
from onnx_pools.bench.workers import ISA_ORDER, IsaWorker, start_workers, stop_all  # noqa: E402

__all__ = ["MODES", "main"]

MODES = (
    "table",
    "scaling",
    "spread",
    "memory",
    "denormals",
    "whole_models",
    "qlinear_times",
    "in_cache",
    "small_planes",
    "routes",
)
TITLES = {
    "table": "Single-node models: the library vs stock ONNX Runtime, PyTorch and OpenVINO",
    "scaling": "The library's thread scaling (LpPool, QLinearAveragePool)",
    "spread": "QLinearAveragePool: each configuration against the fastest of its shape",
    "memory": "Peak memory of one run on a 1 GiB input",
    "denormals": "Subnormal and underflowing inputs",
    "whole_models": "Whole models: stock ONNX Runtime vs the library",
    "qlinear_times": "QLinearAveragePool per configuration",
    "in_cache": "Cache-resident inputs (4 MB): the library vs PyTorch and OpenVINO",
    "small_planes": "Small planes (1x1 to 17x17): the library vs stock ONNX Runtime and PyTorch",
    "routes": "Single-node models: the custom-op route vs the plugin-EP route",
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="onnx-pools bench",
        description=(__doc__ or "").split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    modes = ap.add_argument_group("modes (default: the table)")
    modes.add_argument("--table", action="store_true", help="the default table, also when other modes are given")
    modes.add_argument("--scaling", action="store_true", help="the library's 1 -> t thread scaling, alone")
    modes.add_argument("--spread", action="store_true", help="QLinearAveragePool configurations against the fastest")
    modes.add_argument("--memory", action="store_true", help="peak RSS above input + output of one 1 GiB run")
    modes.add_argument("--denormals", action="store_true", help="normal / subnormal / underflowing inputs")
    modes.add_argument("--whole-models", action="store_true", help="the bundled whole-model benchmark set")
    modes.add_argument("--qlinear-times", action="store_true", help="QLinearAveragePool per configuration")
    modes.add_argument("--in-cache", action="store_true", help="global pools on cache-resident 4 MB inputs")
    modes.add_argument("--small-planes", action="store_true", help="planes 1x1..17x17 vs stock and PyTorch")
    modes.add_argument("--routes", action="store_true", help="custom-op route vs plugin-EP route, node for node")
    modes.add_argument("--all", action="store_true", help="every mode, the table first")
    ap.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts (default 1,2)")
    ap.add_argument("--quick", action="store_true", help="fewer runs (about 0.2 s per measurement; 8 model rounds)")
    ap.add_argument("--small", action="store_true", help="tiny shapes and few rounds in every mode (smoke tests)")
    ap.add_argument("--cases", help="comma-separated substrings; the table's cases whose name contains one")
    ap.add_argument("--list", action="store_true", help="list the table's cases and exit")
    ap.add_argument(
        "--isa",
        default="all",
        help="comma-separated instruction sets to time the library on, each in its own process with ONNX_POOLS_ISA "
        "forced (avx512, avx2, neon, portable); default: every one this CPU runs",
    )
    ap.add_argument(
        "--baseline",
        metavar="LIB",
        help="another build of libonnx_pools.so timed on each ISA in the same process, samples alternating with the "
        "library's (the table: 'baseline ms', 'speed-up vs baseline' = median of the per-sample ratios, 'same bits as "
        "baseline'; --qlinear-times: interleaved runs)",
    )
    ap.add_argument("--json", metavar="FILE", help="write the table's results as JSON")
    ap.add_argument("--markdown", metavar="FILE", help="write the tables of the modes run, with a header, to FILE")
    ap.add_argument(
        "--readme",
        metavar="README",
        help="rewrite README's performance summary (between the perf-summary markers) from the table's results",
    )
    ap.add_argument("--dtypes", default="float32,float64,float16,bfloat16", help="--denormals: element types")
    ap.add_argument("--batch", default="1,8", help="--whole-models: batch sizes of symbolic-batch models")
    ap.add_argument("--rounds", type=int, default=30, help="--whole-models: interleaved rounds, at least (default 30)")
    ap.add_argument("--models", help="--whole-models: comma-separated substrings of model file names")
    ap.add_argument("--all-models", action="store_true", help="--whole-models: also the fixed-shape demo models")
    ap.add_argument("--profile", action="store_true", help="--whole-models: ORT's profile per session")
    ap.add_argument(
        "--engines",
        help="--whole-models: comma-separated sessions to time, stock first (default: all; stock, stock-b (a "
        "second plain session: the noise), lib, plain, lib-all, and ep with onnxruntime >= 1.24)",
    )
    return ap


class _Run:
    """One invocation: its arguments, the sections of markdown it produced, the table's results."""

    def __init__(self, args: argparse.Namespace, threads: list[int], cases: list[Case]) -> None:
        self.args = args
        self.threads = threads
        self.cases = cases
        self.requested = ISA_ORDER if args.isa == "all" else [i.strip() for i in args.isa.split(",") if i.strip()]
        self.sections: list[tuple[str, str]] = []
        self.ceilings: dict[int, dict[str, float]] = {}
        self.results: list[dict[str, Any]] = []
        self.kernel_ran = True
        self.isas_timed: list[str] = []  # the kernel sets the run's workers ran, in ISA_ORDER
        self.isas_absent: list[str] = []  # the requested ones of this architecture the CPU lacks

    def section(self, mode: str, markdown: str, kernel_ran: bool) -> None:
        self.sections.append((mode, markdown))
        self.kernel_ran &= kernel_ran
        print(f"\n### {TITLES[mode]}\n\n{markdown}", flush=True)

    def workers(self, baseline: bool) -> list[IsaWorker]:
        workers = start_workers(self.requested, self.args.baseline if baseline else None)
        if not workers:
            raise _UsageError(f"none of the ISAs {self.requested} runs here")
        timed = {w.isa for w in workers} | set(self.isas_timed)
        self.isas_timed = [i for i in ISA_ORDER if i in timed]
        self.isas_absent = [i for i in self.requested if i not in timed and i in _ARCH_ISAS.get(platform.machine(), ())]
        return workers


# The kernel sets the library builds for each architecture, beyond portable (a CPU of the architecture may lack them)
_ARCH_ISAS = {"x86_64": ("avx512", "avx2"), "AMD64": ("avx512", "avx2"), "aarch64": ("neon",), "arm64": ("neon",)}


class _UsageError(Exception):
    pass


def _table(run: _Run) -> None:
    from onnx_pools.bench.table import bench_case, markdown_table, read_ceiling

    target, min_runs = (0.2, 3) if run.args.quick or run.args.small else (1.0, 5)
    if run.args.small:
        target = 0.02
    workers = run.workers(baseline=True)
    try:
        run.ceilings = {t: read_ceiling(t, target, run.args.small) for t in run.threads}
        rng = np.random.default_rng(0)
        for c in run.cases:
            shape = small_shape(c.shape) if run.args.small else c.shape
            print(f"  {c.name(shape)}, {','.join(map(str, run.threads))} thread(s) ...", file=sys.stderr, flush=True)
            run.results += bench_case(
                c, shape, run.threads, target * len(run.threads), min_runs, rng, workers, run.args.small
            )
    finally:
        stop_all(workers)
    bad = [f"{r['case']} ({r['isa']})" for r in run.results if not r["lib_kernel_ok"]]
    if bad:
        print("error: the library's kernel did not run (call counter) for: " + ", ".join(bad), file=sys.stderr)
    run.section("table", markdown_table(run.ceilings, run.results), not bad)


def _scaling(run: _Run) -> None:
    from onnx_pools.bench.scaling import scaling_table

    threads = run.threads if 1 in run.threads else [1, *run.threads]
    workers = run.workers(baseline=False)
    try:
        md, ok = scaling_table(run.cases, threads, workers, np.random.default_rng(0), run.args.small)
    finally:
        stop_all(workers)
    run.section("scaling", md, ok)


def _spread(run: _Run) -> None:
    from onnx_pools.bench.scaling import spread_table

    workers = run.workers(baseline=False)
    try:
        md, ok = spread_table(run.cases, workers, np.random.default_rng(0), run.args.small)
    finally:
        stop_all(workers)
    run.section("spread", md, ok)


def _memory(run: _Run) -> None:
    from onnx_pools.bench.memory import memory_table

    run.section("memory", *memory_table(run.requested, run.args.small))


def _denormals(run: _Run) -> None:
    from onnx_pools.bench.denormals import denormals_table

    target = 0.005 if run.args.small else (0.1 if run.args.quick else 0.5)
    dtypes = [d.strip() for d in run.args.dtypes.split(",") if d.strip()]
    run.section("denormals", *denormals_table(dtypes, run.threads, target, run.args.small))


def _whole_models(run: _Run) -> None:
    from onnx_pools.bench.whole_models import ROW_BUDGET_QUICK_S, ROW_BUDGET_S, whole_models_table

    a = run.args
    batches = [1] if a.small else [int(b) for b in a.batch.split(",")]
    rounds = 2 if a.small else (8 if a.quick else a.rounds)
    budget_s = 0.0 if a.small else (ROW_BUDGET_QUICK_S if a.quick else ROW_BUDGET_S)
    substrings = a.models.split(",") if a.models else None
    md, ok = whole_models_table(
        run.threads, batches, rounds, budget_s, substrings, a.all_models, a.profile, _engines(a.engines), run.requested
    )
    run.section("whole_models", md, ok)


def _engines(text: str | None) -> tuple[str, ...] | None:
    """--engines as a tuple (None: every available one)."""
    return tuple(e.strip() for e in text.split(",") if e.strip()) if text else None


def _qlinear_times(run: _Run) -> None:
    from onnx_pools.bench.qlinear import qlinear_table

    md, ok = "", True
    for t in run.threads:
        table, ran = qlinear_table(t, run.args.baseline, run.args.small)
        md += table if not md else "\n" + "\n".join(table.splitlines()[2:]) + "\n"
        ok &= ran
    run.section("qlinear_times", md.replace("\n\n", "\n"), ok)


def _in_cache(run: _Run) -> None:
    from onnx_pools.bench.incache import in_cache_table

    workers = run.workers(baseline=False)
    try:
        md, ok = in_cache_table(run.threads, workers, run.args.small)
    finally:
        stop_all(workers)
    run.section("in_cache", md, ok)


def _small_planes(run: _Run) -> None:
    from onnx_pools.bench.small_planes import small_planes_table

    workers = run.workers(baseline=False)
    try:
        md, ok = small_planes_table(run.threads, workers, np.random.default_rng(0), run.args.small, run.args.quick)
    finally:
        stop_all(workers)
    run.section("small_planes", md, ok)


def _routes(run: _Run) -> None:
    import onnxruntime as ort

    from onnx_pools.bench.routes import ROUNDS, ROUNDS_QUICK, routes_table
    from onnx_pools.ep import ep_route_available

    if not ep_route_available():
        run.section(
            "routes", f"not run: the plugin-EP route needs onnxruntime >= 1.24 (this is {ort.__version__})\n", True
        )
        return
    subs = [c.strip() for c in run.args.cases.split(",") if c.strip()] if run.args.cases else None
    rounds = 2 if run.args.small else ROUNDS_QUICK if run.args.quick else ROUNDS
    run.section("routes", *routes_table(run.threads, rounds, run.args.small, subs))


RUNNERS: dict[str, Callable[[_Run], None]] = {
    "table": _table,
    "scaling": _scaling,
    "spread": _spread,
    "memory": _memory,
    "denormals": _denormals,
    "whole_models": _whole_models,
    "qlinear_times": _qlinear_times,
    "in_cache": _in_cache,
    "small_planes": _small_planes,
    "routes": _routes,
}


def main(argv: list[str] | None = None) -> int:
    """The benchmark's command line (module docstring); returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        threads = [int(t) for t in args.threads.split(",") if t.strip()]
        if not threads or min(threads) < 1:
            raise ValueError
    except ValueError:
        print(f"error: --threads {args.threads}: expected e.g. 1,2", file=sys.stderr)
        return 2
    cases = make_cases()
    names = [c.name(small_shape(c.shape) if args.small else None) for c in cases]
    if args.cases:
        subs = [s.strip().lower() for s in args.cases.split(",") if s.strip()]
        keep = [i for i, n in enumerate(names) if any(s in n.lower() for s in subs)]
        cases, names = [cases[i] for i in keep], [names[i] for i in keep]
    if not cases:
        print(f"error: no case matches {args.cases!r}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(names))
        return 0
    if args.baseline and not os.path.isfile(args.baseline):
        print(f"error: --baseline {args.baseline}: no such file", file=sys.stderr)
        return 2
    modes = list(MODES) if args.all else [m for m in MODES if getattr(args, m)] or ["table"]
    if args.engines:
        from onnx_pools.bench.whole_models import available_engines

        chosen, known = _engines(args.engines) or (), available_engines()
        if not chosen or chosen[0] != "stock" or not set(chosen) <= set(known):
            print(f"error: --engines {args.engines}: stock first, then any of {', '.join(known[1:])}", file=sys.stderr)
            return 2
    if args.readme and "table" not in modes:
        print("error: --readme needs the table's results (run the table, or --all)", file=sys.stderr)
        return 2
    from onnx_pools.bench.report import environment, header, readme_summary, rewrite_readme, write_tables

    if args.readme:  # before hours of timing: the README must have the section to rewrite
        try:
            rewrite_readme(args.readme, "", dry_run=True)
        except (OSError, ValueError) as e:
            print(f"error: --readme: {e}", file=sys.stderr)
            return 2
    print(f"  timing the library at {onnx_pools.get_library_path()}", file=sys.stderr, flush=True)
    env = environment()
    if args.baseline:
        env["baseline"] = os.path.abspath(args.baseline)
    run = _Run(args, threads, cases)
    print(header(env), flush=True)
    try:
        for mode in modes:
            RUNNERS[mode](run)
    except _UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.markdown:
        body = "\n".join(f"### {TITLES[mode]}\n\n{md}" for mode, md in run.sections)
        env["isas_timed"], env["isas_absent"] = run.isas_timed, run.isas_absent
        write_tables(args.markdown, f"{header(env, run.ceilings)}\n{body}")
    if args.json and run.results:
        with open(args.json, "w") as f:
            ceilings = {str(k): v for k, v in run.ceilings.items()}
            json.dump({"environment": env, "read_ceiling_GBps": ceilings, "results": run.results}, f, indent=1)
    if args.readme:
        rewrite_readme(args.readme, readme_summary(env, run.results))
    if not run.kernel_ran:
        print("error: the library's kernel did not run (call counter) in some rows", file=sys.stderr)
        return 1
    return 0
