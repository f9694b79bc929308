"""Independent numpy reference for com.microsoft.QLinearAveragePool.

Semantics (ONNX Runtime's contrib op definition; the README's QLinearAveragePool notes):
  * dequantize every input element as float32(x_scale * (x - x_zero_point));
  * sum over the window's input elements (padding adds nothing);
  * divide by the count: prod(kernel_shape) when count_include_pad=1, otherwise the
    number of input elements inside the window;
  * y = saturate(round_half_to_even(avg / y_scale + y_zero_point)).
  An absent zero point is 0.

Geometry (same as LpPool, dilation 1):
  * NOTSET: explicit pads; out = floor(span / s) + 1 (span = in + pb + pe - k), or with
    ceil_mode out = ceil(span / s) + 1, minus one when the last window would start in the
    right padding ((out - 1) * s >= in + pb).  A window may reach past the padded input:
    those positions are simply absent (they neither add nor count, except that
    count_include_pad divides by the full kernel size).
  * VALID: pads 0, the NOTSET formulae (ceil_mode honoured).
  * SAME_UPPER / SAME_LOWER: out = ceil(in / s); total = max(0, (out - 1) * s + k - in),
    odd one at the end (UPPER) / beginning (LOWER); ceil_mode ignored; pads never negative.

The pre-rounding value avg / y_scale + y_zero_point is returned in float64 so that tests
can exempt elements that lie within a small distance of a rounding tie (x.5).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["pool_geometry", "qlinear_average_pool", "near_tie", "QRANGE"]

QRANGE = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def pool_geometry(in_shape, kernel_shape, strides=None, pads=None, auto_pad="NOTSET", ceil_mode=0):
    """Return (pads_begin, pads_end, out_shape) for the spatial dims `in_shape`."""
    n = len(in_shape)
    kernel_shape = [int(k) for k in kernel_shape]
    if len(kernel_shape) != n:
        raise ValueError("kernel_shape length does not match the spatial rank")
    strides = [1] * n if strides is None else [int(s) for s in strides]
    if pads is None:
        pads = [0] * (2 * n)
    pads = [int(p) for p in pads]
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    pb, pe, out = [], [], []
    for i in range(n):
        L, k, s = int(in_shape[i]), kernel_shape[i], strides[i]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-L // s)
            total = max(0, (o - 1) * s + k - L)
            small = total // 2
            if auto_pad == "SAME_UPPER":
                b, e = small, total - small
            else:
                b, e = total - small, small
        else:
            if auto_pad == "VALID":
                b, e = 0, 0
            elif auto_pad == "NOTSET":
                b, e = pads[i], pads[i + n]
            else:
                raise ValueError(f"bad auto_pad {auto_pad!r}")
            span = L + b + e - k
            if span < 0:
                raise ValueError("kernel larger than padded input")
            if ceil_mode:
                o = -(-span // s) + 1
                if (o - 1) * s >= L + b:
                    o -= 1
            else:
                o = span // s + 1
        pb.append(b)
        pe.append(e)
        out.append(o)
    return pb, pe, out


def _scalar(v, dtype):
    if v is None:
        return None
    a = np.asarray(v, dtype=dtype).reshape(-1)
    assert a.size == 1
    return a[0]


def qlinear_average_pool(
    x,
    x_scale,
    x_zero_point,
    y_scale,
    y_zero_point,
    kernel_shape,
    strides=None,
    pads=None,
    auto_pad="NOTSET",
    ceil_mode=0,
    count_include_pad=0,
    channels_last=0,
):
    """Return (y, pre) where y has x's dtype and pre is the float64 pre-rounding value."""
    x = np.asarray(x)
    dt = x.dtype
    if dt not in QRANGE:
        raise TypeError("x must be uint8 or int8")
    lo, hi = QRANGE[dt]
    xs = np.float32(_scalar(x_scale, np.float32))
    ys = np.float32(_scalar(y_scale, np.float32))
    xz = 0 if x_zero_point is None else int(_scalar(x_zero_point, dt))
    yz = 0 if y_zero_point is None else int(_scalar(y_zero_point, dt))
    if x.ndim < 3:
        raise ValueError("rank < 3")
    if channels_last:
        perm = [0, x.ndim - 1] + list(range(1, x.ndim - 1))
        x = np.transpose(x, perm)
    N, C = x.shape[:2]
    spatial = x.shape[2:]
    nd = len(spatial)
    pb, pe, out = pool_geometry(spatial, kernel_shape, strides, pads, auto_pad, ceil_mode)
    strides_ = [1] * nd if strides is None else [int(s) for s in strides]
    # dequantize in float32 (exactly as the semantics say), then accumulate in float64
    deq = (xs * (x.astype(np.int32) - xz).astype(np.float32)).astype(np.float32).astype(np.float64)
    # every window at once, one spatial axis at a time: a window's sum along an axis is the difference of two prefix
    # sums at the window's ends clipped to the input (padding adds nothing). No rounding: every dequantised value is
    # an integer multiple of u, the unit in the last place of float32(x_scale), and below 2^33 u in magnitude, so
    # prefix sums of under 2^20 values are exact in float64.
    total = deq
    counts = np.ones((), dtype=np.int64)  # input elements inside each window: per axis, then their product
    for d in range(nd):
        k, s, L = int(kernel_shape[d]), strides_[d], int(spatial[d])
        starts = [o * s - pb[d] for o in range(out[d])]  # Python integers: no overflow on any attribute
        begin = np.array([min(max(b, 0), L) for b in starts], dtype=np.int64)
        end = np.array([min(max(b + k, 0), L) for b in starts], dtype=np.int64)
        prefix = np.concatenate([np.zeros_like(np.take(total, [0], axis=2 + d)), np.cumsum(total, axis=2 + d)], 2 + d)
        total = np.take(prefix, end, axis=2 + d) - np.take(prefix, begin, axis=2 + d)
        counts = np.multiply.outer(counts, end - begin)
    if count_include_pad:
        div = np.float64(int(np.prod(kernel_shape)))
    else:
        if np.any(counts == 0):
            raise ValueError("empty window")
        div = counts.astype(np.float64)
    pre = total / div / np.float64(ys) + yz
    y = np.clip(np.rint(pre), lo, hi).astype(dt)  # np.rint rounds half to even
    if channels_last:
        inv = [0] + list(range(2, x.ndim)) + [1]
        y = np.transpose(y, inv)
        pre = np.transpose(pre, inv)
    return np.ascontiguousarray(y), np.ascontiguousarray(pre)


def near_tie(pre, tol=1e-3):
    """Elements whose pre-rounding value lies within `tol` of a .5 tie, where float32 evaluation
    order may decide the rounding (tests allow one step there)."""
    frac = pre - np.floor(pre)
    return np.abs(frac - 0.5) <= tol


def _self_check():
    # tiny hand-computed cases
    x = np.array([[[0, 2, 4, 6]]], dtype=np.uint8)
    y, pre = qlinear_average_pool(x, 1.0, 0, 1.0, 0, [2], strides=[2])
    assert y.tolist() == [[[1, 5]]], y
    # count_include_pad with pads 1: windows [pad,0],[2,4],[6,pad]
    y, _ = qlinear_average_pool(x, 1.0, 0, 1.0, 0, [2], strides=[2], pads=[1, 1], count_include_pad=1)
    assert y.tolist() == [[[0, 3, 3]]], y
    y, _ = qlinear_average_pool(x, 1.0, 0, 1.0, 0, [2], strides=[2], pads=[1, 1], count_include_pad=0)
    assert y.tolist() == [[[0, 3, 6]]], y
    # ceil_mode: in 5, k 2, s 2 -> 3 outputs, last window has one element
    x = np.array([[[1, 3, 5, 7, 9]]], dtype=np.int8)
    y, _ = qlinear_average_pool(x, 1.0, None, 1.0, None, [2], strides=[2], ceil_mode=1)
    assert y.tolist() == [[[2, 6, 9]]], y
    y, _ = qlinear_average_pool(x, 1.0, None, 1.0, None, [2], strides=[2], ceil_mode=1, count_include_pad=1)
    assert y.tolist() == [[[2, 6, 4]]], y  # 9/2 = 4.5 -> 4 (half to even)
    # ceil_mode window that would start in the right padding is dropped
    assert pool_geometry([4], [2], [2], [0, 1], "NOTSET", 1)[2] == [2]
    # SAME never pads negatively
    assert pool_geometry([5], [1], [3], None, "SAME_UPPER")[:3] == ([0], [0], [2])
    assert pool_geometry([5], [3], [2], None, "SAME_LOWER")[:3] == ([1], [1], [3])
    assert pool_geometry([4], [3], [2], None, "SAME_LOWER")[:3] == ([1], [0], [2])
    assert pool_geometry([4], [3], [2], None, "SAME_UPPER")[:3] == ([0], [1], [2])
    # zero points and saturation
    x = np.array([[[10, 20]]], dtype=np.uint8)
    y, pre = qlinear_average_pool(x, 0.5, 10, 0.1, 250, [1])
    assert y.tolist() == [[[250, 255]]] and math.isclose(pre[0, 0, 1], 300.0, rel_tol=1e-6)
    # channels_last equals transposed NCHW
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, size=(2, 5, 6, 3), dtype=np.int8)
    a, _ = qlinear_average_pool(x, 0.03, 3, 0.02, -4, [3, 2], [2, 1], [1, 0, 1, 1], channels_last=1)
    b, _ = qlinear_average_pool(x.transpose(0, 3, 1, 2), 0.03, 3, 0.02, -4, [3, 2], [2, 1], [1, 0, 1, 1])
    assert np.array_equal(a, b.transpose(0, 2, 3, 1))


_self_check()
