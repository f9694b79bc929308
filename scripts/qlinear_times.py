"""Times QLinearAveragePool 3x3 pad1 (u8/s8, NCHW 8x64x56x56 / NHWC 8x56x56x64, distinct / equal scales and zero
points, count_include_pad 0/1): min of 80 runs per config, library as loaded (ONNX_POOLS_ISA / ONNX_POOLS_LIBRARY
choose it), THREADS=n intra-op threads (default 1), TORCH=1 adds torch quantized avg_pool2d on channels_last (NHWC).
Usage: PYTHONPATH=. python scripts/qlinear_times.py [NCHW] [NHWC]. Alternate builds in one session to compare, or
LIBS=a.so:b.so: each build's session in one process, runs interleaved (ROUNDS=n pairs, default 150), the min and
median of each and the median ratio of each pair (a/b), so load from other processes hits both alike."""

import os
import sys
import time

# numpy's OpenBLAS worker threads (none of this timing uses BLAS) took CPU from the timed thread on a 2-core machine
# (4-5% of perf samples in blas_thread_server): one thread, before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import onnx_pools


def model(layout, qt, equal, cip, shape):
    tp = TensorProto.UINT8 if qt == "u8" else TensorProto.INT8
    xs, ys = (0.05, 0.05) if equal else (0.05, 0.031)
    zx, zy = ((128, 128) if equal else (120, 131)) if qt == "u8" else ((0, 0) if equal else (-3, 5))
    node = helper.make_node(
        "QLinearAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        count_include_pad=cip,
        channels_last=int(layout == "NHWC"),
    )
    inits = [
        helper.make_tensor("xs", TensorProto.FLOAT, [], [xs]),
        helper.make_tensor("ys", TensorProto.FLOAT, [], [ys]),
        helper.make_tensor("xz", tp, [], [zx]),
        helper.make_tensor("yz", tp, [], [zy]),
    ]
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", tp, shape)],
        [helper.make_tensor_value_info("y", tp, None)],
        inits,
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    ).SerializeToString()


def cpu(f, n):
    f()
    best = 1e9
    for _ in range(n * 2):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def interleaved(fs, rounds):
    """min and median ms of each f, run in turn, and the median of the per-round ratios first / each"""
    for f in fs:
        f()
    times = np.zeros((rounds, len(fs)))
    for r in range(rounds):
        for k, f in enumerate(fs):
            t = time.perf_counter()
            f()
            times[r, k] = time.perf_counter() - t
    times *= 1e3
    ratios = np.median(times[:, :1] / times, axis=0)
    return times.min(axis=0), np.median(times, axis=0), ratios


sel = sys.argv[1:] or ["NCHW", "NHWC"]
libs = [p for p in os.environ.get("LIBS", "").split(":") if p]
torch_on = os.environ.get("TORCH") == "1"
if torch_on:
    import torch

    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
for layout in sel:
    for qt in ("u8", "s8"):
        for equal in (0, 1):
            for cip in (0, 1):
                shape = [8, 64, 56, 56] if layout == "NCHW" else [8, 56, 56, 64]
                rng = np.random.default_rng(0)
                x = (
                    rng.integers(0, 256, shape).astype(np.uint8)
                    if qt == "u8"
                    else rng.integers(-128, 128, shape).astype(np.int8)
                )
                name = f"{layout} {qt} {'equal' if equal else 'distinct'} cip{cip}"
                if libs:
                    runs = []
                    for path in libs:
                        os.environ["ONNX_POOLS_LIBRARY"] = path
                        data = model(layout, qt, equal, cip, shape)
                        so = onnx_pools.session_options(ops="all", model=data)
                        so.intra_op_num_threads = int(os.environ.get("THREADS", "1"))
                        s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
                        runs.append(lambda s=s: s.run(None, {"x": x}))
                    lo, med, ratio = interleaved(runs, int(os.environ.get("ROUNDS", "150")))
                    cells = [f"{a:.2f}/{b:.2f}" for a, b in zip(lo, med)]
                    print(
                        f"{name}: min/median ms "
                        + "  ".join(cells)
                        + "  ratio "
                        + " ".join(f"{v:.2f}" for v in ratio[1:]),
                        flush=True,
                    )
                    continue
                data = model(layout, qt, equal, cip, shape)
                so = onnx_pools.session_options(ops="all", model=data)
                so.intra_op_num_threads = int(os.environ.get("THREADS", "1"))
                s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])

                def f():
                    return s.run(None, {"x": x})

                line = f"{name}: lib {cpu(f, 40):.2f} ms"
                if torch_on and layout == "NHWC":
                    t = torch.from_numpy(x.transpose(0, 3, 1, 2).astype(np.float32)).contiguous(
                        memory_format=torch.channels_last
                    )
                    qx = torch.quantize_per_tensor(
                        t, 0.05, 128 if qt == "u8" else 0, torch.quint8 if qt == "u8" else torch.qint8
                    ).contiguous(memory_format=torch.channels_last)

                    def g():
                        return torch.ao.nn.quantized.functional.avg_pool2d(qx, 3, 1, 1, count_include_pad=bool(cip))

                    line += f"  torch {cpu(g, 40):.2f} ms"
                print(line, flush=True)
