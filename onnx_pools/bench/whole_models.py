"""--whole-models: whole models, stock ONNX Runtime vs the library: does registering onnx-pools ever make a model
slower?

Models: the whole-model benchmark set of the bundled models (every one whose batch dimension is symbolic:
ResNet-like with a GlobalAveragePool head, VGG-like with a GlobalMaxPool head, a CNN with two LpPools,
Inception-style quantized networks with 9 QLinearAveragePool, uint8 and int8); --all-models adds the small
fixed-shape demo models. The batch is chosen at run time (--batch). Each model is run by these sessions:
  * stock:    a plain session,
  * stock-b:  a second plain session (the control: stock-b vs stock is the machine's noise),
  * lib:      onnx_pools.session_options(model=...) (the recommended way: ORT keeps the global pools it takes into
              its NCHWc layout),
  * plain:    so.register_custom_ops_library(onnx_pools.get_library_path()) alone (no model-based choice),
  * lib-all:  session_options(model=..., ort_layout=False) (the library's kernels everywhere),
  * ep:       with onnxruntime >= 1.24, onnx_pools.ep_session_options() (the plugin-EP route, its defaults).
--engines picks some of them (stock first); the table's columns follow the sessions run. Every kernel set of --isa
this CPU runs is a row of its own (each measured in a child process with ONNX_POOLS_ISA forced).
Timing: interleaved rounds; in each round every session runs once untimed (its pool threads went to sleep while the
benchmark waited for the previous turn's to stop spinning) and then `reps` times back to back (reps chosen, after a
warm-up, so that a session's turn takes about 30 ms), in an order that rotates from round to round, and the round's
median is kept. --rounds (--quick: 8) is the least number of rounds; a row whose rounds took less than ROW_BUDGET_S
(--quick: ROW_BUDGET_QUICK_S) gets more, up to MAX_ROUNDS. Reported: the median over rounds, the spread (25th-75th
percentile of the rounds, as a percentage of the median), and stock / session: the median of the per-round ratios
with their 25th-75th percentile. The layout nodes of each optimised graph (ReorderInput / ReorderOutput,
com.microsoft.nchwc ops, Transpose) are listed: a custom pool that ORT cannot take into its blocked layout shows up
as a ReorderOutput of the pool's whole input ("-" for an ep session that fused QDQ units into nodes of its own: ORT
cannot save an optimised graph holding compiled nodes). --profile adds, per session, ORT's profile of 10 runs summed
by op type (ms per run).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

import onnx_pools
from onnx_pools.bench.engines import json_from_child, short_spin
from onnx_pools.bench.timing import settle_pool_threads, time_runs
from onnx_pools.model_tools import default_models_dir

__all__ = [
    "ENGINES",
    "available_engines",
    "measure_whole_models",
    "pools_reach_library_only_through_ep",
    "whole_models_table",
]

# A second session that holds stock's very graph: its ratio to stock is the machine's noise, the band in which a
# session that runs stock's graph (the ° rows) is not slower than stock.
CONTROL = "stock-b"
ENGINES: tuple[str, ...] = ("stock", CONTROL, "lib", "plain", "lib-all")
NP_TYPES: dict[str, Any] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
}
# Runs of each session before its turn length is chosen (from the fastest of 3 more): the first runs are still
# slow at 2 threads (allocations, the pool's first wake-ups), and a turn length taken from them gave a session 1-3
# runs per turn, each right after a pause.
WARMUP_RUNS = 5
TURN_S = 0.03
# A turn is at least this many timed runs (its median): with one run per turn (models of 30 ms and more) a single
# preempted run at 2 threads would decide a round.
MIN_TURN_RUNS = 3
# Models of a fraction of a millisecond get more rounds than --rounds, up to this many, within the row's time
# budget (--quick: ROW_BUDGET_QUICK_S): at 2 threads their per-round ratios vary by +-15% on a shared 2-vCPU host,
# more than a median of 8 rounds can settle.
MAX_ROUNDS = 40
ROW_BUDGET_S = 20.0
ROW_BUDGET_QUICK_S = 6.0


def available_engines() -> tuple[str, ...]:
    """ENGINES, and with onnxruntime >= 1.24 the plugin-EP route: onnx_pools.ep_session_options() (its defaults)."""
    from onnx_pools.ep import ep_route_available

    return ENGINES + (("ep",) if ep_route_available() else ())


def pools_reach_library_only_through_ep(model: Any) -> bool:
    """Whether a model (onnx.ModelProto) has DequantizeLinear -> AveragePool / GlobalAveragePool -> QuantizeLinear
    units and does not import com.microsoft: ORT fuses those units into com.microsoft QLinear nodes at load, which
    the custom-op route cannot serve in such a model (onnx_pools.session_options), so only the plugin EP, which
    claims the units themselves, runs the library's kernels there."""
    if any(o.domain == "com.microsoft" for o in model.opset_import):
        return False
    producer = {o: n for n in model.graph.node for o in n.output}
    readers: dict[str, list[Any]] = defaultdict(list)
    for n in model.graph.node:
        for i in n.input:
            readers[i].append(n)
    for n in model.graph.node:
        if n.op_type not in ("AveragePool", "GlobalAveragePool") or n.domain not in ("", "ai.onnx"):
            continue
        source, sinks = producer.get(n.input[0]), readers[n.output[0]]
        if source is not None and source.op_type == "DequantizeLinear" and sinks:
            if all(r.op_type == "QuantizeLinear" for r in sinks):
                return True
    return False


def model_files(include_all: bool, substrings: list[str] | None) -> list[tuple[str, bytes, bool]]:
    """(name, bytes, symbolic batch?) of the models to run."""
    import onnx

    out = []
    for path in sorted(default_models_dir().glob("*.onnx")):
        if substrings and not any(s in path.name for s in substrings):
            continue
        m = onnx.load(str(path), load_external_data=False)
        dims = m.graph.input[0].type.tensor_type.shape.dim
        symbolic = bool(dims) and dims[0].HasField("dim_param")
        if symbolic or include_all or substrings:
            out.append((path.name, path.read_bytes(), symbolic))
    return out


def _feeds(sess: Any, batch: int | None, rng: np.random.Generator) -> dict[str, np.ndarray] | None:
    feeds = {}
    for i in sess.get_inputs():
        if i.type not in NP_TYPES:
            return None  # e.g. bfloat16
        shape = [d if isinstance(d, int) else batch or 1 for d in i.shape]
        dtype = np.dtype(NP_TYPES[i.type])
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            feeds[i.name] = rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _options(
    engine: str, model: bytes, threads: int, optimized_path: str | None = None, profile_prefix: str | None = None
) -> Any:
    import onnxruntime as ort

    if engine in ("stock", CONTROL):
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
    so.log_severity_level = 3
    short_spin(so)
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


def layout_nodes(m: Any) -> str:
    """Layout nodes of an optimised graph (onnx.ModelProto); a ReorderOutput is named with the ops reading its output,
    which tells a conversion of a pooled output (-> Flatten) from one of a pool's whole input (-> GlobalMaxPool)."""
    consumers = defaultdict(list)
    for n in m.graph.node:
        for i in n.input:
            consumers[i].append(n.op_type)

    def label(n: Any) -> str:
        if n.op_type == "ReorderOutput":
            return f"ReorderOutput(->{'+'.join(sorted(consumers[n.output[0]])) or 'output'})"
        return str(n.op_type) + ("(nchwc)" if n.domain == "com.microsoft.nchwc" and n.op_type != "ReorderInput" else "")

    c = Counter(
        label(n)
        for n in m.graph.node
        if n.op_type.startswith("Reorder") or n.domain == "com.microsoft.nchwc" or n.op_type == "Transpose"
    )
    return ", ".join(f"{k} x{v}" for k, v in sorted(c.items())) or "none"


def graph_nodes(m: Any) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    """An optimised graph's (onnx.ModelProto) nodes (op type, domain, inputs, outputs), in order: two sessions that
    save equal lists run the same kernels of the same provider on the same tensors."""
    return [(n.op_type, n.domain, tuple(n.input), tuple(n.output)) for n in m.graph.node]


def _profile(model: bytes, engine: str, threads: int, feeds: dict[str, np.ndarray], tmp: str) -> dict[str, float]:
    """{op type: ms per run} from ORT's profiler over 10 runs (after one warm-up run)."""
    import onnxruntime as ort

    runs = 10
    sess = ort.InferenceSession(model, _options(engine, model, threads, profile_prefix=os.path.join(tmp, engine)))
    for _ in range(runs + 1):
        sess.run(None, feeds)
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    per_op: dict[str, float] = defaultdict(float)
    kernel_events = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    for e in kernel_events[len(kernel_events) // (runs + 1) :]:  # drop the warm-up run
        per_op[e["args"].get("op_name", "?")] += e["dur"] / 1e3 / runs
    return dict(per_op)


def time_sessions(
    sessions: dict[str, Any], feeds: dict[str, np.ndarray], rounds: int, budget_s: float = 0.0
) -> dict[str, list[float]]:
    """{engine: [per-round median seconds]} from interleaved rounds: at least `rounds`, more (up to MAX_ROUNDS)
    while the rounds together took less than `budget_s`."""

    def runner(session: Any) -> Callable[[], Any]:
        return lambda: session.run(None, feeds)

    runs = {e: runner(s) for e, s in sessions.items()}
    reps = {}
    for e, run in runs.items():
        fastest, _ = time_runs(run, runs=3, warmup=WARMUP_RUNS)
        reps[e] = max(MIN_TURN_RUNS, min(20, int(TURN_S / max(min(fastest), 1e-6))))
    per_round: dict[str, list[float]] = {e: [] for e in sessions}
    order = list(sessions)
    start, r = time.perf_counter(), 0
    while r < rounds or (r < MAX_ROUNDS and time.perf_counter() - start < budget_s):
        for e in order[r % len(order) :] + order[: r % len(order)]:
            # the untimed run wakes the session's pool threads, asleep since the previous turn
            samples, _ = time_runs(runs[e], runs=reps[e], warmup=1)
            per_round[e].append(statistics.median(samples))
            # a multi-threaded session's idle pool threads spin for a while after its run; wait until they have gone
            # to sleep before the next session runs (else they take its cores)
            settle_pool_threads()
        r += 1
    return per_round


def _library_kernels_ran(model: bytes, threads: int, feeds: dict[str, np.ndarray], lib_all: Any) -> bool:
    """Whether a run with the library's kernels everywhere moved its call counters: the lib-all session (built here
    when --engines leaves it out), else, with onnxruntime >= 1.24, an EP session taking every node it can
    (ort_layout=False): QDQ units of a model that does not import com.microsoft run on the library only there."""
    import onnxruntime as ort

    before = sum(onnx_pools.call_counts().values())
    (lib_all or ort.InferenceSession(model, _options("lib-all", model, threads))).run(None, feeds)
    if sum(onnx_pools.call_counts().values()) > before or "ep" not in available_engines():
        return sum(onnx_pools.call_counts().values()) > before
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    ort.InferenceSession(model, onnx_pools.ep_session_options(so, ort_layout=False)).run(None, feeds)
    return sum(onnx_pools.call_counts().values()) > before


def _library_could_run(model: Any) -> bool:
    """Whether a model (onnx.ModelProto) has a node of the library's ops or a QDQ average-pool unit ORT fuses into
    one; a demo model of other ops (an AveragePool in float) runs no library kernel by design."""
    ops = set(onnx_pools.OPS.items())
    has_op = any((n.op_type, "" if n.domain == "ai.onnx" else n.domain) in ops for n in model.graph.node)
    return has_op or pools_reach_library_only_through_ep(model)


def _library_calls(session: Any, feeds: dict[str, np.ndarray]) -> int:
    """The library's kernel calls in one run of the session."""
    before = sum(onnx_pools.call_counts().values())
    session.run(None, feeds)
    return sum(onnx_pools.call_counts().values()) - before


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def measure_whole_models(
    thread_counts: list[int],
    batches: list[int],
    rounds: int,
    budget_s: float,
    substrings: list[str] | None,
    include_all: bool,
    profile: bool,
    engines: Sequence[str],
) -> dict[str, Any]:
    """The measurements of this process's kernel set (JSON-ready): {"isa", "rows", "layouts", "profiles",
    "needs_ep", "ok"}; a row is {"name", "batch", "threads"} with "error", or with "ms", "spread", "ratio", "iqr",
    "served" per engine, "ran" (_library_kernels_ran) and "could" (_library_could_run)."""
    import onnx
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # the warning about saving an NCHWc-optimised graph is expected here
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    layouts_seen: dict[str, dict[str, str]] = {}
    profiles: list[Any] = []
    needs_ep: list[str] = []
    ok_all = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, symbolic in model_files(include_all, substrings):
            proto = onnx.load_from_string(model)
            could = _library_could_run(proto)
            batch_sizes: list[int | None] = list(batches) if symbolic else [None]
            for batch in batch_sizes:
                for t in thread_counts:
                    row: dict[str, Any] = {"name": name, "batch": batch, "threads": t}
                    sessions, layouts, graphs = {}, {}, {}
                    try:
                        for e in engines:
                            path = None if e == CONTROL else os.path.join(tmp, f"{e}.onnx")
                            try:
                                sessions[e] = ort.InferenceSession(model, _options(e, model, t, path))
                            except Exception:
                                if e != "ep":
                                    raise
                                # ORT cannot save a graph holding an EP's fused (compiled) nodes: the session without
                                path = None
                                sessions[e] = ort.InferenceSession(model, _options(e, model, t))
                            layouts[e] = "-"
                            if path:
                                optimised = onnx.load(path)
                                layouts[e], graphs[e] = layout_nodes(optimised), graph_nodes(optimised)
                    except Exception as exc:  # e.g. a model stock ORT cannot run
                        rows.append({**row, "error": str(exc).splitlines()[0][:80]})
                        break
                    layouts_seen[name] = layouts
                    feeds = _feeds(sessions["stock"], batch, rng)
                    if feeds is None:
                        break
                    ran = _library_kernels_ran(model, t, feeds, sessions.get("lib-all"))
                    if not ran and "ep" not in available_engines() and pools_reach_library_only_through_ep(proto):
                        # this onnxruntime has no plugin EP
                        needs_ep.append(name)
                        break
                    ok_all &= ran or not could
                    served = {e: _library_calls(sessions[e], feeds) > 0 for e in engines}
                    rs = time_sessions(sessions, feeds, rounds, budget_s)
                    # the sessions that run stock's optimised graph node for node
                    same_graph = {e: e in graphs and graphs[e] == graphs.get("stock") for e in engines}
                    row.update(
                        ran=ran, could=could, served=served, same_graph=same_graph, ms={}, spread={}, ratio={}, iqr={}
                    )
                    for e, v in rs.items():
                        row["ms"][e] = statistics.median(v) * 1e3
                        row["spread"][e] = 100 * (_percentile(v, 75) - _percentile(v, 25)) / statistics.median(v)
                        # the sessions of a round ran one after the other: the median of the rounds' ratios
                        paired = [s / x for s, x in zip(rs["stock"], v)]
                        row["ratio"][e] = statistics.median(paired)
                        row["iqr"][e] = [_percentile(paired, 25), _percentile(paired, 75)]
                    rows.append(row)
                    if profile:
                        profiles.append((name, batch, t, {e: _profile(model, e, t, feeds, tmp) for e in engines}))
                    del sessions
    return {
        "isa": onnx_pools.active_isa(),
        "rows": rows,
        "layouts": layouts_seen,
        "profiles": profiles,
        "needs_ep": needs_ep,
        "ok": ok_all,
    }


def _measure_in_child(isa: str, arguments: list[Any]) -> dict[str, Any] | None:
    """measure_whole_models in a process whose kernel set is forced to `isa` (None: this CPU does not run it)."""
    measured: dict[str, Any] = json_from_child(
        "onnx_pools.bench.whole_models", arguments, isa, f"--whole-models on {isa}", 3600
    )
    return measured if measured["isa"] == isa else None


def whole_models_table(
    thread_counts: list[int],
    batches: list[int],
    rounds: int,
    budget_s: float,
    substrings: list[str] | None,
    include_all: bool,
    profile: bool,
    engines: Sequence[str] | None = None,
    isas: Sequence[str] | None = None,
) -> tuple[str, bool]:
    """(markdown, the library's kernels ran for every model with the library everywhere: _library_kernels_ran).
    engines: the sessions to time, "stock" first (default: available_engines()); isas: the kernel sets to run the
    models on (default: this process's), each in a child process with ONNX_POOLS_ISA forced (the ones this CPU does
    not run are left out): a process that has not run PyTorch or OpenVINO, as a user's would not have."""
    engines = tuple(engines) if engines else available_engines()
    arguments = [thread_counts, batches, rounds, budget_s, substrings, include_all, profile, list(engines)]
    measured = [m for isa in isas or [onnx_pools.active_isa()] if (m := _measure_in_child(isa, arguments)) is not None]
    return _render(measured, engines), all(m["ok"] for m in measured)


def _render(measured: list[dict[str, Any]], engines: Sequence[str]) -> str:
    import onnxruntime as ort

    columns = ["model", "batch", "threads", "ISA", *(f"{e} ms" for e in engines), "spread % " + "/".join(engines)]
    columns += [*(f"{e} vs stock" for e in engines[1:]), "lib kernel ran"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    ratios: dict[str, list[float]] = {e: [] for e in engines[1:]}
    ratios_served: dict[str, list[float]] = {e: [] for e in engines[1:]}  # where the session ran a library kernel
    # where it ran none: (its ratio, the control's on the same row)
    unserved: dict[str, list[tuple[float, float]]] = {e: [] for e in engines[1:] if e != CONTROL}
    stock_graph: dict[str, int] = {e: 0 for e in unserved}  # of those rows, how many ran stock's optimised graph
    rows = sorted(
        ((m["isa"], k, row) for m in measured for k, row in enumerate(m["rows"])),
        key=lambda item: (item[2]["name"], item[2]["batch"] or 0, item[2]["threads"], item[1]),
    )
    for isa, _, row in rows:
        head = f"| {row['name']} | {row['batch'] or '-'} | {row['threads']} | {isa} | "
        if "error" in row:
            lines.append(head + f"{row['error']} |")
            continue
        cells = []
        for e in engines[1:]:
            ratios[e].append(row["ratio"][e])
            if row["served"][e]:
                ratios_served[e].append(row["ratio"][e])
            elif e in unserved and CONTROL in row["ratio"]:
                unserved[e].append((row["ratio"][e], row["ratio"][CONTROL]))
                stock_graph[e] += row["same_graph"][e]
            low, high = row["iqr"][e]
            cells.append(f"{row['ratio'][e]:.2f} ({low:.2f}-{high:.2f})" + ("" if row["served"][e] else "°"))
        lines.append(
            head
            + " | ".join(f"{row['ms'][e]:.2f}" for e in engines)
            + " | "
            + "/".join(f"{row['spread'][e]:.0f}" for e in engines)
            + " | "
            + " | ".join(cells)
            + f" | {'yes' if row['ran'] else 'NO' if row['could'] else '- (no library op)'} |"
        )
    lines.append("")
    needs_ep = sorted({n for m in measured for n in m["needs_ep"]})
    if needs_ep:
        lines.append(
            f"- not timed with onnxruntime {ort.__version__}: {', '.join(needs_ep)} (QDQ models whose "
            "pools run on the library only through the plugin EP, onnxruntime >= 1.24)"
        )
    for e, v in ratios.items():
        if v:
            lines.append(
                f"- {e} vs stock: geomean {np.exp(np.mean(np.log(v))):.3f}, worst {min(v):.3f}, best {max(v):.3f} "
                f"over {len(v)} model x batch x thread x ISA runs"
            )
            if ratios_served[e] and len(ratios_served[e]) < len(v):
                w = ratios_served[e]
                lines[-1] += (
                    f"; where it ran a library kernel: geomean {np.exp(np.mean(np.log(w))):.3f}, worst {min(w):.3f} "
                    f"over {len(w)}"
                )
    for e, pairs in unserved.items():
        if pairs:
            own, control = (np.array(v) for v in zip(*pairs))
            lines.append(
                f"- {e} vs stock where it ran no library kernel: geomean {np.exp(np.mean(np.log(own))):.3f}, "
                f"worst {own.min():.3f} over {len(own)}; {CONTROL} vs stock on the same rows: geomean "
                f"{np.exp(np.mean(np.log(control))):.3f}, worst {control.min():.3f}; {stock_graph[e]} of these "
                f"{len(own)} ran stock's optimised graph node for node"
            )
    if any(len(ratios_served[e]) < len(v) for e, v in ratios.items() if e != CONTROL):
        lines.append(
            "- °: the session ran no library kernel in that model (ORT ran every node); where it also runs stock's "
            "optimised graph (compared node for node), its ratio measures the machine, as stock-b's does"
        )
    layouts_seen: dict[str, dict[str, str]] = {}
    for m in measured:
        for name, layouts in m["layouts"].items():
            layouts_seen.setdefault(name, layouts)
    lines += ["", "Layout nodes of the optimised graphs (ORT_ENABLE_ALL):", ""]
    listed = [e for e in engines if e != CONTROL]
    lines += ["| model | " + " | ".join(listed) + " |", "|" + "---|" * (len(listed) + 1)]
    for name, layouts in layouts_seen.items():
        lines.append(f"| {name} | " + " | ".join(layouts[e] for e in listed) + " |")
    profiles = [p for m in measured for p in m["profiles"]]
    if profiles:
        lines += ["", "ORT profile, ms per run by op type (10 runs; ops above 2% of stock or differing by > 0.05 ms):"]
        for name, batch, t, prof in profiles:
            total = {e: sum(p.values()) for e, p in prof.items()}
            lines += ["", f"{name}, batch {batch or '-'}, {t} thread(s): total "]
            lines[-1] += ", ".join(f"{e} {total[e]:.2f}" for e in engines)
            ops = sorted(set().union(*prof.values()), key=lambda o: -max(p.get(o, 0) for p in prof.values()))
            for op in ops:
                vals = [prof[e].get(op, 0.0) for e in engines]
                if max(vals) > 0.02 * total["stock"] or max(vals) - min(vals) > 0.05:
                    lines.append(f"    {op:32s} " + "  ".join(f"{e} {v:7.2f}" for e, v in zip(engines, vals)))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(json.dumps(measure_whole_models(*json.loads(sys.argv[1]))))
