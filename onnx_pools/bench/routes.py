"""The two ways into ONNX Runtime, node for node: the same one-node model run by the library registered as a
custom-op library (onnx_pools.session_options(model=...)) and as a plugin execution provider
(onnx_pools.ep_session_options(), onnxruntime >= 1.24), in one process, for representative cases of every op.

    python -m onnx_pools.bench.routes [--threads 1,2] [--rounds 60] [--cases SUBSTRINGS] [--small] [--markdown FILE]

Both sessions run the library's kernel (checked with its call counters), so what differs is what each route puts
around it: ORT's custom-op kernel adapter or the EP's kernel, and the EP's node placement. Timing: IOBinding with
pre-created OrtValues; in each of the rounds, about TARGET_S of each session (bursts of runs for the short ones): at
1 thread their samples alternate one by one; at more, each session takes a turn, and the next waits until its idle
pool threads, which spin for a while after its runs, have stopped (settle_pool_threads). Reported: median over
rounds of each route's round medians, the spread (25th-75th percentile of the rounds, % of the median), and ep /
custom-op: the median of the ratios of samples taken one after the other (at more threads: of the rounds' medians),
with their 25th-75th percentile.

A control follows the table: a one-node Relu model, which the EP does not take, in a plain session and in a session
with the EP, timed the same way. What it shows is ORT's own cost per run of having a plugin EP in the session, which
no kernel of the EP can remove; it is most of the difference between the routes on the tiny cases.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any, Callable

import numpy as np

import onnx_pools
from onnx_pools.bench.cases import Case, build_model, make_cases, make_input, small_shape
from onnx_pools.bench.engines import bound_runner, short_spin
from onnx_pools.bench.timing import settle_pool_threads, time_alternating, time_runs

__all__ = ["ROUNDS", "ROUNDS_QUICK", "ROUTES", "control_table", "route_cases", "routes_table"]

ROUTES = ("custom-op", "ep")
ROUNDS = 60
# --quick: at 2 threads the rounds' ratios vary by +-5-10% on a shared 2-vCPU host; 30 rounds settle their median to
# about 1%, at about 25 s per thread count
ROUNDS_QUICK = 30
TARGET_S = 0.03
SAMPLE_S = 300e-6  # a sample is the mean of a burst of runs this long (the tiny cases run in microseconds)
# Labels (with shapes) of the default table's cases timed here: a large and a tiny one of every op, and the
# QLinearAveragePool layouts and types.
CASE_NAMES = (
    "GlobalAveragePool f32 1x2048x7x7",
    "GlobalAveragePool f64 4x256x56x56",
    "GlobalMaxPool f32 8x256x56x56",
    "GlobalMaxPool f16 4x256x56x56",
    "GlobalLpPool p=2 f32 8x256x56x56",
    "LpPool 3x3 s1 pad1 p=2 f32 8x64x56x56",
    "LpPool 2x2 s2 p=3 f32 8x64x112x112",
    "QLinearAveragePool 3x3 pad1 u8 NCHW distinct cip0 8x64x56x56",
    "QLinearAveragePool 3x3 pad1 s8 NHWC equal cip1 8x56x56x64",
    "tiny GlobalAveragePool f32 1x8x4x4",
    "tiny GlobalMaxPool f32 1x1x1x1",
    "tiny GlobalLpPool p=2 f32 1x8x4x4",
    "tiny LpPool 3x3 pad1 p=2 f32 1x4x8x8",
    "tiny QLinearAveragePool 3x3 pad1 u8 NCHW 1x4x8x8",
)


def route_cases(substrings: list[str] | None = None) -> list[Case]:
    """The cases of CASE_NAMES, in that order (those whose name contains one of `substrings`, when given)."""
    by_name = {c.name(): c for c in make_cases()}
    keep = [n for n in CASE_NAMES if not substrings or any(s.lower() in n.lower() for s in substrings)]
    return [by_name[n] for n in keep]


def _session(route: str, model: bytes, threads: int) -> Any:
    """route: "custom-op", "ep", or "stock" (ORT alone)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if route == "ep":
        so = onnx_pools.ep_session_options(so)
    elif route == "custom-op":
        so = onnx_pools.session_options(so, model=model)
    return ort.InferenceSession(model, short_spin(so))


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def _kernel_runs(op: str, run: Callable[[], Any]) -> int:
    before = onnx_pools.call_counts()[op]
    run()
    return onnx_pools.call_counts()[op] - before


def _time_pair(fns: list[Callable[[], Any]], threads: int, rounds: int) -> tuple[list[float], list[float], list[float]]:
    """([median seconds of each], [spread % of each], [second / first of samples taken one after the other])."""
    per_round: list[list[float]] = [[], []]
    paired: list[float] = []
    for r in range(rounds):
        if threads == 1:
            (first, second), _ = time_alternating(fns, 2 * TARGET_S, 3, sample_s=SAMPLE_S, warmup=2, start=r)
            paired += [b / a for a, b in zip(first, second)]
        else:  # a turn each, then a wait for the pool threads: a session's idle pool threads spin for a while and
            # would take a core from the other session's next sample
            first, second = [], []
            for k in (r % 2, 1 - r % 2):
                (first, second)[k].extend(time_runs(fns[k], TARGET_S, 3, sample_s=SAMPLE_S, warmup=2)[0])
                settle_pool_threads()
            paired.append(statistics.median(second) / statistics.median(first))
        per_round[0].append(statistics.median(first))
        per_round[1].append(statistics.median(second))
    med = [statistics.median(v) for v in per_round]
    spread = [100 * (_percentile(v, 75) - _percentile(v, 25)) / m for v, m in zip(per_round, med)]
    return med, spread, paired


def _control_model(shape: tuple[int, ...]) -> bytes:
    """One Relu (float32): a node the EP does not take."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["Y"])],
        "control",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(shape))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]).SerializeToString()


def control_table(threads: list[int], rounds: int = ROUNDS) -> str:
    """ORT's cost per run of a plugin EP in the session: a Relu the EP does not take, without and with the EP."""
    shape = (1, 8, 4, 4)
    model = _control_model(shape)
    x = np.random.default_rng(1).random(shape, dtype=np.float32)
    lines = [
        "| model | threads | stock ms | with the EP ms | spread % stock/with the EP | with the EP / stock | "
        "difference us |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in threads:
        fns = [bound_runner(_session(route, model, t), x)[0] for route in ("stock", "ep")]
        med, spread, paired = _time_pair(fns, t, rounds)
        ratio = statistics.median(paired)
        lines.append(
            f"| Relu f32 {'x'.join(map(str, shape))} (not taken by the EP) | {t} | {med[0] * 1e3:.4f} | "
            f"{med[1] * 1e3:.4f} | {spread[0]:.0f}/{spread[1]:.0f} | {ratio:.3f} "
            f"({_percentile(paired, 25):.3f}-{_percentile(paired, 75):.3f}) | {(ratio - 1) * med[0] * 1e6:.3f} |"
        )
    return "\n".join(lines) + "\n"


def routes_table(
    threads: list[int], rounds: int = ROUNDS, small: bool = False, substrings: list[str] | None = None
) -> tuple[str, bool]:
    """(markdown, the library's kernel ran on both routes in every row)."""
    rng = np.random.default_rng(0)
    lines = [
        "| case | threads | custom-op ms | ep ms | spread % custom-op/ep | ep / custom-op | same output | kernel ran |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ok_all = True
    ratios = []
    for case in route_cases(substrings):
        shape = small_shape(case.shape) if small else case.shape
        model = build_model(case, shape)
        x = make_input(case, shape, rng)
        for t in threads:
            runs, outputs, ran = {}, {}, True
            for route in ROUTES:
                runs[route], outputs[route] = bound_runner(_session(route, model, t), x)
                ran &= _kernel_runs(case.op, runs[route]) == 1
            ok_all &= ran
            same = bool(np.array_equal(outputs["custom-op"], outputs["ep"], equal_nan=True))
            (custom_s, ep_s), (custom_spread, ep_spread), paired = _time_pair([runs[r] for r in ROUTES], t, rounds)
            ratio = statistics.median(paired)
            ratios.append(ratio)
            lines.append(
                f"| {case.name(shape)} | {t} | {custom_s * 1e3:.4f} | {ep_s * 1e3:.4f} | "
                f"{custom_spread:.0f}/{ep_spread:.0f} | {ratio:.3f} "
                f"({_percentile(paired, 25):.3f}-{_percentile(paired, 75):.3f}) | {'yes' if same else 'NO'} | "
                f"{'yes' if ran else 'NO'} |"
            )
            ok_all &= same
    lines.append("")
    if ratios:
        lines.append(
            f"- ep / custom-op: geomean {np.exp(np.mean(np.log(ratios))):.3f}, best {min(ratios):.3f}, "
            f"worst {max(ratios):.3f} over {len(ratios)} case x thread runs (below 1: the EP is faster)"
        )
    lines += [
        "",
        "Control: ORT's own cost per run of a plugin EP in the session (a node the EP does not take, without and "
        "with the EP):",
        "",
        control_table(threads, 2 if small else rounds),
    ]
    return "\n".join(lines) + "\n", ok_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m onnx_pools.bench.routes", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts (default 1,2)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    ap.add_argument("--cases", help="comma-separated substrings of case names (default: every case)")
    ap.add_argument("--small", action="store_true", help="tiny shapes, 2 rounds: a smoke test, not a measurement")
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args(argv)
    import onnxruntime as ort

    from onnx_pools.ep import ep_route_available

    if not ep_route_available():
        print(f"error: the EP route needs onnxruntime >= 1.24 (this is {ort.__version__})", file=sys.stderr)
        return 2
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    substrings = [c.strip() for c in args.cases.split(",") if c.strip()] if args.cases else None
    if not route_cases(substrings):
        print(f"error: no case matches {args.cases!r}", file=sys.stderr)
        return 2
    md, ok = routes_table(threads, 2 if args.small else args.rounds, args.small, substrings)
    header = f"onnxruntime {ort.__version__}, library {onnx_pools.get_library_path()} ({onnx_pools.active_isa()})\n\n"
    print(header + md, flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("### Single-node models: the custom-op route vs the plugin-EP route\n\n" + header + md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
