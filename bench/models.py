"""Whole models, stock ONNX Runtime vs the library: does registering onnx-pools ever make a model slower?

    python bench/models.py [--batch 1,8] [--threads 1,2] [--rounds 30] [--models SUBSTR,...] [--all] [--profile]

Models: the whole-model benchmark set in models/ (every bundled model whose batch dimension is symbolic, made by
models/make_models.py and models/make_quantized_models.py: ResNet-like with a GlobalAveragePool head, VGG-like with
a GlobalMaxPool head, a CNN with two LpPools, Inception-style quantized networks with 9 QLinearAveragePool, uint8
and int8); `--all` adds the small fixed-shape demo models. The batch is chosen at run time (`--batch`). Each model
is run by four sessions:
  * stock:    a plain session,
  * lib:      onnx_pools.session_options(model=...) (the recommended way: ORT keeps the global pools it takes into
              its NCHWc layout),
  * plain:    so.register_custom_ops_library(onnx_pools.get_library_path()) alone (no model-based choice),
  * lib-all:  session_options(model=..., ort_layout=False) (the library's kernels everywhere).
Timing: interleaved rounds; in each round every session runs once untimed (its pool threads have slept through the
pause after the previous turn) and then `reps` times back to back (reps chosen, after a warm-up, so that a session's
turn takes about 30 ms), in an order that rotates from round to round, and the round's median is kept.
Reported: the median over rounds, the spread (25th-75th percentile of the rounds, as a percentage of the median),
and ratios stock / session of the medians with the 25th-75th percentile of the per-round ratios (a round's ratio
compares runs taken seconds apart, so slow drift of the shared machine cancels). The layout nodes of each
optimised graph (ReorderInput / ReorderOutput, com.microsoft.nchwc ops, Transpose) are listed: a custom pool that
ORT cannot take into its blocked layout shows up as a ReorderOutput of the pool's whole input. `--profile` adds,
per session, ORT's profile of 10 runs summed by op type (ms per run), for finding where a difference comes from.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict

# numpy's OpenBLAS worker threads (none of this timing uses BLAS) took CPU from the timed thread on a 2-core machine
# (4-5% of perf samples in blas_thread_server): one thread, before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import onnx
import onnxruntime as ort

try:
    import onnx_pools
except ImportError:  # run as a script from a checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import onnx_pools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ort.set_default_logger_severity(3)  # the warning about saving an NCHWc-optimised graph is expected here

ENGINES = ("stock", "lib", "plain", "lib-all")
# with onnxruntime >= 1.24 also the plugin-EP route: onnx_pools.ep_session_options() (its default choices)
if tuple(int(p) for p in ort.__version__.split(".")[:2]) >= (1, 24):
    ENGINES += ("ep",)
NP_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
}


def model_files(include_all, substrings):
    """(name, bytes, symbolic batch?) of the models to run."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "models", "*.onnx"))):
        name = os.path.basename(path)
        if substrings and not any(s in name for s in substrings):
            continue
        m = onnx.load(path, load_external_data=False)
        dims = m.graph.input[0].type.tensor_type.shape.dim
        symbolic = bool(dims) and dims[0].HasField("dim_param")
        if symbolic or include_all or substrings:
            with open(path, "rb") as f:
                out.append((name, f.read(), symbolic))
    return out


def feeds_for(sess, batch, rng):
    feeds = {}
    for i in sess.get_inputs():
        if i.type not in NP_TYPES:
            return None  # e.g. bfloat16: numpy has no such type without ml_dtypes
        shape = [d if isinstance(d, int) else batch for d in i.shape]
        dtype = NP_TYPES[i.type]
        if np.dtype(dtype).kind in "iu":
            info = np.iinfo(dtype)
            feeds[i.name] = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def options(engine, model, threads, optimized_path=None, profile_prefix=None):
    if engine == "stock":
        so = ort.SessionOptions()
    elif engine == "ep":
        so = onnx_pools.ep_session_options()
    elif engine == "plain":
        so = ort.SessionOptions()
        so.register_custom_ops_library(onnx_pools.get_library_path())
    else:
        so = onnx_pools.session_options(model=model, ort_layout=(engine == "lib"))
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


def layout_nodes(path):
    """Layout nodes of an optimised graph; a ReorderOutput is named with the ops reading its output, which tells a
    conversion of a pooled output (-> Flatten) from one of a pool's whole input (-> GlobalMaxPool)."""
    m = onnx.load(path)
    consumers = defaultdict(list)
    for n in m.graph.node:
        for i in n.input:
            consumers[i].append(n.op_type)

    def label(n):
        if n.op_type == "ReorderOutput":
            return f"ReorderOutput(->{'+'.join(sorted(consumers[n.output[0]])) or 'output'})"
        return n.op_type + ("(nchwc)" if n.domain == "com.microsoft.nchwc" and n.op_type != "ReorderInput" else "")

    c = Counter(
        label(n)
        for n in m.graph.node
        if n.op_type.startswith("Reorder") or n.domain == "com.microsoft.nchwc" or n.op_type == "Transpose"
    )
    return ", ".join(f"{k} x{v}" for k, v in sorted(c.items())) or "none"


def profile(model, engine, threads, feeds, tmp, runs=10):
    """{op type: ms per run} from ORT's profiler over `runs` runs (after one warm-up run)."""
    sess = ort.InferenceSession(model, options(engine, model, threads, profile_prefix=os.path.join(tmp, engine)))
    sess.run(None, feeds)
    for _ in range(runs):
        sess.run(None, feeds)
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    per_op = defaultdict(float)
    kernel_events = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    for e in kernel_events[len(kernel_events) // (runs + 1) :]:  # drop the warm-up run
        per_op[e["args"].get("op_name", "?")] += e["dur"] / 1e3 / runs
    return dict(per_op)


def percentile(values, q):
    return float(np.percentile(values, q))


SPIN_SETTLE_S = 0.02
# Runs of each session before its turn length is chosen (from the fastest of 3 more). The turn length used to come
# from the second run alone, still slow at 2 threads (allocations, the pool's first wake-ups): a session then got 1-3
# runs per turn, each right after a pause, and identical graphs timed 0.28-0.40x stock at batch 1 / 2 threads.
WARMUP_RUNS = 5


def time_sessions(sessions, feeds, rounds):
    """{engine: [per-round median seconds]} from interleaved rounds."""
    reps = {}
    for e, s in sessions.items():
        for _ in range(WARMUP_RUNS):
            s.run(None, feeds)
        fastest = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            s.run(None, feeds)
            fastest = min(fastest, time.perf_counter() - t0)
        reps[e] = max(1, min(20, int(0.03 / max(fastest, 1e-6))))
    rounds_s = {e: [] for e in sessions}
    order = list(sessions)
    for r in range(rounds):
        for e in order[r % len(order) :] + order[: r % len(order)]:
            sessions[e].run(None, feeds)  # untimed: wakes the session's pool threads, asleep since the pause
            ts = []
            for _ in range(reps[e]):
                t0 = time.perf_counter()
                sessions[e].run(None, feeds)
                ts.append(time.perf_counter() - t0)
            rounds_s[e].append(statistics.median(ts))
            # a multi-threaded session's idle pool threads spin for a while after its run; the pause lets them go
            # to sleep before the next session runs (else they take its cores: 2-thread ratios of two identical
            # graphs spread 0.83-1.10x)
            time.sleep(SPIN_SETTLE_S)
    return rounds_s


def main(argv=None):
    global ENGINES
    ap = argparse.ArgumentParser(prog="python bench/models.py", description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2", help="intra-op thread counts (default 1,2)")
    ap.add_argument("--batch", default="1,8", help="batch sizes for models with a symbolic batch dim (default 1,8)")
    ap.add_argument("--rounds", type=int, default=30, help="interleaved rounds per model and setting (default 30)")
    ap.add_argument("--quick", action="store_true", help="8 rounds")
    ap.add_argument("--models", help="comma-separated substrings of the model file names to run (any bundled model)")
    ap.add_argument("--all", action="store_true", help="also the small fixed-shape demo models")
    ap.add_argument(
        "--engines", help=f"comma-separated sessions to time, stock first (default all: {','.join(ENGINES)})"
    )
    ap.add_argument("--profile", action="store_true", help="ORT profile per session: ms per run by op type")
    args = ap.parse_args(argv)
    if args.engines:
        chosen = tuple(args.engines.split(","))
        if chosen[0] != "stock" or not set(chosen) <= set(ENGINES):
            ap.error(f"--engines: stock first, then any of {', '.join(ENGINES[1:])}")
        ENGINES = chosen
    threads = [int(t) for t in args.threads.split(",")]
    batches = [int(b) for b in args.batch.split(",")]
    rounds = 8 if args.quick else args.rounds
    rng = np.random.default_rng(0)
    print(
        f"onnx_pools {onnx_pools.__version__} (ISA {onnx_pools.active_isa()}), onnxruntime {ort.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} logical CPUs; {rounds} interleaved rounds\n"
    )
    print(
        "| model | batch | threads | "
        + " | ".join(f"{e} ms" for e in ENGINES)
        + f" | spread % {'/'.join(ENGINES)} | "
        + " | ".join(f"{e} vs stock" for e in ENGINES[1:])
        + " |"
    )
    print("|---|---|---|" + "---|" * (2 * len(ENGINES)))
    ratios = {e: [] for e in ENGINES[1:]}
    layouts_seen = {}
    profiles = []
    substrings = args.models.split(",") if args.models else None
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, symbolic in model_files(args.all, substrings):
            for batch in batches if symbolic else [None]:
                for t in threads:
                    sessions, layouts = {}, {}
                    try:
                        for e in ENGINES:
                            # ORT cannot save an optimised graph holding an EP's fused nodes: no listing for "ep"
                            path = None if e == "ep" else os.path.join(tmp, f"{e}.onnx")
                            sessions[e] = ort.InferenceSession(model, options(e, model, t, path))
                            layouts[e] = layout_nodes(path) if path else "-"
                    except Exception as exc:  # e.g. a model stock ORT cannot run
                        print(f"| {name} | {batch or '-'} | {t} | {str(exc).splitlines()[0][:80]} |")
                        break
                    layouts_seen[name] = layouts
                    feeds = feeds_for(sessions["stock"], batch, rng)
                    if feeds is None:
                        break
                    rs = time_sessions(sessions, feeds, rounds)
                    med = {e: statistics.median(v) * 1e3 for e, v in rs.items()}
                    spread = {
                        e: 100 * (percentile(v, 75) - percentile(v, 25)) / statistics.median(v) for e, v in rs.items()
                    }
                    cells = []
                    for e in ENGINES[1:]:
                        paired = [s / x for s, x in zip(rs["stock"], rs[e])]
                        ratios[e].append(med["stock"] / med[e])
                        cells.append(
                            f"{med['stock'] / med[e]:.2f} ({percentile(paired, 25):.2f}-{percentile(paired, 75):.2f})"
                        )
                    print(
                        f"| {name} | {batch or '-'} | {t} | "
                        + " | ".join(f"{med[e]:.2f}" for e in ENGINES)
                        + " | "
                        + "/".join(f"{spread[e]:.0f}" for e in ENGINES)
                        + " | "
                        + " | ".join(cells)
                        + " |",
                        flush=True,
                    )
                    if args.profile:
                        profiles.append((name, batch, t, {e: profile(model, e, t, feeds, tmp) for e in ENGINES}))
                    del sessions
    for e, v in ratios.items():
        if v:
            print(
                f"\n{e} vs stock: geomean {np.exp(np.mean(np.log(v))):.3f}, worst {min(v):.3f}, best {max(v):.3f} "
                f"over {len(v)} model x batch x thread runs",
                end="",
            )
    print("\n\nLayout nodes of the optimised graphs (ORT_ENABLE_ALL):\n")
    listed = [e for e in ENGINES if e != "ep"]
    print("| model | " + " | ".join(listed) + " |")
    print("|---|" + "---|" * len(listed))
    for name, layouts in layouts_seen.items():
        print(f"| {name} | " + " | ".join(layouts[e] for e in listed) + " |")
    if profiles:
        print(
            "\nORT profile, ms per run by op type (10 runs; ops above 2% of the stock run or differing by > 0.05 ms):\n"
        )
        for name, batch, t, prof in profiles:
            total = {e: sum(p.values()) for e, p in prof.items()}
            print(
                f"{name}, batch {batch or '-'}, {t} thread(s): total "
                + ", ".join(f"{e} {total[e]:.2f}" for e in ENGINES)
            )
            ops = sorted(set().union(*prof.values()), key=lambda o: -max(p.get(o, 0) for p in prof.values()))
            for op in ops:
                vals = [prof[e].get(op, 0.0) for e in ENGINES]
                if max(vals) > 0.02 * total["stock"] or max(vals) - min(vals) > 0.05:
                    print(f"    {op:32s} " + "  ".join(f"{e} {v:7.2f}" for e, v in zip(ENGINES, vals)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
