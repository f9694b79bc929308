"""Do subnormal (denormal) inputs slow the kernels down? Library vs stock ONNX Runtime.

    python bench/denormals.py [--quick] [--threads 1] [--dtypes float32,float64,float16,bfloat16] [--json FILE]

For each float op and element type, the same one-node model is timed on three inputs of the same shape:
  normal     |x| in [0.5, 1.5], random signs;
  subnormal  |x| in [0.5, 1.5] * a subnormal of the type (1e-39 float32, 1e-310 float64, 4e-5 float16, 5e-39
             bfloat16): every element, and every |x|^p, is subnormal or underflows;
  tiny       normal numbers whose powers underflow (|x| ~ 1e-20 float32/bfloat16, 1e-160 float64, 1e-3 float16): the
             Lp kernels' overflow/underflow-safe path.
Time = median of runs (IOBinding with pre-bound OrtValues) after warm-up; the table gives each median and the
ratio to the normal input of the same session. Stock ORT is timed where it has a kernel (float32; float16 through
the Casts ORT inserts); '-' elsewhere. The library's call counter is checked to move on every library run.
No pass/fail: a ratio far above 1 is the finding (denormals must not slow a kernel by orders of magnitude).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

try:
    import onnx_pools
except ImportError:  # run as a script from a checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import onnx_pools

import ml_dtypes
import onnxruntime as ort
from onnx import TensorProto, helper

from onnx_pools.cli import to_ortvalue

BF16 = np.dtype(ml_dtypes.bfloat16)
TYPES = {
    "float32": (np.dtype(np.float32), TensorProto.FLOAT),
    "float64": (np.dtype(np.float64), TensorProto.DOUBLE),
    "float16": (np.dtype(np.float16), TensorProto.FLOAT16),
    "bfloat16": (BF16, TensorProto.BFLOAT16),
}
SUBNORMAL = {"float32": 1e-39, "float64": 1e-310, "float16": 4e-5, "bfloat16": 5e-39}
TINY = {"float32": 1e-20, "float64": 1e-160, "float16": 1e-3, "bfloat16": 1e-20}
KINDS = ("normal", "subnormal", "tiny")

CASES = [
    ("GlobalAveragePool", {}, (8, 64, 56, 56)),
    ("GlobalMaxPool", {}, (8, 64, 56, 56)),
    ("GlobalLpPool p=2", {"p": 2}, (8, 64, 56, 56)),
    ("GlobalLpPool p=3", {"p": 3}, (8, 64, 56, 56)),
    ("LpPool 3x3 s1 pad1 p=2", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}, (4, 32, 56, 56)),
    ("LpPool 2x2 s2 p=3", {"kernel_shape": [2, 2], "strides": [2, 2], "p": 3}, (4, 32, 56, 56)),
]


def model_bytes(op, attrs, dtype, shape):
    T = TYPES[dtype][1]
    node = helper.make_node(op, ["X"], ["Y"], name="pool", **attrs)
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", T, list(shape))], [helper.make_tensor_value_info("Y", T, None)]
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m.SerializeToString()


def make_input(kind, dtype, shape, rng):
    mag = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    scale = {"normal": 1.0, "subnormal": SUBNORMAL[dtype], "tiny": TINY[dtype]}[kind]
    return (mag * scale).astype(TYPES[dtype][0])


def session(model, library, threads):
    so = onnx_pools.session_options() if library else ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def median_ms(sess, x_value, target, op_name, library):
    binding = sess.io_binding()
    binding.bind_ortvalue_input("X", x_value)
    binding.bind_output("Y")
    before = onnx_pools.call_counts()[op_name] if library else 0
    for _ in range(3):
        sess.run_with_iobinding(binding)
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < target and len(times) < 2000):
        t = time.perf_counter()
        sess.run_with_iobinding(binding)
        times.append(time.perf_counter() - t)
    if library:
        moved = onnx_pools.call_counts()[op_name] - before
        assert moved == len(times) + 3, f"library kernel ran {moved} times for {len(times) + 3} runs"
    return statistics.median(times) * 1e3


def bench(dtypes, threads, target):
    rng = np.random.default_rng(0)
    rows = []
    for label, attrs, shape in CASES:
        op = label.split()[0]
        for dtype in dtypes:
            model = model_bytes(op, attrs, dtype, shape)
            inputs = {k: to_ortvalue(make_input(k, dtype, shape, rng)) for k in KINDS}
            row = {"case": f"{label} {'x'.join(map(str, shape))}", "dtype": dtype, "threads": threads}
            for impl in ("lib", "stock"):
                try:
                    sess = session(model, impl == "lib", threads)
                    for k in KINDS:
                        row[f"{impl} {k} ms"] = median_ms(sess, inputs[k], target, op, impl == "lib")
                except Exception as e:  # stock ORT has no kernel for this type / op version
                    row[f"{impl} error"] = str(e).splitlines()[0][:120]
                    for k in KINDS:
                        row[f"{impl} {k} ms"] = None
                for k in KINDS[1:]:
                    base, t = row[f"{impl} normal ms"], row[f"{impl} {k} ms"]
                    row[f"{impl} {k} ratio"] = (t / base) if base and t else None
            rows.append(row)
            print(_line(row), flush=True)
    return rows


def _f(v, fmt="{:.3f}"):
    return "-" if v is None else fmt.format(v)


HEADER = (
    "| case | type | lib normal ms | lib subnormal ms | lib tiny ms | lib subnormal/normal | lib tiny/normal | "
    "stock normal ms | stock subnormal ms | stock tiny ms | stock subnormal/normal | stock tiny/normal |"
)


def _line(r):
    cells = [r["case"], r["dtype"]]
    for impl in ("lib", "stock"):
        cells += [_f(r[f"{impl} {k} ms"]) for k in KINDS]
        cells += [_f(r[f"{impl} {k} ratio"], "{:.2f}") for k in KINDS[1:]]
    return "| " + " | ".join(cells) + " |"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="about 0.1 s per measurement instead of 0.5 s")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    ap.add_argument("--dtypes", default="float32,float64,float16,bfloat16")
    ap.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    args = ap.parse_args(argv)
    print(
        f"onnx-pools denormal benchmark: {platform.processor() or platform.machine()}, onnxruntime {ort.__version__}, "
        f"library isa {onnx_pools.active_isa()}, {args.threads} thread(s)"
    )
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    rows = bench(args.dtypes.split(","), args.threads, 0.1 if args.quick else 0.5)
    worst = {}
    for impl in ("lib", "stock"):
        ratios = [r[f"{impl} {k} ratio"] for r in rows for k in KINDS[1:] if r[f"{impl} {k} ratio"] is not None]
        worst[impl] = max(ratios) if ratios else None
    print(
        f"\nworst slowdown vs normal input: library {_f(worst['lib'], '{:.2f}')}x, "
        f"stock ORT {_f(worst['stock'], '{:.2f}')}x"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "worst": worst}, f, indent=1)


if __name__ == "__main__":
    main()
