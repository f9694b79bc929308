"""float64 references of the benchmark's cases, for judging engines whose results are not compared elsewhere
(OpenVINO): written from the ONNX operator definitions, independent of the library."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnx_pools.bench.cases import Case, qlinear_params

__all__ = ["agrees", "reference"]

# Largest |engine - reference| accepted, relative to max |reference| (floats) or in quantization steps (integers).
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2, "uint8": 1, "int8": 1}


def _windows(x: np.ndarray, attrs: dict[str, Any], pad_value: float) -> tuple[np.ndarray, np.ndarray]:
    """(windows of x over its spatial axes: N, C, *out, *kernel, the count of real elements in each window)."""
    k = list(attrs["kernel_shape"])
    dims = len(k)
    strides = list(attrs.get("strides", [1] * dims))
    pads = list(attrs.get("pads", [0] * (2 * dims)))
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + dims]) for i in range(dims)]
    padded = np.pad(x, width, constant_values=pad_value)
    real = np.pad(np.ones(x.shape[2:]), width[2:], constant_values=0.0)
    windows = np.lib.stride_tricks.sliding_window_view(padded, k, axis=tuple(range(2, 2 + dims)))
    counts = np.lib.stride_tricks.sliding_window_view(real, k).sum(axis=tuple(range(dims, 2 * dims)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
    return windows[index], counts[tuple(slice(None, None, s) for s in strides)]


def reference(case: Case, x: np.ndarray) -> np.ndarray | None:
    """The case's output in float64 (QLinearAveragePool: exact rounding of the float result, saturated); None for
    an op without a reference here."""
    x64: np.ndarray = x.astype(np.float64)
    spatial = tuple(range(2, x.ndim))
    if case.op == "GlobalAveragePool":
        return np.asarray(x64.mean(axis=spatial, keepdims=True))
    if case.op == "GlobalMaxPool":
        return np.asarray(x64.max(axis=spatial, keepdims=True))
    if case.op == "GlobalLpPool":
        p = case.attrs.get("p", 2)
        return np.asarray(np.power(np.power(np.abs(x64), p).sum(axis=spatial, keepdims=True), 1.0 / p))
    if case.op == "LpPool":
        p = case.attrs.get("p", 2)
        windows, _ = _windows(np.abs(x64), case.attrs, 0.0)
        axes = tuple(range(x.ndim, windows.ndim))
        return np.asarray(np.power(np.power(windows, p).sum(axis=axes), 1.0 / p))
    if case.op == "QLinearAveragePool":
        xs, xz, ys, yz = qlinear_params(case)
        nchw = np.moveaxis(x64, -1, 1) if case.attrs.get("channels_last") else x64
        windows, real = _windows((nchw - xz) * xs, case.attrs, 0.0)
        axes = tuple(range(x.ndim, windows.ndim))
        size = math.prod(case.attrs["kernel_shape"])
        divisor = size if case.attrs.get("count_include_pad") else real
        y = np.rint(windows.sum(axis=axes) / divisor / ys) + yz
        info = np.iinfo(case.dtype)
        y = np.clip(y, int(info.min), int(info.max))
        return np.moveaxis(y, 1, -1) if case.attrs.get("channels_last") else y
    return None


def agrees(case: Case, y: np.ndarray, ref: np.ndarray) -> bool:
    """Whether an engine's output y matches the reference within TOLERANCE[case.dtype]."""
    if y.shape != ref.shape:
        return False
    d = np.abs(y.astype(np.float64) - ref)
    if not np.all(np.isfinite(d) | (np.isnan(y.astype(np.float64)) & np.isnan(ref))):
        return False
    d = np.nan_to_num(d)
    if case.dtype in ("uint8", "int8"):
        return bool(d.max(initial=0.0) <= TOLERANCE[case.dtype])
    scale = max(float(np.max(np.abs(ref), initial=0.0)), 1e-30)
    return bool(d.max(initial=0.0) / scale <= TOLERANCE[case.dtype])
