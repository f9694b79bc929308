"""Command line of onnx-pools: ``onnx-pools {demo,inspect,run,bench} ...`` (or ``python -m onnx_pools ...``).

    demo [--models DIR]       run every bundled model with the library and with stock ONNX Runtime, print a table
    inspect MODEL             list the pooling nodes of a model and whether stock ORT / the library can run each
    run MODEL [--input name=file.npy ...] [--out DIR]
                              run a model with the library; random inputs where none are given; save outputs (.npy)
    bench [args]              the benchmark (onnx_pools.bench, also `python -m onnx_pools.bench`; `bench --help`
                              for its modes and options)

Exit status: 0 ok; 1 the library failed to run a model; 2 bad arguments, missing file or a file that is not ONNX;
3 the model has no node the library handles (`run` still runs it).
There is no pooling logic here: all computation is done by ONNX Runtime with the library's kernels.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from onnx_pools.bench.timing import median_time
from onnx_pools.model_tools import (
    ModelError,
    default_models_dir,
    elem_name,
    first_line,
    load_model,
    make_session,
    max_abs_diff,
    np_dtype,
    opsets,
    pooling_nodes,
    random_inputs,
    run_session,
    short_reason,
    value_types,
)
from onnx_pools.ortvalues import is_bfloat16

if TYPE_CHECKING:
    import onnx
    import onnxruntime

__all__ = ["EXIT_FAILED", "EXIT_NO_POOLS", "EXIT_OK", "EXIT_USAGE", "CliError", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_POOLS = 0, 1, 2, 3


class CliError(Exception):
    """An error reported as one line `error: ...` with an exit status."""

    def __init__(self, msg: str, code: int = EXIT_USAGE) -> None:
        super().__init__(msg)
        self.code = code


# ------------------------------------------------------------------------------------------------ small helpers
def _pools() -> ModuleType:
    import onnx_pools

    return onnx_pools


def _attr_str(node: onnx.NodeProto) -> str:
    from onnx import helper

    parts = []
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        if isinstance(v, float):
            v = f"{v:g}"
        parts.append(f"{a.name}={v}")
    return " ".join(parts) if parts else "-"


def _counts() -> dict[str, int]:
    return dict(_pools().call_counts())


def _moved(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


# ------------------------------------------------------------------------------------------------ demo
def _collapsed(items: list[str]) -> str:
    """'a, a, a, b' as 'a x3, b': a model's nine identical pooling nodes read as one entry."""
    runs: list[tuple[str, int]] = []
    for item in items:
        if runs and runs[-1][0] == item:
            runs[-1] = (item, runs[-1][1] + 1)
        else:
            runs.append((item, 1))
    return ", ".join(item if count == 1 else f"{item} x{count}" for item, count in runs)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def cmd_demo(args: argparse.Namespace) -> int:
    pools = _pools()
    import onnxruntime as ort

    if args.models:
        mdir = Path(args.models)
        if not mdir.is_dir():
            raise CliError(f"{args.models}: no such directory")
    else:
        mdir = default_models_dir()
    files = sorted(mdir.glob("*.onnx"))
    if not files:
        raise CliError(f"{mdir}: no .onnx files")
    print(
        f"onnx_pools {pools.__version__} ({pools.active_isa()}), onnxruntime {ort.__version__}, "
        f"library {pools.get_library_path()}"
    )
    print(f"models: {mdir}  (intra-op threads: {args.threads}; times: median of runs of the whole model)")
    print()
    rows, failed, n_nodes = [], 0, 0
    for f in files:
        model = load_model(f)
        nodes = pooling_nodes(model)
        vis = value_types(model)
        node_desc = _collapsed([f"{n.op_type}({elem_name(vis.get(n.input[0]))})" for n, _ in nodes]) or "none"
        data = model.SerializeToString()
        try:
            lib = make_session(data, True, args.threads)
            feeds = random_inputs(lib, np.random.default_rng(0))
            before = _counts()
            y_lib = run_session(lib, feeds)
            moved = _moved(before, _counts())
        except Exception as e:
            failed += 1
            rows.append([f.name, node_desc, "-", "-", "-", f"LIBRARY FAILED: {short_reason(e)}"])
            continue
        # "ORT": left to ORT's blocked (NCHWc) layout after convolutions, where it is faster (see session_options)
        served = _collapsed(["library" if moved.get(n.op_type, 0) > 0 else "ORT" for n, _ in nodes]) or "-"
        n_nodes += sum(moved.get(n.op_type, 0) > 0 for n, _ in nodes)
        try:
            stock = make_session(data, False, args.threads)
            y_stock = run_session(stock, feeds)
        except Exception as e:
            rows.append([f.name, node_desc, served, "-", "-", f"stock ORT cannot run: {short_reason(e)}"])
            continue
        diff = max(max_abs_diff(a, b) for a, b in zip(y_lib, y_stock))
        t_lib = median_time(lambda: run_session(lib, feeds))
        t_stock = median_time(lambda: run_session(stock, feeds))
        rows.append([f.name, node_desc, served, f"{diff:.3g}", f"{t_stock / t_lib:.2f}x", ""])
    print(_table(["model", "pooling nodes (op, type)", "kernel", "max |lib - stock|", "speed-up", "note"], rows))
    print(
        f"\n{len(files)} models, {n_nodes} pooling nodes served by the library"
        + (f", {failed} models FAILED with the library" if failed else "")
    )
    return EXIT_FAILED if failed else EXIT_OK


# ------------------------------------------------------------------------------------------------ inspect
def _single_node_model(model: onnx.ModelProto, node: onnx.NodeProto, vis: dict[str, onnx.ValueInfoProto]) -> bytes:
    """A model holding only `node` (inputs typed from shape inference, initializers kept)."""
    from onnx import helper

    inits = {i.name: i for i in model.graph.initializer}
    inputs, initializers, seen = [], [], set()
    for name in node.input:
        if not name or name in seen:
            continue
        seen.add(name)
        if name in inits:
            initializers.append(inits[name])
        elif name in vis:
            inputs.append(vis[name])
        else:
            raise ValueError(f"type of input '{name}' unknown")
    x_type = vis[node.input[0]].type.tensor_type.elem_type if node.input[0] in vis else None
    outputs = []
    for name in node.output:
        if not name:
            continue
        if name in vis:
            outputs.append(vis[name])
        elif x_type:
            outputs.append(helper.make_tensor_value_info(name, x_type, None))
        else:
            raise ValueError(f"type of output '{name}' unknown")
    graph = helper.make_graph([node], "single_node", inputs, outputs, initializer=initializers)
    m = helper.make_model(graph, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return bytes(m.SerializeToString())


def _can_run(data: bytes, library: bool) -> str:
    try:
        make_session(data, library)
        return "yes"
    except Exception as e:
        return f"no ({short_reason(e)})"


def cmd_inspect(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    nodes = pooling_nodes(model)
    vis = value_types(model)
    imports = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in opsets(model).items())
    print(f"{args.model}: ir_version {model.ir_version}, opsets: {imports}, {len(model.graph.node)} nodes")
    if not nodes:
        print(
            f"error: {args.model}: no pooling nodes (the library implements: {', '.join(_pools().OPS)})",
            file=sys.stderr,
        )
        return EXIT_NO_POOLS
    print(f"pooling nodes: {len(nodes)}")
    for node, opset in nodes:
        vi = vis.get(node.input[0])
        shape = "?"
        if vi is not None and vi.type.tensor_type.HasField("shape"):
            shape = "x".join(
                str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                for d in vi.type.tensor_type.shape.dim
            )
        print(
            f"  {node.name or '(unnamed)'}: {node.op_type}  domain={node.domain or 'ai.onnx'}  opset={opset}  "
            f"type={elem_name(vi)}  input={shape}"
        )
        print(f"      attributes: {_attr_str(node)}")
        try:
            data = _single_node_model(model, node, vis)
            print(f"      stock ORT: {_can_run(data, False)}")
            print(f"      library:   {_can_run(data, True)}")
        except ValueError as e:
            print(f"      (cannot test this node alone: {e})")
    data = model.SerializeToString()
    print(f"whole model: stock ORT: {_can_run(data, False)}; library: {_can_run(data, True)}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------------ run
def _load_inputs(specs: list[str] | None, sess: onnxruntime.InferenceSession) -> dict[str, np.ndarray]:
    want = {i.name: i for i in sess.get_inputs()}
    feeds = {}
    for spec in specs or []:
        if "=" not in spec:
            raise CliError(f"--input {spec}: expected name=file.npy")
        name, path = spec.split("=", 1)
        if name not in want:
            raise CliError(f"--input {spec}: the model has no input '{name}' (inputs: {', '.join(want)})")
        if not Path(path).exists():
            raise CliError(f"{path}: no such file")
        try:
            arr = np.load(path, allow_pickle=False)
        except Exception as e:
            raise CliError(f"{path}: not a .npy file ({first_line(e)})") from None
        dt = np_dtype(want[name].type)
        if arr.dtype != dt:
            print(f"note: input '{name}': converting {arr.dtype} to {dt}")
            arr = arr.astype(dt)
        feeds[name] = arr
    return feeds


def cmd_run(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    nodes = pooling_nodes(model)
    try:
        sess = make_session(model.SerializeToString(), True, args.threads)
    except Exception as e:
        raise CliError(f"{args.model}: session creation failed: {short_reason(e, 200)}", EXIT_FAILED) from None
    feeds = _load_inputs(args.input, sess)
    rng = np.random.default_rng(args.seed)
    randoms = {k: v for k, v in random_inputs(sess, rng).items() if k not in feeds}
    for k, v in randoms.items():
        print(f"input {k}: random {v.dtype} {list(v.shape)}")
    feeds.update(randoms)
    before = _counts()
    try:
        outs = run_session(sess, feeds)
    except Exception as e:
        raise CliError(f"{args.model}: run failed: {short_reason(e, 200)}", EXIT_FAILED) from None
    after = _counts()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for meta, y in zip(sess.get_outputs(), outs):
        fname = out_dir / (re.sub(r"[^A-Za-z0-9_.-]", "_", meta.name) + ".npy")
        note = ""
        if is_bfloat16(y.dtype):
            y, note = y.astype(np.float32), " (bfloat16 saved as float32)"
        np.save(fname, y)
        print(f"output {meta.name}: {y.dtype} {list(y.shape)} -> {fname}{note}")
    print(f"outputs written to {out_dir.resolve()}")
    print("library kernel runs: " + ", ".join(f"{k} +{after[k] - before.get(k, 0)}" for k in after))
    if not nodes:
        print(f"error: {args.model}: no pooling nodes (ran it with ORT's kernels only)", file=sys.stderr)
        return EXIT_NO_POOLS
    return EXIT_OK


# ------------------------------------------------------------------------------------------------ bench
def cmd_bench(argv: list[str]) -> int:
    """The benchmark, onnx_pools.bench (`bench --help`)."""
    from onnx_pools.bench import main as bench_main

    return bench_main(argv)


# ------------------------------------------------------------------------------------------------ main
EPILOG = """exit status: 0 ok; 1 the library failed to run a model; 2 bad arguments, missing file or not an ONNX
model; 3 the model has no node the library handles (run still runs it)."""


def program_name() -> str:
    """How the user called us: `onnx-pools` (the installed command) or `python -m onnx_pools`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "onnx-pools" if name.startswith("onnx-pools") else "python -m onnx_pools"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=program_name(),
        description="onnx-pools: pooling kernels for ONNX Runtime.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", metavar="{demo,inspect,run,bench}")
    d = sub.add_parser("demo", help="run the bundled models with the library and with stock ORT")
    d.add_argument("--models", help="folder of .onnx models (default: the bundled models)")
    d.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    i = sub.add_parser("inspect", help="list a model's pooling nodes and who can run them")
    i.add_argument("model")
    r = sub.add_parser("run", help="run a model with the library, save the outputs")
    r.add_argument("model")
    r.add_argument(
        "--input",
        action="append",
        metavar="NAME=FILE.npy",
        help="an input (repeatable); inputs not given are random (symbolic dims -> 1)",
    )
    r.add_argument("--out", default="outputs", help="folder for the outputs (default ./outputs)")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    sub.add_parser("bench", help="the benchmark: library vs stock ORT vs PyTorch (bench --help)", add_help=False)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "bench":
            return cmd_bench(argv[1:]) or 0
        ap = build_parser()
        args = ap.parse_args(argv)
        if args.cmd is None:
            ap.print_help()
            return EXIT_USAGE
        command = {"demo": cmd_demo, "inspect": cmd_inspect, "run": cmd_run}[args.cmd]
        return command(args)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (ImportError, OSError) as e:  # the package or its shared library cannot be loaded
        print(f"error: cannot load onnx_pools: {first_line(e)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
