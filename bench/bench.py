"""onnx-pools benchmark: the library's kernels vs stock ONNX Runtime vs PyTorch.

    python bench/bench.py [--threads 1,2] [--quick] [--cases SUBSTR[,SUBSTR]] [--json FILE] [--markdown FILE]
    python bench/bench.py --scaling [--isa ...] [--cases ...]    (the library's 1 -> 2 thread scaling, alone)
    python bench/bench.py --spread [--isa ...]    (QLinearAveragePool: each configuration of a shape vs the fastest)
    python -m onnx_pools bench [same options]

Each case is a one-node ONNX model.  It is timed
  * lib:   with the onnx_pools library registered (onnx_pools.session_options()); the library's call counter is
           checked to have moved once per run,
  * stock: the same model in a plain onnxruntime session,
  * torch: the nearest PyTorch call, where there is one,
at each intra-op thread count (ORT: intra_op_num_threads = t, inter_op_num_threads = 1, sequential execution;
torch.set_num_threads(t)).  ORT runs use IOBinding with pre-created input and output OrtValues.  Each engine and
thread count of a case is timed in 5 interleaved rounds (a noisy stretch of a shared machine then hits all of them);
time = median of all its runs, about 1 s of them (0.2 s with --quick) per thread count.  Inputs up to 1 MiB (runs
of microseconds) are timed as means of bursts of runs (~0.3 ms each) in 40 interleaved rounds instead.
GB/s = bytes of the input / median time.  The read-bandwidth ceiling is measured in the same run: the median times
of numpy's max and sum (one thread), torch's sum and amax and the library's GlobalMaxPool (t threads) over a 128 MB
float32 array (four times the last-level cache); the fastest counts.  The big global pools' and LpPool's (inputs over
1 MiB) is read again in their own rounds (the library's GlobalMaxPool over that array), and their % of ceiling uses
it.
Outputs of lib and stock are compared (max |lib - stock| relative to max |stock|; quantized: in steps).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field

# numpy's OpenBLAS worker threads (none of this timing uses BLAS) took CPU from the timed thread on a 2-core machine
# (4-5% of perf samples in blas_thread_server): one thread, before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

try:
    import onnx_pools
except ImportError:  # run as a script from a checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import onnx_pools

import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnx_pools.cli import max_abs_diff

# A timing worker (IsaWorker) runs only the library: it skips torch's import (~3 s each, and threads of its own).
if sys.argv[1:] == ["--isa-worker"]:
    torch = None
else:
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:  # torch columns become "-"
        torch = None

OPSET = 18
IR_VERSION = 9


@dataclass
class Case:
    label: str
    op: str
    dtype: str  # float32 | float16 | uint8
    shape: tuple
    attrs: dict = field(default_factory=dict)
    nonneg: bool = False  # feed |x| (torch's lp_pool2d sums x^p with its sign)
    torch_fn: object = None  # callable(tensor) -> tensor, or None
    torch_desc: str = ""

    def name(self, shape=None):
        return f"{self.label} {'x'.join(map(str, shape or self.shape))}"


def _lp_pool_padded(p, k, s, pad):
    # F.lp_pool2d has no padding argument; this is its own formula with avg_pool2d's zero padding.
    def fn(x):
        return F.avg_pool2d(x.pow(p), k, s, padding=pad, count_include_pad=True).mul(k * k).pow(1.0 / p)

    return fn


def make_cases():
    t = torch is not None
    # (callable, description) of the nearest PyTorch call per kind of case; none where torch is absent
    gap = ((lambda x: F.adaptive_avg_pool2d(x, 1)) if t else None, "adaptive_avg_pool2d")
    gmp = ((lambda x: torch.amax(x, dim=(2, 3), keepdim=True)) if t else None, "amax(dim=(2,3))")
    glp2 = (
        (lambda x: torch.linalg.vector_norm(x, 2, dim=(2, 3), keepdim=True)) if t else None,
        "linalg.vector_norm(dim=(2,3))",
    )
    lp3x3 = (
        _lp_pool_padded(2, 3, 1, 1) if t else None,
        "avg_pool2d(x^2, pad 1)*9, sqrt (lp_pool2d's formula; it has no padding)",
    )
    lp3x3_attrs = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "p": 2}
    q3x3 = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}
    qtorch = (
        _torch_quantized_avg_pool(3, 1, 1) if t else None,
        "ao.nn.quantized.functional.avg_pool2d, channels_last quint8/qint8 (x86 engine)",
    )

    def case(label, op, dtype, shape, attrs=None, torch_call=(None, ""), nonneg=False):
        return Case(label, op, dtype, shape, attrs or {}, nonneg, torch_call[0], torch_call[1])

    return [
        case("GlobalAveragePool f32", "GlobalAveragePool", "float32", (32, 64, 112, 112), torch_call=gap),
        case("GlobalAveragePool f32", "GlobalAveragePool", "float32", (1, 2048, 7, 7), torch_call=gap),
        case("GlobalMaxPool f32", "GlobalMaxPool", "float32", (8, 256, 56, 56), torch_call=gmp),
        case("GlobalLpPool p=2 f32", "GlobalLpPool", "float32", (8, 256, 56, 56), {"p": 2}, glp2),
        case("LpPool 3x3 s1 pad1 p=2 f32", "LpPool", "float32", (8, 64, 56, 56), lp3x3_attrs, lp3x3),
        case(
            "LpPool 2x2 s2 p=3 f32",
            "LpPool",
            "float32",
            (8, 64, 112, 112),
            {"kernel_shape": [2, 2], "strides": [2, 2], "p": 3},
            ((lambda x: F.lp_pool2d(x, 3, 2, 2)) if t else None, "lp_pool2d (input >= 0)"),
            nonneg=True,
        ),
        *[
            case(
                f"QLinearAveragePool 3x3 pad1 {short} {layout} {config}",
                "QLinearAveragePool",
                dtype,
                (8, 56, 56, 64) if layout == "NHWC" else (8, 64, 56, 56),
                {**q3x3, "channels_last": int(layout == "NHWC"), "count_include_pad": int(config.endswith("cip1"))},
                qtorch,
            )
            for short, dtype in (("u8", "uint8"), ("s8", "int8"))
            for layout in ("NCHW", "NHWC")
            for config in ("distinct cip0", "distinct cip1", "equal cip0", "equal cip1")
        ],
        case("GlobalAveragePool f64", "GlobalAveragePool", "float64", (4, 256, 56, 56), torch_call=gap),
        case("GlobalMaxPool f32", "GlobalMaxPool", "float32", (1, 2048, 7, 7), torch_call=gmp),
        case("GlobalMaxPool f16", "GlobalMaxPool", "float16", (4, 256, 56, 56), torch_call=gmp),
        case("GlobalMaxPool f64", "GlobalMaxPool", "float64", (4, 256, 56, 56), torch_call=gmp),
        case("GlobalLpPool p=2 f16", "GlobalLpPool", "float16", (4, 256, 56, 56), {"p": 2}, glp2),
        case("GlobalLpPool p=2 f64", "GlobalLpPool", "float64", (4, 256, 56, 56), {"p": 2}, glp2),
        case(
            "GlobalAveragePool f16",
            "GlobalAveragePool",
            "float16",
            (32, 64, 112, 112),
            torch_call=(gap[0], "adaptive_avg_pool2d (half)"),
        ),
        # Tiny tensors: what is left is the per-run cost of a node, where a custom op must not lose either.
        case("tiny GlobalAveragePool f32", "GlobalAveragePool", "float32", (1, 8, 4, 4), torch_call=gap),
        case("tiny GlobalMaxPool f32", "GlobalMaxPool", "float32", (1, 1, 1, 1), torch_call=gmp),
        case("tiny GlobalLpPool p=2 f32", "GlobalLpPool", "float32", (1, 8, 4, 4), {"p": 2}, glp2),
        case("tiny LpPool 3x3 pad1 p=2 f32", "LpPool", "float32", (1, 4, 8, 8), lp3x3_attrs, lp3x3),
        case(
            "tiny QLinearAveragePool 3x3 pad1 u8 NCHW",
            "QLinearAveragePool",
            "uint8",
            (1, 4, 8, 8),
            {**q3x3, "channels_last": 0},
        ),
        case(
            "tiny QLinearAveragePool 3x3 pad1 u8 NHWC",
            "QLinearAveragePool",
            "uint8",
            (1, 8, 8, 4),
            {**q3x3, "channels_last": 1},
        ),
    ]


_ONNX_TYPES = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "float64": TensorProto.DOUBLE,
    "uint8": TensorProto.UINT8,
    "int8": TensorProto.INT8,
}


def qlinear_params(case):
    """(x_scale, x_zero_point, y_scale, y_zero_point) of a QLinearAveragePool case: distinct by default, equal
    scales and zero points (what a TFLite-style quantized average pool has) for the "equal" cases."""
    mid = 128 if case.dtype == "uint8" else 0
    if "equal" in case.label:
        return 0.02, mid, 0.02, mid
    return 0.02, mid, 0.015, mid - 8


def _torch_quantized_avg_pool(k, s, pad):
    """PyTorch's quantized average pool on a channels_last quantized tensor (the input quantized once, outside the
    timing), with the case's scales."""

    def make(case, x):
        xs, xz, ys, yz = qlinear_params(case)
        nchw = torch.from_numpy(np.moveaxis(x, -1, 1) if case.attrs.get("channels_last") else x)
        qtype = torch.quint8 if case.dtype == "uint8" else torch.qint8
        deq = (nchw.to(torch.float32) - xz) * xs
        qx = torch.quantize_per_tensor(deq, xs, xz, qtype).contiguous(memory_format=torch.channels_last)
        cip = bool(case.attrs.get("count_include_pad"))
        return lambda: torch.ao.nn.quantized.functional.avg_pool2d(qx, k, s, pad, count_include_pad=cip)

    make.needs_case = True
    return make


def build_model(case, shape):
    T = _ONNX_TYPES[case.dtype]
    inits = []
    opsets = [helper.make_opsetid("", OPSET)]
    if case.op == "QLinearAveragePool":
        # both zero points given: stock ORT fails type inference without them
        inputs = ["X", "x_scale", "x_zero_point", "y_scale", "y_zero_point"]
        xs, xz, ys, yz = qlinear_params(case)
        zp = np.uint8 if case.dtype == "uint8" else np.int8
        inits = [
            numpy_helper.from_array(np.array(xs, np.float32), "x_scale"),
            numpy_helper.from_array(np.array(xz, zp), "x_zero_point"),
            numpy_helper.from_array(np.array(ys, np.float32), "y_scale"),
            numpy_helper.from_array(np.array(yz, zp), "y_zero_point"),
        ]
        node = helper.make_node(case.op, inputs, ["Y"], domain="com.microsoft", **case.attrs)
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    else:
        node = helper.make_node(case.op, ["X"], ["Y"], **case.attrs)
    graph = helper.make_graph(
        [node],
        "bench",
        [helper.make_tensor_value_info("X", T, list(shape))],
        [helper.make_tensor_value_info("Y", T, None)],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = IR_VERSION
    return m.SerializeToString()


def make_input(case, shape, rng):
    if case.dtype in ("uint8", "int8"):
        info = np.iinfo(case.dtype)
        return rng.integers(info.min, info.max + 1, size=shape).astype(case.dtype)
    x = rng.standard_normal(size=shape, dtype=np.float32)
    if case.nonneg:
        np.abs(x, out=x)
    return x.astype(case.dtype, copy=False)


def small_shape(shape):
    return tuple(1 if i == 0 else min(d, 8) for i, d in enumerate(shape))


# ------------------------------------------------------------------------------------------------ timing
def time_runs(fn, target, min_runs, max_runs=5000, sample_s=0.0):
    """(times of N samples, calls made) after one warm-up run, N adapted to take about `target` seconds. A sample is
    one run, or with `sample_s` the mean of as many back-to-back runs as take about that long (for runs of
    microseconds, see SMALL_BYTES)."""
    t0 = time.perf_counter()
    fn()
    first = max(time.perf_counter() - t0, 1e-7)
    burst = max(1, round(sample_s / first))
    n = int(min(max_runs, max(min_runs, round(target / (first * burst)))))
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        ts.append((time.perf_counter() - t0) / burst)
    return ts, n * burst + 1


def time_fn(fn, target, min_runs, max_runs=5000):
    """(median seconds, number of calls made)."""
    ts, calls = time_runs(fn, target, min_runs, max_runs)
    return statistics.median(ts), calls


def ort_session(model, library, threads):
    so = onnx_pools.session_options(model=model) if library else ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def bound_runner(sess, x):
    """IOBinding with pre-created input and output OrtValues; returns (run function, output array)."""
    xin = ort.OrtValue.ortvalue_from_numpy(x)
    y0 = sess.run(None, {"X": x})[0]
    y = np.empty_like(y0)
    yv = ort.OrtValue.ortvalue_from_numpy(y)
    b = sess.io_binding()
    b.bind_ortvalue_input("X", xin)
    b.bind_ortvalue_output("Y", yv)
    keep = (xin, yv, b)  # keep OrtValues alive

    def run():
        sess.run_with_iobinding(b)
        return keep

    return run, y


CEILING_VALUES = 32 * 1024 * 1024  # float32 values of the ceiling's array: 128 MB, four times the last-level cache


@functools.cache
def ceiling_array():
    """The ceiling's array, made once: read_ceiling and every case's in-rounds ceiling read the same 128 MB."""
    return np.ones(CEILING_VALUES, dtype=np.float32)


@functools.cache
def ceiling_runner(threads):
    """(run, bytes): the library's GlobalMaxPool over the ceiling's array in 2048 channels (see read_ceiling), at
    `threads` threads; one session per thread count for the whole run (read_ceiling, then each case's rounds)."""
    a = ceiling_array()
    shape = (1, 2048, CEILING_VALUES // 2048)  # channels of 64 KB: far apart (MBs) several streams gained nothing
    sess = ort_session(build_model(Case("GlobalMaxPool f32", "GlobalMaxPool", "float32", shape), shape), True, threads)
    run, _ = bound_runner(sess, a.reshape(shape))  # (run holds the session)
    return run, a.nbytes


def read_ceiling(threads, target, quick):
    """GB/s of plain reads of a float32 array four times the size of the last-level cache (128 MB): numpy's
    vectorised max and sum (one thread), torch's sum and amax and the library's GlobalMaxPool over 2048 channels of
    it (`threads` threads); the fastest is the ceiling. (The library reads 2-4 channels side by side: one core
    reads several concurrent streams faster than one on some CPUs, e.g. AMD EPYC, ~23 vs ~18 GB/s.)"""
    a = ceiling_array()
    res = {}
    for name, fn in (("numpy_max_1thread", a.max), ("numpy_sum_1thread", a.sum)):
        t, _ = time_fn(fn, target, 5)
        res[name] = a.nbytes / t / 1e9
    run, nbytes = ceiling_runner(threads)
    t, _ = time_fn(run, target, 5)
    res[f"onnx_pools_max_{threads}threads"] = nbytes / t / 1e9
    if torch is not None:
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        ta = torch.from_numpy(a)
        for name, fn in ((f"torch_sum_{threads}threads", ta.sum), (f"torch_amax_{threads}threads", ta.amax)):
            t, _ = time_fn(fn, target, 5)
            res[name] = a.nbytes / t / 1e9
        torch.set_num_threads(old)
    res["ceiling"] = max(v for k, v in res.items())
    return res


def compare(y_lib, y_stock):
    """max |lib - stock|: in quantization steps for integers, relative to max |stock| for floats."""
    d = max_abs_diff(y_lib, y_stock)
    if y_lib.dtype.kind in "iu" or y_lib.size == 0 or y_lib.shape != y_stock.shape:
        return d
    return d / max(float(np.max(np.abs(y_stock.astype(np.float64)))), 1e-30)


ROUNDS = 5  # measurements are interleaved in rounds, so that a noisy stretch of a shared machine hits every engine
# Inputs this small run in microseconds to tens of microseconds, much of it the per-run cost of a node: each
# sample is then the mean of a burst of runs taking SMALL_SAMPLE_S, with the engines alternating in SMALL_ROUNDS
# short rounds, so that a shared machine's noise (preemptions of tens of microseconds) hits every engine alike
# instead of single runs of one engine (per-run samples of 4-10 us runs scattered 0.6-2.6x between rounds).
SMALL_BYTES = 1 << 20
SMALL_SAMPLE_S = 300e-6
SMALL_ROUNDS = 40
# After a multi-threaded engine, its idle pool threads (ORT's and OpenMP's) keep spinning for a while; in another
# process they would take a core from the next engine timed. A pause lets them go to sleep first.
SPIN_SETTLE_S = 0.02


# ------------------------------------------------------------------------------------------------ ISA workers
ISA_ORDER = ["avx512", "avx2", "neon", "portable"]


def _isa_worker():
    """A process whose library was loaded with ONNX_POOLS_ISA forced: it builds library sessions for the cases the
    parent sends and times them when asked, so every instruction set is timed in the same interleaved rounds.
    Messages are pickles on stdin / stdout (bench.py --isa-worker)."""
    import pickle

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply stream

    def send(value):
        pickle.dump(value, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()

    runners = {}
    while True:
        try:
            msg = pickle.load(requests)
        except EOFError:
            return 0
        kind = msg[0]
        if kind == "isa":
            send(onnx_pools.active_isa())
        elif kind == "setup":  # (a key: kept beside the sessions of other keys, for --spread)
            _, model, x, threads, *key = msg
            if not key:
                runners.clear()
            outputs = {}
            for t in threads:
                sess = ort_session(model, True, t)
                run, y = bound_runner(sess, x)
                run()
                runners[(*key, t)] = (sess, run)
                outputs[t] = y
            send(outputs)
        elif kind == "time":
            _, op, t, target, min_runs, sample_s, *key = msg
            before = onnx_pools.call_counts()[op]
            ts, calls = time_runs(runners[(*key, t)][1], target, min_runs, sample_s=sample_s)
            send((ts, onnx_pools.call_counts()[op] - before == calls))
        elif kind == "clear":
            runners.clear()
            send(None)
        else:
            return 0


class IsaWorker:
    """bench.py --isa-worker in a child process with ONNX_POOLS_ISA=isa (read when the child loads the library);
    with `library`, that build of the library (ONNX_POOLS_LIBRARY) instead of the package's own."""

    def __init__(self, isa, library=None):
        import subprocess

        env = dict(os.environ, ONNX_POOLS_ISA=isa)
        self.baseline = library is not None
        if library is not None:
            env["ONNX_POOLS_LIBRARY"] = os.path.abspath(library)
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(onnx_pools.__file__)))
        env["PYTHONPATH"] = os.pathsep.join([package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--isa-worker"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.requested = isa
        self.isa = None  # asked by start_workers once every worker has started (they start side by side)

    def call(self, *msg):
        import pickle

        pickle.dump(msg, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.flush()
        try:
            return pickle.load(self.process.stdout)
        except EOFError:
            raise RuntimeError(f"the benchmark's worker process exited (code {self.process.wait()})") from None

    def stop(self):
        try:
            self.process.stdin.close()
        finally:
            self.process.wait(timeout=30)


def start_workers(requested, baseline=None):
    """One worker per requested ISA the CPU runs (in ISA_ORDER), and with `baseline` (another build of the library)
    a second one per ISA running that build; ISAs the CPU lacks are reported and left out."""
    started = []
    for isa in sorted(set(requested), key=lambda i: ISA_ORDER.index(i) if i in ISA_ORDER else 99):
        started.append(IsaWorker(isa))
        if baseline:
            started.append(IsaWorker(isa, baseline))
    workers = []
    for w in started:
        w.isa = w.call("isa")  # the dispatcher never picks a path the CPU lacks: it falls back instead
        if w.isa != w.requested:
            if not w.baseline:
                print(
                    f"  ISA {w.requested}: not available on this CPU (the library chose {w.isa}); left out",
                    file=sys.stderr,
                )
            w.stop()
            continue
        workers.append(w)
    return workers


def engine_of(worker):
    return ("baseline:" if worker.baseline else "") + worker.isa


def bench_case(case, shape, thread_counts, target, min_runs, rng, workers):
    """One row per (ISA, thread count). Every engine (the library on each ISA, stock ORT, torch) and thread count of
    the case is timed in each of ROUNDS rounds (SMALL_ROUNDS of bursts for small inputs), in turn; its time is the
    median over all its samples."""
    x = make_input(case, shape, rng)
    model = build_model(case, shape)
    base = {
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
    runners = []  # (engine, threads, local function to time or an IsaWorker)
    sessions = []
    outputs = {}
    for w in workers:
        for t, y in w.call("setup", model, x, thread_counts).items():
            outputs[(engine_of(w), t)] = y
    for t in thread_counts:
        runners += [(engine_of(w), t, w) for w in workers]
        try:
            sess = ort_session(model, False, t)
            run, outputs[("stock", t)] = bound_runner(sess, x)
            run()
            sessions.append(sess)
            runners.append(("stock", t, run))
        except Exception as e:
            base[t].update(stock_ms=None, stock_error=str(e).splitlines()[0][:200])
        if case.torch_fn is not None and getattr(case.torch_fn, "needs_case", False):
            runners.append(("torch", t, case.torch_fn(case, x)))
        elif case.torch_fn is not None:
            xt = torch.from_numpy(x)

            def run_torch(xt=xt):
                with torch.inference_mode():
                    return case.torch_fn(xt)

            runners.append(("torch", t, run_torch))
    # The big global pools' and LpPool's targets are shares of the read ceiling, and this host's read speed drifted
    # 1.7x within a session: their ceiling is read again in their own rounds (the library's GlobalMaxPool over the
    # ceiling's array)
    ceiling_bytes = None
    if (case.op.startswith("Global") or case.op == "LpPool") and x.nbytes > SMALL_BYTES:
        for t in thread_counts:
            run_ceiling, ceiling_bytes = ceiling_runner(t)
            runners.append(("ceiling", t, run_ceiling))
    samples = {(e, t): [] for e, t, _ in runners}
    kernel_ok = {engine_of(w): True for w in workers}
    rounds, sample_s = (SMALL_ROUNDS, SMALL_SAMPLE_S) if x.nbytes <= SMALL_BYTES else (ROUNDS, 0.0)
    per_round = target / rounds
    old_threads = torch.get_num_threads() if torch is not None else None
    try:
        for _ in range(rounds):
            for engine, t, fn in runners:
                runs = max(1, min_runs // rounds + 1)
                if isinstance(fn, IsaWorker):
                    ts, ok = fn.call("time", case.op, t, per_round, runs, sample_s)
                    kernel_ok[engine] &= ok
                else:
                    if engine == "torch":
                        torch.set_num_threads(t)
                    ts, _ = time_runs(fn, per_round, runs, sample_s=sample_s)
                samples[(engine, t)] += ts
                if t > 1:
                    time.sleep(SPIN_SETTLE_S)
    finally:
        if torch is not None:
            torch.set_num_threads(old_threads)
    for w in workers:
        w.call("clear")
    medians = {key: statistics.median(ts) * 1e3 for key, ts in samples.items()}
    rows = []
    for w in workers:
        if w.baseline:
            continue
        for t in thread_counts:
            r = dict(
                base[t],
                isa=w.isa,
                lib_ms=medians[(w.isa, t)],
                lib_runs=len(samples[(w.isa, t)]),
                lib_kernel_ok=kernel_ok[w.isa],
            )
            if ("baseline:" + w.isa, t) in medians:
                r["baseline_ms"] = medians[("baseline:" + w.isa, t)]
                r["speedup_vs_baseline"] = r["baseline_ms"] / r["lib_ms"]
                r["lib_kernel_ok"] &= kernel_ok["baseline:" + w.isa]
                before, after = outputs[("baseline:" + w.isa, t)], outputs[(w.isa, t)]
                r["same_as_baseline"] = before.tobytes() == after.tobytes()
            r["stock_ms"] = medians.get(("stock", t))
            r["torch_ms"] = medians.get(("torch", t))
            if ceiling_bytes is not None:
                r["ceiling_in_rounds_GBps"] = ceiling_bytes / (medians[("ceiling", t)] * 1e-3) / 1e9
            r["max_diff_vs_stock"] = (
                compare(outputs[(w.isa, t)], outputs[("stock", t)]) if ("stock", t) in outputs else None
            )
            for k in ("lib", "stock", "torch"):
                ms = r.get(f"{k}_ms")
                r[f"{k}_GBps"] = r["bytes_read"] / (ms * 1e-3) / 1e9 if ms else None
            r["speedup_vs_stock"] = r["stock_ms"] / r["lib_ms"] if r.get("stock_ms") else None
            r["speedup_vs_torch"] = r["torch_ms"] / r["lib_ms"] if r.get("torch_ms") else None
            r["threads_speedup"] = None
            rows.append(r)
    for r in rows:  # the library's own 2-thread (or more) scaling: time at 1 thread / time at t threads
        one = next((o for o in rows if o["isa"] == r["isa"] and o["threads"] == 1), None)
        if one is not None and r["threads"] > 1:
            r["threads_speedup"] = one["lib_ms"] / r["lib_ms"]
    del sessions
    return rows


# ------------------------------------------------------------------------------------------------ memory
GIB = 1 << 30
MEMORY_CASES = [  # (label, op, dtype, shape of 1 GiB, attrs)
    ("GlobalAveragePool f32", "GlobalAveragePool", "float32", (64, 64, 256, 256), {}),
    ("GlobalMaxPool f32", "GlobalMaxPool", "float32", (64, 64, 256, 256), {}),
    ("GlobalLpPool p=2 f32", "GlobalLpPool", "float32", (64, 64, 256, 256), {"p": 2}),
    (
        "LpPool 3x3 pad1 p=2 f32, 4096x4096 planes",
        "LpPool",
        "float32",
        (1, 16, 4096, 4096),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2},
    ),
    ("LpPool 1-D k3 p=2 f32, one 2^28 plane", "LpPool", "float32", (1, 1, 1 << 28), {"kernel_shape": [3], "p": 2}),
    (
        "QLinearAveragePool 3x3 pad1 u8 NCHW, 16384x16384 planes",
        "QLinearAveragePool",
        "uint8",
        (1, 4, 16384, 16384),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": 0},
    ),
    (
        "QLinearAveragePool 3x3 pad1 u8 NHWC, 16384x16384x4",
        "QLinearAveragePool",
        "uint8",
        (1, 16384, 16384, 4),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": 1},
    ),
    (
        "QLinearAveragePool 1-D k3 u8 NCHW, one 2^30 plane",
        "QLinearAveragePool",
        "uint8",
        (1, 1, 1 << 30),
        {"kernel_shape": [3], "pads": [1, 1], "channels_last": 0},
    ),
]

_MEMORY_CHILD = r"""
import json, sys
import numpy as np, onnxruntime as ort
sys.path.insert(0, {bench_dir!r})
import bench as B
import onnx_pools
label, op, dtype, shape, attrs, threads = json.loads(sys.argv[1])
case = B.Case(label, op, dtype, tuple(shape), attrs)
model = B.build_model(case, shape)
so = onnx_pools.session_options(ops="all", model=model, ort_layout=False)  # the library's kernels, not ORT's NCHWc
so.intra_op_num_threads = threads
sess = ort.InferenceSession(model, so)
x = np.full(shape, 1 if dtype == "uint8" else 0.5, dtype=dtype)
small = np.full([1, 1] + [8] * (len(shape) - 2), 1 if dtype == "uint8" else 0.5, dtype=dtype)
def rss(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak (VmHWM) to the current RSS
before = rss("VmRSS:")
y = sess.run(None, {{"X": x}})[0]
peak = rss("VmHWM:")
print(json.dumps({{"isa": onnx_pools.active_isa(), "input": x.nbytes, "output": y.nbytes,
                  "scratch": peak - before - y.nbytes, "calls": onnx_pools.call_counts()[op]}}))
"""


def memory_report(requested, markdown_path=None):
    """Peak RSS increase of one run on a 1 GiB input, above the output, per case, ISA and thread count (each in a
    fresh process: nothing else allocated between the reset of the peak and the run)."""
    import json
    import subprocess

    child = _MEMORY_CHILD.format(bench_dir=os.path.dirname(os.path.abspath(__file__)))
    lines = [
        "| case | ISA | threads | input MiB | output MiB | peak above input + output, MiB | kernel ran |",
        "|---|---|---|---|---|---|---|",
    ]
    worst = 0
    for isa in [i for i in ISA_ORDER if i in requested]:
        for label, op, dtype, shape, attrs in MEMORY_CASES:
            for threads in (1, 2):
                env = dict(os.environ, ONNX_POOLS_ISA=isa)
                r = subprocess.run(
                    [sys.executable, "-c", child, json.dumps([label, op, dtype, shape, attrs, threads])],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                if r.returncode != 0:
                    print(f"error: {label} ({isa}, {threads} threads):\n{r.stderr[-2000:]}", file=sys.stderr)
                    return 1
                m = json.loads(r.stdout.strip().splitlines()[-1])
                if m["isa"] != isa:
                    break  # this CPU does not run the ISA
                worst = max(worst, m["scratch"])
                lines.append(
                    f"| {label} | {isa} | {threads} | {m['input'] / 2**20:.0f} | {m['output'] / 2**20:.1f} "
                    f"| {m['scratch'] / 2**20:.1f} | {'yes' if m['calls'] == 1 else 'NO'} |"
                )
                print(lines[-1], file=sys.stderr, flush=True)
    md = "\n".join(lines) + f"\n\nlargest: {worst / 2**20:.1f} MiB (target: at most 64 MiB)\n"
    return finish_report(md, markdown_path)


def finish_report(md, markdown_path, kernel_ran=True):
    """A report mode's end: its markdown printed (and written to markdown_path), exit status 1 when the library's
    kernel did not run in some row (call counter), else 0."""
    print(md)
    if markdown_path:
        with open(markdown_path, "w") as f:
            f.write(md)
    if not kernel_ran:
        print("error: the library's kernel did not run (call counter) in some rows", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------------------------ output
SCALING_ROUNDS = 40  # --scaling: rounds of a few runs each, every thread count of every ISA in each round
SCALING_TARGET_S = 0.02  # seconds of runs per (ISA, thread count) in each round (see scaling_report)
SCALING_RUNS = 3


def scaling_report(cases, thread_counts, workers, rng, small=False, markdown_path=None):
    """--scaling: the library's own scaling from 1 to t threads for the compute-bound windowed cases (LpPool,
    QLinearAveragePool), each ISA timed alone: no stock or torch engine in the rounds, whose idle pool threads could
    take a core, and SCALING_ROUNDS rounds instead of ROUNDS, because a ratio of two medians of 5 rounds scatters
    ±15% on a shared machine. Each turn runs for SCALING_TARGET_S and a multi-threaded one is followed by a pause:
    with turns of 3 runs, a 2-thread session's spinning threads took a core from the other ISA's 1-thread turn, and
    with the pause but 3 runs, the 2-thread turns (their threads woken from sleep) ran no faster than 1 thread.
    Reports the median times and their ratio, and the quartiles of the per-round ratios."""
    lines = [
        "| case | ISA | threads | lib ms (1 thread) | lib ms | scaling | per-round scaling, quartiles | kernel ran |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ok_all = True
    for c in cases:
        if c.op not in ("LpPool", "QLinearAveragePool") or c.label.startswith("tiny"):
            continue
        shape = small_shape(c.shape) if small else c.shape
        print(f"  {c.name(shape)}: scaling ...", file=sys.stderr, flush=True)
        x = make_input(c, shape, rng)
        model = build_model(c, shape)
        for w in workers:
            w.call("setup", model, x, thread_counts)
        samples = {(w.isa, t): [] for w in workers for t in thread_counts}
        per_round = {key: [] for key in samples}
        ok = {w.isa: True for w in workers}
        for _ in range(SCALING_ROUNDS):
            for w in workers:
                for t in thread_counts:
                    ts, ran = w.call("time", c.op, t, SCALING_TARGET_S, SCALING_RUNS, 0.0)
                    ok[w.isa] &= ran
                    samples[(w.isa, t)] += ts
                    per_round[(w.isa, t)].append(statistics.median(ts))
                    if t > 1:  # its pool threads spin on: without the pause they took a core from the next run
                        time.sleep(SPIN_SETTLE_S)
        for w in workers:
            w.call("clear")
            one = statistics.median(samples[(w.isa, 1)]) * 1e3
            for t in thread_counts:
                if t == 1:
                    continue
                ms = statistics.median(samples[(w.isa, t)]) * 1e3
                ratios = sorted(a / b for a, b in zip(per_round[(w.isa, 1)], per_round[(w.isa, t)]))
                q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
                lines.append(
                    f"| {c.name(shape)} | {w.isa} | {t} | {one:.3f} | {ms:.3f} | {one / ms:.2f} | {q1:.2f}-{q3:.2f} "
                    f"| {'yes' if ok[w.isa] else 'NO'} |"
                )
                ok_all &= ok[w.isa]
    return finish_report("\n".join(lines) + "\n", markdown_path, ok_all)


SPREAD_ROUNDS = 40  # --spread: rounds, each running every configuration of a shape on every ISA in turn


def spread_report(cases, workers, rng, small=False, markdown_path=None):
    """--spread: the QLinearAveragePool configurations of one shape (u8 / s8, distinct / equal scales,
    count_include_pad 0 / 1) on the library alone, 1 thread, each ISA, every configuration in each of SPREAD_ROUNDS
    rounds (SCALING_TARGET_S of runs per turn): how much slower the slowest is than the fastest. The table's rows are
    timed minutes apart, and on a shared host a stretch of load moved single rows by 1.5x, more than the spread
    measured. Reports each configuration's median time and its ratio to the fastest of its shape and ISA."""

    def configuration(c):  # "u8 NCHW distinct cip0" of the case's label
        return c.label.replace("QLinearAveragePool 3x3 pad1 ", "")

    groups = {}
    for c in cases:
        if c.op == "QLinearAveragePool" and not c.label.startswith("tiny"):
            shape = small_shape(c.shape) if small else c.shape
            layout = "NHWC" if c.attrs.get("channels_last") else "NCHW"
            groups.setdefault((layout, tuple(shape)), []).append(c)
    lines = [
        "| layout, shape | ISA | configuration | lib ms | vs the fastest | kernel ran |",
        "|---|---|---|---|---|---|",
    ]
    summary, ok_all = [], True
    for (layout, shape), members in groups.items():
        print(f"  QLinearAveragePool {layout} {'x'.join(map(str, shape))}: spread ...", file=sys.stderr, flush=True)
        for k, c in enumerate(members):
            x, model = make_input(c, shape, rng), build_model(c, shape)
            for w in workers:
                w.call("setup", model, x, [1], k)
        samples = {(w.isa, k): [] for w in workers for k in range(len(members))}
        ok = {w.isa: True for w in workers}
        for _ in range(SPREAD_ROUNDS):
            for w in workers:
                for k, c in enumerate(members):
                    ts, ran = w.call("time", c.op, 1, SCALING_TARGET_S, SCALING_RUNS, 0.0, k)
                    ok[w.isa] &= ran
                    samples[(w.isa, k)] += ts
        for w in workers:
            w.call("clear")
            ms = [statistics.median(samples[(w.isa, k)]) * 1e3 for k in range(len(members))]
            fastest = min(ms)
            for c, m in zip(members, ms):
                config = configuration(c).replace(f" {layout}", "")
                lines.append(
                    f"| {layout} {'x'.join(map(str, shape))} | {w.isa} | {config} | {m:.3f} | {m / fastest:.2f} "
                    f"| {'yes' if ok[w.isa] else 'NO'} |"
                )
            slowest = configuration(members[ms.index(max(ms))])
            summary.append(f"{layout} {w.isa}: slowest / fastest {max(ms) / fastest:.2f} ({slowest})")
            ok_all &= ok[w.isa]
    md = "\n".join(lines) + "\n\n" + "\n".join(f"- {line}" for line in summary) + "\n"
    return finish_report(md, markdown_path, ok_all)


def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def _ceiling_range(results):
    """The in-rounds ceilings of the results, per thread count, as text."""
    by_threads = {}
    for r in results:
        if r.get("ceiling_in_rounds_GBps"):
            by_threads.setdefault(r["threads"], []).append(r["ceiling_in_rounds_GBps"])
    if not by_threads:
        return "none in this run"
    return ", ".join(f"{min(v):.1f}-{max(v):.1f} GB/s at {t} thread(s)" for t, v in sorted(by_threads.items()))


def markdown(env, ceilings, results):
    lines = [
        f"onnx_pools {env['onnx_pools']} (ISAs {', '.join(env['isas'])}), onnxruntime {env['onnxruntime']}, "
        f"torch {env['torch']}, numpy {env['numpy']}; CPU: {env['cpu']} ({env['cpus']} logical CPUs)",
        f"library timed: {env['library']}",
        "",
    ]
    for t, c in sorted(ceilings.items()):
        parts = ", ".join(f"{k} {v:.1f}" for k, v in c.items() if k != "ceiling")
        lines.append(f"read-bandwidth ceiling at {t} thread(s): {c['ceiling']:.1f} GB/s ({parts})")
    lines += [
        "",
        "| case | ISA | threads | lib ms | stock ms | torch ms | speed-up vs stock | speed-up vs torch "
        "| lib vs 1 thread | lib GB/s | stock GB/s | torch GB/s | lib % of ceiling | lib kernel ran "
        "| max diff vs stock |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    with_baseline = any("baseline_ms" in r for r in results)
    if with_baseline:
        lines[-2] += " baseline ms | speed-up vs baseline | same bits as baseline |"
        lines[-1] += "---|---|---|"
    for r in results:
        ceil = r.get("ceiling_in_rounds_GBps") or ceilings[r["threads"]]["ceiling"]
        stock = _f(r.get("stock_ms"), ".3f") if r.get("stock_ms") else "fails"
        lines.append(
            f"| {r['case']} | {r['isa']} | {r['threads']} | {r['lib_ms']:.3f} | {stock} "
            f"| {_f(r.get('torch_ms'), '.3f')} | {_f(r['speedup_vs_stock'], '.2f')} "
            f"| {_f(r['speedup_vs_torch'], '.2f')} "
            f"| {_f(r.get('threads_speedup'), '.2f')} "
            f"| {_f(r['lib_GBps'], '.1f')} | {_f(r['stock_GBps'], '.1f')} | {_f(r['torch_GBps'], '.1f')} "
            f"| {100 * r['lib_GBps'] / ceil:.0f}% | {'yes' if r['lib_kernel_ok'] else 'NO'} "
            f"| {_f(r.get('max_diff_vs_stock'), '.2g')} |"
        )
        if with_baseline:
            same = {True: "yes", False: "NO", None: "-"}[r.get("same_as_baseline")]
            lines[-1] += f" {_f(r.get('baseline_ms'), '.3f')} | {_f(r.get('speedup_vs_baseline'), '.2f')} | {same} |"
    lines += [
        "",
        "speed-up = other time / lib time (> 1: the library is faster). GB/s = input bytes / median time. "
        "max diff vs stock: relative to max |stock| (float), in quantization steps (uint8). lib % of ceiling: of the "
        "ceiling above, but for the global pools and LpPool over 1 MiB, whose ceiling (the library's GlobalMaxPool "
        "over the same 128 MB array) is read again in their own rounds: " + _ceiling_range(results) + ".",
        "torch calls: "
        + "; ".join(
            sorted({f"{r['case'].rsplit(' ', 1)[0]}: {r['torch_call']}" for r in results if r.get("torch_call")})
        ),
    ]
    return "\n".join(lines) + "\n"


def environment():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "onnx_pools": onnx_pools.__version__,
        "library": onnx_pools.get_library_path(),
        "isa": onnx_pools.active_isa(),
        "onnxruntime": ort.__version__,
        "torch": torch.__version__ if torch is not None else None,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
    }


def main(argv=None):
    if argv is None and sys.argv[1:] == ["--isa-worker"] or argv == ["--isa-worker"]:
        return _isa_worker()
    ap = argparse.ArgumentParser(
        prog="python -m onnx_pools bench", description="onnx-pools benchmark (library vs stock ORT vs torch)"
    )
    ap.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts (default 1,2)")
    ap.add_argument("--quick", action="store_true", help="fewer runs (about 0.2 s per measurement)")
    ap.add_argument("--cases", help="comma-separated substrings; run the cases whose name contains one")
    ap.add_argument("--small", action="store_true", help="shrink every shape to at most 1x8x8x8 (smoke tests)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--markdown", metavar="FILE", help="write the markdown table to FILE too")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument(
        "--isa",
        default="all",
        help="comma-separated instruction sets to time the library on, each "
        "in its own process with ONNX_POOLS_ISA forced (avx512, avx2, neon, portable); default: every "
        "one this CPU runs",
    )
    ap.add_argument(
        "--memory",
        action="store_true",
        help="instead of timing: the peak RSS increase of one run "
        "of each op and layout on a 1 GiB input (scratch memory), per ISA",
    )
    ap.add_argument(
        "--scaling",
        action="store_true",
        help="instead of the table: the library's own scaling from 1 thread to the others (--threads) for the "
        f"LpPool and QLinearAveragePool cases, each ISA alone, in {SCALING_ROUNDS} interleaved rounds",
    )
    ap.add_argument(
        "--spread",
        action="store_true",
        help="instead of the table: each QLinearAveragePool configuration of a shape against the fastest, library "
        f"only, 1 thread, each ISA, in {SPREAD_ROUNDS} interleaved rounds",
    )
    ap.add_argument(
        "--baseline",
        metavar="LIB",
        help="another build of libonnx_pools.so (e.g. an earlier commit's) timed on each ISA in the same "
        "interleaved rounds: adds 'baseline ms' and 'speed-up vs baseline' (before/after in one run)",
    )
    args = ap.parse_args(argv)
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
    if args.list or not cases:
        print(
            "\n".join(names) if cases else f"error: no case matches {args.cases!r}",
            file=sys.stdout if cases else sys.stderr,
        )
        return 0 if cases else 2
    requested = ISA_ORDER if args.isa == "all" else [i.strip() for i in args.isa.split(",") if i.strip()]
    if args.memory:
        return memory_report(requested, args.markdown)
    target, min_runs = (0.2, 3) if args.quick else (1.0, 5)
    if args.baseline and not os.path.isfile(args.baseline):
        print(f"error: --baseline {args.baseline}: no such file", file=sys.stderr)
        return 2
    # run as `python bench/bench.py`, the import finds an installed onnx_pools before a checkout's: say which
    print(f"  timing the library at {onnx_pools.get_library_path()}", file=sys.stderr, flush=True)
    workers = start_workers(requested, args.baseline)
    if not workers:
        print(f"error: none of the ISAs {requested} runs here", file=sys.stderr)
        return 2
    if args.spread:
        try:
            return spread_report(
                cases, [w for w in workers if not w.baseline], np.random.default_rng(0), args.small, args.markdown
            )
        finally:
            for w in workers:
                w.stop()
    if args.scaling:
        if 1 not in threads:
            threads = [1] + threads
        try:
            return scaling_report(
                cases,
                threads,
                [w for w in workers if not w.baseline],
                np.random.default_rng(0),
                args.small,
                args.markdown,
            )
        finally:
            for w in workers:
                w.stop()
    env = environment()
    env["isas"] = [w.isa for w in workers if not w.baseline]
    if args.baseline:
        env["baseline"] = os.path.abspath(args.baseline)
    ceilings = {t: read_ceiling(t, target, args.quick) for t in threads}
    rng = np.random.default_rng(0)
    results = []
    for c in cases:
        shape = small_shape(c.shape) if args.small else c.shape
        print(f"  {c.name(shape)}, {','.join(map(str, threads))} thread(s) ...", file=sys.stderr, flush=True)
        results += bench_case(c, shape, threads, target * len(threads), min_runs, rng, workers)
    for w in workers:
        w.stop()
    md = markdown(env, ceilings, results)
    print(md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"environment": env, "read_ceiling_GBps": {str(k): v for k, v in ceilings.items()}, "results": results},
                f,
                indent=1,
            )
    bad = [f"{r['case']} ({r['isa']})" for r in results if not r["lib_kernel_ok"]]
    if bad:
        print("error: the library's kernel did not run (call counter) for: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
