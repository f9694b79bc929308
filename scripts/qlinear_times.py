"""Times QLinearAveragePool 3x3 pad1 (u8/s8, NCHW 8x64x56x56 / NHWC 8x56x56x64, distinct / equal scales and zero
points, count_include_pad 0/1): min of 80 runs per config, library as loaded (ONNX_POOLS_ISA / ONNX_POOLS_LIBRARY
choose it), THREADS=n intra-op threads (default 1), TORCH=1 adds torch quantized avg_pool2d on channels_last (NHWC).
Usage: PYTHONPATH=. python scripts/qlinear_times.py [NCHW] [NHWC]. Alternate builds in one session to compare."""

import os
import sys
import time

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


sel = sys.argv[1:] or ["NCHW", "NHWC"]
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
                so = onnx_pools.session_options(ops="all")
                so.intra_op_num_threads = int(os.environ.get("THREADS", "1"))
                s = ort.InferenceSession(model(layout, qt, equal, cip, shape), so, providers=["CPUExecutionProvider"])

                def f():
                    return s.run(None, {"x": x})

                line = f"{layout} {qt} {'equal' if equal else 'distinct'} cip{cip}: lib {cpu(f, 40):.2f} ms"
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
