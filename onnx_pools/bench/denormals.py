"""--denormals: do subnormal inputs slow the kernels down? Library vs stock ONNX Runtime.

For each float op and element type, the same one-node model is timed on three inputs of the same shape:
  normal     |x| in [0.5, 1.5], random signs;
  subnormal  |x| in [0.5, 1.5] * a subnormal of the type (1e-39 float32, 1e-310 float64, 4e-5 float16, 5e-39
             bfloat16): every element, and every |x|^p, is subnormal or underflows;
  tiny       normal numbers whose powers underflow (|x| ~ 1e-20 float32/bfloat16, 1e-160 float64, 1e-3 float16): the
             Lp kernels' overflow/underflow-safe path.
Time = median of runs (IOBinding, the input pre-bound) after warm-up; the table gives each median and the ratio to
the normal input of the same session. Stock ORT is timed where it has a kernel (float32; float16 through the Casts
ORT inserts); '-' elsewhere. The library's call counter is checked to move on every library run. No pass/fail: a
ratio far above 1 is the finding (denormals must not slow a kernel by orders of magnitude).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

import onnx_pools
from onnx_pools.bench.cases import Case, build_model
from onnx_pools.bench.engines import ort_session
from onnx_pools.bench.timing import time_runs
from onnx_pools.ortvalues import bfloat16, to_ortvalue

__all__ = ["DTYPES", "denormals_table"]

DTYPES = ("float32", "float64", "float16", "bfloat16")
SUBNORMAL = {"float32": 1e-39, "float64": 1e-310, "float16": 4e-5, "bfloat16": 5e-39}
TINY = {"float32": 1e-20, "float64": 1e-160, "float16": 1e-3, "bfloat16": 1e-20}
KINDS = ("normal", "subnormal", "tiny")
CASES: list[tuple[str, dict[str, Any], tuple[int, ...]]] = [
    ("GlobalAveragePool", {}, (8, 64, 56, 56)),
    ("GlobalMaxPool", {}, (8, 64, 56, 56)),
    ("GlobalLpPool p=2", {"p": 2}, (8, 64, 56, 56)),
    ("GlobalLpPool p=3", {"p": 3}, (8, 64, 56, 56)),
    ("LpPool 3x3 s1 pad1 p=2", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}, (4, 32, 56, 56)),
    ("LpPool 2x2 s2 p=3", {"kernel_shape": [2, 2], "strides": [2, 2], "p": 3}, (4, 32, 56, 56)),
]
SMALL_SHAPE = (1, 4, 8, 8)


def _numpy_type(dtype: str) -> np.dtype[Any]:
    return bfloat16() if dtype == "bfloat16" else np.dtype(dtype)


def _input(kind: str, dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    mag = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    scale = {"normal": 1.0, "subnormal": SUBNORMAL[dtype], "tiny": TINY[dtype]}[kind]
    return np.asarray((mag * scale).astype(_numpy_type(dtype)))


def _median_ms(sess: Any, x_value: Any, target: float, op: str, library: bool) -> float:
    binding = sess.io_binding()
    binding.bind_ortvalue_input("X", x_value)
    binding.bind_output("Y")
    before = onnx_pools.call_counts()[op] if library else 0
    samples, calls = time_runs(lambda: sess.run_with_iobinding(binding), target, 5, 2000, warmup=3)
    if library:
        moved = onnx_pools.call_counts()[op] - before
        if moved != calls:
            raise RuntimeError(f"the library's {op} kernel ran {moved} times for {calls} runs")
    return statistics.median(samples) * 1e3


def _f(v: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if v is None else fmt.format(v)


HEADER = (
    "| case | type | threads | lib normal ms | lib subnormal ms | lib tiny ms | lib subnormal/normal "
    "| lib tiny/normal | stock normal ms | stock subnormal ms | stock tiny ms | stock subnormal/normal "
    "| stock tiny/normal | lib kernel ran |"
)


def _line(r: dict[str, Any]) -> str:
    cells = [r["case"], r["dtype"], str(r["threads"])]
    for impl in ("lib", "stock"):
        cells += [_f(r[f"{impl} {k} ms"]) for k in KINDS]
        cells += [_f(r[f"{impl} {k} ratio"], "{:.2f}") for k in KINDS[1:]]
    cells.append("yes" if r["lib normal ms"] is not None else "NO")
    return "| " + " | ".join(cells) + " |"


def denormals_table(dtypes: list[str], thread_counts: list[int], target: float, small: bool) -> tuple[str, bool]:
    """(markdown, the library's kernel ran for every row)."""
    rng = np.random.default_rng(0)
    lines = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    worst: dict[str, list[float]] = {"lib": [], "stock": []}
    ok_all = True
    for label, attrs, full_shape in CASES:
        shape = SMALL_SHAPE if small else full_shape
        op = label.split()[0]
        for dtype in dtypes:
            model = build_model(Case(label, op, dtype, shape, attrs), shape)
            inputs = {k: to_ortvalue(_input(k, dtype, shape, rng)) for k in KINDS}
            for threads in thread_counts:
                row: dict[str, Any] = {"case": f"{label} {'x'.join(map(str, shape))}", "dtype": dtype}
                row["threads"] = threads
                for impl in ("lib", "stock"):
                    try:
                        sess = ort_session(model, impl == "lib", threads)
                        for k in KINDS:
                            row[f"{impl} {k} ms"] = _median_ms(sess, inputs[k], target, op, impl == "lib")
                    except Exception as e:  # stock ORT has no kernel for this type / op version
                        if impl == "lib":
                            print(f"  {label} {dtype}: library failed: {e}", flush=True)
                        row[f"{impl} error"] = str(e).splitlines()[0][:120]
                        for k in KINDS:
                            row[f"{impl} {k} ms"] = None
                    for k in KINDS[1:]:
                        base, t = row[f"{impl} normal ms"], row[f"{impl} {k} ms"]
                        row[f"{impl} {k} ratio"] = (t / base) if base and t else None
                        if row[f"{impl} {k} ratio"] is not None:
                            worst[impl].append(row[f"{impl} {k} ratio"])
                ok_all &= row["lib normal ms"] is not None
                lines.append(_line(row))
    summary = ", ".join(
        f"{name} {_f(max(worst[impl]) if worst[impl] else None, '{:.2f}')}x"
        for impl, name in (("lib", "library"), ("stock", "stock ORT"))
    )
    return "\n".join(lines) + f"\n\nworst slowdown vs normal input: {summary}\n", ok_all
