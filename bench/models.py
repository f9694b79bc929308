"""Whole models, stock ONNX Runtime vs the library: does registering onnx-pools ever make a model slower?

    python bench/models.py [--threads 1,2] [--quick]

Models: small CNNs (random weights, made here with onnx.helper) whose head is a GlobalAveragePool or GlobalMaxPool
fed by convolutions, at batch 1 and 8, plus every model in models/. Each is timed with
  * stock:    a plain session,
  * lib:      onnx_pools.session_options(model=...) (the default: ORT keeps global pools it takes into its NCHWc
              layout),
  * lib-all:  session_options(model=..., ort_layout=False) (the library's kernels everywhere),
  * plain:    so.register_custom_ops_library(...) alone,
in interleaved rounds (medians), and the layout nodes (ReorderInput / ReorderOutput, com.microsoft.nchwc ops) of
each optimised graph are listed: a custom pool that ORT cannot take into its blocked layout shows up as a
ReorderOutput of the pool's whole input.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

try:
    import onnx_pools
except ImportError:  # run as a script from a checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import onnx_pools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ort.set_default_logger_severity(3)  # the warning about saving an NCHWc-optimised graph is expected here


def cnn(head, batch, width=96, channels=128):
    """Conv 3->32 -> Relu -> Conv 32->channels (stride 2) -> Relu -> head -> Flatten -> Gemm (10 classes)."""
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [
        weight("w1", 32, 3, 3, 3),
        weight("b1", 32),
        weight("w2", channels, 32, 3, 3),
        weight("b2", channels),
        weight("wf", 10, channels),
        weight("bf", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["X", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node(head, ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["Y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        f"cnn_{head}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch, 3, width, width])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [batch, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model.SerializeToString()


def models():
    out = []
    for head in ("GlobalAveragePool", "GlobalMaxPool"):
        for batch in (1, 8):
            out.append((f"CNN {head} head, batch {batch} (pool input {batch}x128x48x48)", cnn(head, batch)))
    for path in sorted(glob.glob(os.path.join(ROOT, "models", "*.onnx"))):
        with open(path, "rb") as f:
            out.append((os.path.basename(path), f.read()))
    return out


def feeds_for(sess, rng):
    feeds = {}
    types = {
        "tensor(float)": np.float32,
        "tensor(float16)": np.float16,
        "tensor(double)": np.float64,
        "tensor(uint8)": np.uint8,
        "tensor(int8)": np.int8,
    }
    for i in sess.get_inputs():
        if i.type not in types:
            return None  # e.g. bfloat16: numpy has no such type without ml_dtypes
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        dtype = types[i.type]
        if np.dtype(dtype).kind in "iu":
            info = np.iinfo(dtype)
            feeds[i.name] = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def options(engine, model, threads, optimized_path=None):
    if engine == "stock":
        so = ort.SessionOptions()
    elif engine == "plain":
        so = ort.SessionOptions()
        so.register_custom_ops_library(onnx_pools.get_library_path())
    else:
        so = onnx_pools.session_options(model=model, ort_layout=(engine == "lib"))
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return so


def layout_nodes(path):
    m = onnx.load(path)
    c = Counter(
        f"{n.domain + '.' if n.domain else ''}{n.op_type}"
        for n in m.graph.node
        if n.op_type.startswith("Reorder") or n.domain == "com.microsoft.nchwc"
    )
    return ", ".join(f"{k} x{v}" for k, v in sorted(c.items())) or "none"


ENGINES = ("stock", "lib", "lib-all", "plain")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python bench/models.py", description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--quick", action="store_true", help="about 0.2 s per engine and round instead of 1 s")
    ap.add_argument("--models", help="comma-separated substrings of the model names to run")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    per_round = 0.04 if args.quick else 0.2
    rng = np.random.default_rng(0)
    print(f"onnx_pools {onnx_pools.__version__} (ISA {onnx_pools.active_isa()}), onnxruntime {ort.__version__}\n")
    print(
        "| model | threads | stock ms | lib ms | lib-all ms | plain ms | lib vs stock | lib-all vs stock "
        "| plain vs stock | layout nodes: stock / lib / lib-all |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models():
            if args.models and not any(s in name for s in args.models.split(",")):
                continue
            for t in threads:
                sessions, layouts = {}, {}
                try:
                    for e in ENGINES:
                        path = os.path.join(tmp, f"{e}.onnx")
                        sessions[e] = ort.InferenceSession(model, options(e, model, t, path))
                        layouts[e] = layout_nodes(path)
                except Exception as exc:  # e.g. a model stock ORT cannot run
                    print(f"| {name} | {t} | {str(exc).splitlines()[0][:80]} |")
                    break
                feeds = feeds_for(sessions["stock"], rng)
                if feeds is None:
                    break
                samples = {e: [] for e in ENGINES}
                for e in ENGINES:
                    sessions[e].run(None, feeds)
                for _ in range(5):
                    for e in ENGINES:
                        end = time.perf_counter() + per_round
                        while True:
                            t0 = time.perf_counter()
                            sessions[e].run(None, feeds)
                            samples[e].append(time.perf_counter() - t0)
                            if t0 > end:
                                break
                ms = {e: statistics.median(v) * 1e3 for e, v in samples.items()}
                ratios.append(ms["stock"] / ms["lib"])
                print(
                    f"| {name} | {t} | {ms['stock']:.3f} | {ms['lib']:.3f} | {ms['lib-all']:.3f} | {ms['plain']:.3f} "
                    f"| {ms['stock'] / ms['lib']:.2f} | {ms['stock'] / ms['lib-all']:.2f} "
                    f"| {ms['stock'] / ms['plain']:.2f} "
                    f"| {layouts['stock']} / {layouts['lib']} / {layouts['lib-all']} |",
                    flush=True,
                )
    if ratios:
        print(
            f"\ngeomean lib vs stock (session_options(model=...)): {np.exp(np.mean(np.log(ratios))):.3f} "
            f"over {len(ratios)} model x thread runs; worst {min(ratios):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
