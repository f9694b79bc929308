"""--memory: the peak RSS increase of one run of each op and layout on a 1 GiB input (the kernels' scratch
memory), per ISA and thread count, each in a fresh process (`python -m onnx_pools.bench.memory CASE`) so that
nothing else is allocated between the reset of the peak and the run."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from onnx_pools.bench.engines import json_from_child
from onnx_pools.bench.workers import ISA_ORDER

__all__ = ["MEMORY_CASES", "memory_table"]

MIB = 1 << 20
_QLINEAR_3X3_NCHW: dict[str, Any] = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": 0}
_QLINEAR_3X3_NHWC: dict[str, Any] = {**_QLINEAR_3X3_NCHW, "channels_last": 1}
_QLINEAR_1D: dict[str, Any] = {"kernel_shape": [3], "pads": [1, 1], "channels_last": 0}
# (label, op, dtype, shape of 1 GiB, --small shape, attributes)
MEMORY_CASES: list[tuple[str, str, str, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ("GlobalAveragePool f32", "GlobalAveragePool", "float32", (64, 64, 256, 256), (1, 4, 64, 64), {}),
    ("GlobalMaxPool f32", "GlobalMaxPool", "float32", (64, 64, 256, 256), (1, 4, 64, 64), {}),
    ("GlobalLpPool p=2 f32", "GlobalLpPool", "float32", (64, 64, 256, 256), (1, 4, 64, 64), {"p": 2}),
    (
        "LpPool 3x3 pad1 p=2 f32, 4096x4096 planes",
        "LpPool",
        "float32",
        (1, 16, 4096, 4096),
        (1, 2, 64, 64),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2},
    ),
    (
        "LpPool 1-D k3 p=2 f32, one 2^28 plane",
        "LpPool",
        "float32",
        (1, 1, 1 << 28),
        (1, 1, 1 << 14),
        {"kernel_shape": [3], "p": 2},
    ),
    *(
        (f"QLinearAveragePool {what}", "QLinearAveragePool", "uint8", shape, small_shape, attrs)
        for what, shape, small_shape, attrs in (
            ("3x3 pad1 u8 NCHW, 16384x16384 planes", (1, 4, 16384, 16384), (1, 2, 64, 64), _QLINEAR_3X3_NCHW),
            ("3x3 pad1 u8 NHWC, 16384x16384x4", (1, 16384, 16384, 4), (1, 64, 64, 4), _QLINEAR_3X3_NHWC),
            ("1-D k3 u8 NCHW, one 2^30 plane", (1, 1, 1 << 30), (1, 1, 1 << 14), _QLINEAR_1D),
        )
    ),
]


def _rss(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


def _measure(label: str, op: str, dtype: str, shape: list[int], attrs: dict[str, Any], threads: int) -> dict[str, Any]:
    """The child's one run: {isa, input, output, scratch (bytes of peak RSS above the output), calls}."""
    import onnxruntime as ort

    import onnx_pools
    from onnx_pools.bench.cases import Case, build_model

    model = build_model(Case(label, op, dtype, tuple(shape), attrs), tuple(shape))
    # the library's kernels, not ORT's NCHWc rewrite
    so = onnx_pools.session_options(ops="all", model=model, ort_layout=False)
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    x: np.ndarray = np.full(shape, 1 if dtype == "uint8" else 0.5, dtype=dtype)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the peak (VmHWM) to the current RSS
    before = _rss("VmRSS:")
    y = sess.run(None, {"X": x})[0]
    peak = _rss("VmHWM:")
    return {
        "isa": onnx_pools.active_isa(),
        "input": x.nbytes,
        "output": y.nbytes,
        "scratch": peak - before - y.nbytes,
        "calls": onnx_pools.call_counts()[op],
    }


def memory_table(requested: list[str], small: bool) -> tuple[str, bool]:
    """(markdown, every row ran the library's kernel once): peak RSS increase of one run above the output, per
    case, ISA and thread count, each in a fresh process; RuntimeError when a child fails."""
    lines = [
        "| case | ISA | threads | input MiB | output MiB | peak above input + output, MiB | kernel ran |",
        "|---|---|---|---|---|---|---|",
    ]
    worst, ok_all = 0, True
    for isa in [i for i in ISA_ORDER if i in requested]:
        for label, op, dtype, shape, small_shape, attrs in MEMORY_CASES:
            for threads in (1, 2):
                argument = [label, op, dtype, list(small_shape if small else shape), attrs, threads]
                m = json_from_child(
                    "onnx_pools.bench.memory", argument, isa, f"{label} ({isa}, {threads} threads)", 900
                )
                if m["isa"] != isa:
                    break  # this CPU does not run the ISA
                worst = max(worst, m["scratch"])
                ok_all &= m["calls"] == 1
                name = label.split(",")[0] + " (--small)" if small else label
                lines.append(
                    f"| {name} | {isa} | {threads} | {m['input'] / MIB:.4g} | {m['output'] / MIB:.1f} "
                    f"| {m['scratch'] / MIB:.1f} | {'yes' if m['calls'] == 1 else 'NO'} |"
                )
                print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines) + f"\n\nlargest: {worst / MIB:.1f} MiB (target: at most 64 MiB)\n", ok_all


if __name__ == "__main__":
    print(json.dumps(_measure(*json.loads(sys.argv[1]))))
