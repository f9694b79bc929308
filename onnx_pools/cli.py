"""Command line of onnx-pools: ``onnx-pools {demo,inspect,run,bench} ...`` (or ``python -m onnx_pools ...``).

    demo [--models DIR]       run every bundled model with the library and with stock ONNX Runtime, print a table
    inspect MODEL             list the pooling nodes of a model and whether stock ORT / the library can run each
    run MODEL [--input name=file.npy ...] [--out DIR]
                              run a model with the library; random inputs where none are given; save outputs (.npy)
    bench [args]              the benchmark (bench/bench.py; installed with the package as onnx_pools/_bench.py;
                              `bench --help` for its options)

Exit status: 0 ok; 1 the library failed to run a model; 2 bad arguments, missing file or a file that is not ONNX;
3 the model has no node the library handles (`run` still runs it).
There is no pooling logic here: all computation is done by ONNX Runtime with the library's kernels.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_POOLS = 0, 1, 2, 3

PACKAGE_DIR = Path(__file__).resolve().parent


class CliError(Exception):
    """An error reported as one line `error: ...` with an exit status."""

    def __init__(self, msg, code=EXIT_USAGE):
        super().__init__(msg)
        self.code = code


# ------------------------------------------------------------------------------------------------ small helpers
def _ort():
    import onnxruntime

    return onnxruntime


def _pools():
    import onnx_pools

    return onnx_pools


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def load_model(path):
    """onnx.ModelProto from a path; CliError for a missing file or a file that is not an ONNX model."""
    import onnx

    p = Path(path)
    if not p.exists():
        raise CliError(f"{path}: no such file")
    if p.is_dir():
        raise CliError(f"{path}: is a directory, not an ONNX model")
    try:
        model = onnx.load(str(p))
    except Exception as e:  # protobuf DecodeError and friends
        raise CliError(f"{path}: not an ONNX model ({_first_line(e)})") from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.node:
        raise CliError(f"{path}: not an ONNX model (no graph)")
    return model


def _first_line(e, limit=160):
    s = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return s if len(s) <= limit else s[: limit - 3] + "..."


def short_reason(e, limit=90):
    """ONNX Runtime's error message cut down to a short reason."""
    msg = str(e)
    msg = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", msg)
    msg = re.sub(r"Load model from .*? failed:", "", msg)
    msg = msg.replace("This is an invalid model. ", "").strip()
    m = re.search(r"Could not find an implementation for (\w+)\((\d+)\)", msg)
    if m:
        return f"no kernel for {m.group(1)}-{m.group(2)}"
    m = re.search(r"Type '(tensor\(\w+\))' of input parameter \(.*?\) of operator \((\w+)\)", msg)
    if m:
        return f"{m.group(2)} does not accept {m.group(1)}"
    m = re.search(r"\(op_type:(\w+)[^)]*\): (.*)", msg)
    if m:
        msg = f"{m.group(1)}: {m.group(2)}"
    return _first_line(msg, limit)


def _domain(d):
    return "" if d in ("", "ai.onnx") else d


def _opsets(model):
    return {_domain(o.domain): o.version for o in model.opset_import}


def pooling_nodes(model):
    """[(node, opset)] of the nodes the library implements (onnx_pools.OPS), subgraphs included."""
    ops = _pools().OPS
    opsets = _opsets(model)
    found = []

    def walk(graph):
        for node in graph.node:
            d = _domain(node.domain)
            if node.op_type in ops and ops[node.op_type] == d:
                found.append((node, opsets.get(d)))
            for a in node.attribute:
                if a.type == a.GRAPH:
                    walk(a.g)
                elif a.type == a.GRAPHS:
                    for g in a.graphs:
                        walk(g)

    walk(model.graph)
    return found


def _inferred(model):
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:
        return model


def value_types(model):
    """{tensor name: onnx ValueInfoProto} after shape inference (initializers included as type-only entries)."""
    from onnx import helper

    inf = _inferred(model)
    vis = {}
    for init in model.graph.initializer:
        vis[init.name] = helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
    for vi in list(inf.graph.input) + list(inf.graph.value_info) + list(inf.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            vis[vi.name] = vi
    # onnx's inference does not know com.microsoft ops: X of a QLinearAveragePool has its zero point's type
    inits = {i.name: i for i in model.graph.initializer}
    for node, _ in pooling_nodes(model):
        if (
            node.op_type == "QLinearAveragePool"
            and node.input[0] not in vis
            and len(node.input) > 2
            and node.input[2] in inits
        ):
            vis[node.input[0]] = helper.make_tensor_value_info(node.input[0], inits[node.input[2]].data_type, None)
    return vis


def elem_name(vi):
    """ONNX's name of the element type, lower case ("float", "bfloat16"): the names of onnx_pools.TYPES."""
    from onnx import TensorProto

    if vi is None:
        return "?"
    t = vi.type.tensor_type.elem_type
    return TensorProto.DataType.Name(t).lower() if t in TensorProto.DataType.values() else str(t)


def _attr_str(node):
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


def session_options(library, threads=1, model=None):
    ort = _ort()
    so = _pools().session_options(model=model) if library else ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


def make_session(model_bytes, library, threads=1):
    ort = _ort()
    return ort.InferenceSession(
        model_bytes, session_options(library, threads, model_bytes), providers=["CPUExecutionProvider"]
    )


# ------------------------------------------------------------------------------------------------ running
_NP_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def np_dtype(ort_type):
    if ort_type == "tensor(bfloat16)":
        return _bf16()
    if ort_type not in _NP_TYPES:
        raise CliError(f"unsupported input type {ort_type}")
    return np.dtype(_NP_TYPES[ort_type])


def random_inputs(sess, rng=None, sym_dim=1):
    """Random feeds of the right shape and type for every input of sess (symbolic dims -> sym_dim)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else sym_dim for d in (i.shape or [])]
        dt = np_dtype(i.type)
        if dt.kind == "f" or dt == _bf16():
            if "scale" in i.name.lower():
                x = rng.uniform(0.01, 0.1, size=shape)
            else:
                x = rng.standard_normal(size=shape)
            feeds[i.name] = np.asarray(x).astype(dt)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            lo, hi = max(info.min, -128), min(info.max, 255)
            if "zero_point" in i.name.lower():
                lo, hi = (0, 0) if dt.kind == "i" else (128, 128)
            feeds[i.name] = rng.integers(lo, hi + 1, size=shape).astype(dt)
        else:
            feeds[i.name] = rng.integers(0, 2, size=shape).astype(dt)
    return feeds


def to_ortvalue(array):
    """An OrtValue over `array`'s memory (no copy for a C-contiguous array, even a misaligned one). onnxruntime's
    Python API has no numpy type for bfloat16: an ml_dtypes.bfloat16 array goes over as its uint16 bit pattern with
    the ONNX element type given. The one place the package and its tests convert bfloat16 data."""
    from onnx import TensorProto

    ort = _ort()
    array = np.ascontiguousarray(array)
    if array.dtype == _bf16():
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(array)


def from_ortvalue(ortvalue):
    """The OrtValue's data as a numpy array; a bfloat16 one (which OrtValue.numpy() cannot return) is copied from the
    OrtValue's memory as ml_dtypes.bfloat16."""
    if ortvalue.data_type() != "tensor(bfloat16)":
        return ortvalue.numpy()
    shape = ortvalue.shape()
    nbytes = 2 * int(np.prod(shape))
    raw = ctypes.string_at(ortvalue.data_ptr(), nbytes) if nbytes else b""
    return np.frombuffer(raw, np.uint16).view(_bf16()).reshape(shape).copy()


def run_session(sess, feeds):
    """sess.run for {name: array}; bfloat16 (ml_dtypes) inputs/outputs go through OrtValues."""
    if not any(np.asarray(v).dtype == _bf16() for v in feeds.values()) and not any(
        o.type == "tensor(bfloat16)" for o in sess.get_outputs()
    ):
        return sess.run(None, feeds)
    outs = sess.run_with_ort_values(None, {k: to_ortvalue(v) for k, v in feeds.items()})
    return [from_ortvalue(o) for o in outs]


def _median_time(fn, target=0.15, min_runs=5, max_runs=200):
    fn()  # warm-up
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    n = int(min(max_runs, max(min_runs, target / max(first, 1e-6))))
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def max_abs_diff(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    if a.dtype.kind in "iub":
        return float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
    a, b = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    d = np.abs(a - b)
    d[both_nan] = 0.0
    return float(np.max(d))


def _counts():
    return dict(_pools().call_counts())


def _moved(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


# ------------------------------------------------------------------------------------------------ demo
def _collapsed(items):
    """'a, a, a, b' as 'a x3, b': a model's nine identical pooling nodes read as one entry."""
    runs = []
    for item in items:
        if runs and runs[-1][0] == item:
            runs[-1][1] += 1
        else:
            runs.append([item, 1])
    return ", ".join(item if count == 1 else f"{item} x{count}" for item, count in runs)


def default_models_dir():
    """models/ of the source checkout, else ./models, else the models installed with the package (onnx_pools/models)."""
    candidates = []
    repo = PACKAGE_DIR.parent
    if (repo / "models" / "make_models.py").exists():
        candidates.append(repo / "models")
    candidates += [Path.cwd() / "models", PACKAGE_DIR / "models"]
    for c in candidates:
        if c.is_dir() and any(c.glob("*.onnx")):
            return c
    raise CliError(
        "no bundled models found (looked in " + ", ".join(str(c) for c in candidates) + "); pass --models DIR"
    )


def _table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def cmd_demo(args):
    pools = _pools()
    ort = _ort()
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
        t_lib = _median_time(lambda: run_session(lib, feeds))
        t_stock = _median_time(lambda: run_session(stock, feeds))
        rows.append([f.name, node_desc, served, f"{diff:.3g}", f"{t_stock / t_lib:.2f}x", ""])
    print(_table(["model", "pooling nodes (op, type)", "kernel", "max |lib - stock|", "speed-up", "note"], rows))
    print(
        f"\n{len(files)} models, {n_nodes} pooling nodes served by the library"
        + (f", {failed} models FAILED with the library" if failed else "")
    )
    return EXIT_FAILED if failed else EXIT_OK


# ------------------------------------------------------------------------------------------------ inspect
def _single_node_model(model, node, vis):
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
    return m.SerializeToString()


def _can_run(data, library):
    try:
        make_session(data, library)
        return "yes"
    except Exception as e:
        return f"no ({short_reason(e)})"


def cmd_inspect(args):
    model = load_model(args.model)
    nodes = pooling_nodes(model)
    vis = value_types(model)
    opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in _opsets(model).items())
    print(f"{args.model}: ir_version {model.ir_version}, opsets: {opsets}, {len(model.graph.node)} nodes")
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
def _load_inputs(specs, sess):
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
            raise CliError(f"{path}: not a .npy file ({_first_line(e)})") from None
        dt = np_dtype(want[name].type)
        if arr.dtype != dt:
            print(f"note: input '{name}': converting {arr.dtype} to {dt}")
            arr = arr.astype(dt)
        feeds[name] = arr
    return feeds


def cmd_run(args):
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
        if y.dtype == _bf16():
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
def find_bench():
    """bench/bench.py of a source checkout (the package's own, or the cwd's with the package installed), else the
    copy installed with the package (onnx_pools/_bench.py, put there by setup.py)."""
    for root in (PACKAGE_DIR.parent, Path.cwd()):
        p = root / "bench" / "bench.py"
        if p.exists():
            return p
    p = PACKAGE_DIR / "_bench.py"
    return p if p.exists() else None


def cmd_bench(argv):
    p = find_bench()
    if p is None:
        raise CliError(
            f"the benchmark is not installed ({PACKAGE_DIR / '_bench.py'} is missing) and there is no "
            "bench/bench.py here; reinstall the package from a wheel or run from a source checkout"
        )
    spec = importlib.util.spec_from_file_location("onnx_pools_bench", p)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up
    spec.loader.exec_module(mod)
    return mod.main(argv)


# ------------------------------------------------------------------------------------------------ main
EPILOG = """exit status: 0 ok; 1 the library failed to run a model; 2 bad arguments, missing file or not an ONNX
model; 3 the model has no node the library handles (run still runs it)."""


def program_name():
    """How the user called us: `onnx-pools` (the installed command) or `python -m onnx_pools`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "onnx-pools" if name.startswith("onnx-pools") else "python -m onnx_pools"


def build_parser():
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


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "bench":
            return cmd_bench(argv[1:]) or 0
        ap = build_parser()
        args = ap.parse_args(argv)
        if args.cmd is None:
            ap.print_help()
            return EXIT_USAGE
        return {"demo": cmd_demo, "inspect": cmd_inspect, "run": cmd_run}[args.cmd](args)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except (ImportError, OSError) as e:  # the package or its shared library cannot be loaded
        print(f"error: cannot load onnx_pools: {_first_line(e)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
