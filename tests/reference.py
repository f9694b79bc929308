"""Independent float64 reference for the pooling ops, written from the ONNX spec.

Nothing here uses onnx.reference or the library. Geometry, the rules where
implementations most often go wrong (the README's "Behaviour where the spec is
silent" says where the library and stock ORT differ):

* auto_pad SAME_UPPER / SAME_LOWER: out = ceil(in / stride); total padding
  max(0, (out - 1) * stride + (k - 1) * dilation + 1 - in), the odd one at the
  end (UPPER) or at the beginning (LOWER). ceil_mode is ignored.
* auto_pad VALID: no padding (explicit pads ignored), then as NOTSET.
* NOTSET (explicit pads): out = floor((in + pb + pe - ((k - 1) * d + 1)) / s) + 1;
  with ceil_mode, ceil instead of floor, then minus one when the last window
  would start in the right padding ((out - 1) * s >= in + pb).
* Window o covers positions o * s - pb + j * d, j = 0..k-1; positions outside
  [0, in) are padding (zeros) or beyond the padded input (absent). Either way
  they add nothing to an Lp sum.
"""

import math

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "float16": np.dtype(np.float16),
    "bfloat16": BF16,
}

# (rtol, atol factor); atol = factor * scale, scale = largest finite |input| (>= 1e-30)
TOLERANCES = {
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-12),
    "float16": (1e-3, 1e-5),
    "bfloat16": (8e-3, 1e-5),
}


def to_dtype(x64, dtype_name):
    """float64 array -> array of the test dtype (round to nearest)."""
    return np.asarray(x64, dtype=np.float64).astype(DTYPES[dtype_name])


def to_f64(x):
    """Any of the four float types -> float64 (exact)."""
    return np.asarray(x).astype(np.float64)


def input_scale(x):
    a = np.abs(to_f64(x))
    a = a[np.isfinite(a)]
    return max(float(a.max()) if a.size else 0.0, 1e-30)


def assert_close(got, ref, dtype_name, scale=1.0, what=""):
    """got (library output, any float type) vs float64 reference."""
    rtol, af = TOLERANCES[dtype_name]
    got = np.asarray(got)
    assert got.dtype == DTYPES[dtype_name], f"{what}: output dtype {got.dtype}, expected {dtype_name}"
    assert got.shape == ref.shape, f"{what}: output shape {got.shape}, expected {ref.shape}"
    # a true result beyond the type's range rounds to +-inf (the one rounding of the output)
    with np.errstate(over="ignore"):
        rounded = to_f64(np.asarray(ref).astype(DTYPES[dtype_name]))
    ref = np.where(np.isfinite(ref) & np.isinf(rounded), rounded, ref)
    np.testing.assert_allclose(to_f64(got), ref, rtol=rtol, atol=af * scale, equal_nan=True, err_msg=what)


# --------------------------------------------------------------------------- global pools


def _spatial_axes(x):
    assert x.ndim >= 3
    return tuple(range(2, x.ndim))


def global_average_pool(x):
    x = to_f64(x)
    axes = _spatial_axes(x)
    with np.errstate(invalid="ignore", over="ignore"):
        mean = np.mean(x, axis=axes, keepdims=True)
        # a float64 sum can overflow though the mean is finite: then the mean of x * 2^-64, times 2^64 (exact scaling)
        scaled = np.mean(x * 2.0**-64, axis=axes, keepdims=True) * 2.0**64
    overflowed = ~np.isfinite(mean) & np.all(np.isfinite(x), axis=axes, keepdims=True)
    return np.where(overflowed, scaled, mean)


def global_max_pool(x):
    x = to_f64(x)
    return np.max(x, axis=_spatial_axes(x), keepdims=True)  # np.max propagates NaN


def lp_reduce(x, p, axes):
    """(sum |x|^p)^(1/p) over axes, keepdims, in float64.

    Computed as m * (sum (|x|/m)^p)^(1/p) with m = max |x| so large p does not overflow
    float64; inf gives inf, NaN gives NaN, all-zero gives 0.
    """
    a = np.abs(to_f64(x))
    p = float(p)
    with np.errstate(all="ignore"):
        m = np.max(a, axis=axes, keepdims=True)
        safe = np.where((m > 0) & np.isfinite(m), m, 1.0)
        s = np.sum((a / safe) ** p, axis=axes, keepdims=True)
        r = safe * s ** (1.0 / p)
    r = np.where(np.isinf(m), np.inf, r)
    r = np.where(np.isnan(m), np.nan, r)
    return r


def global_lp_pool(x, p=2):
    x = to_f64(x)
    return lp_reduce(x, p, _spatial_axes(x))


def global_pool(op, x, p=2):
    """The reference of a global pool op by name (p: GlobalLpPool's)."""
    if op == "GlobalAveragePool":
        return global_average_pool(x)
    if op == "GlobalMaxPool":
        return global_max_pool(x)
    return global_lp_pool(x, p)


# --------------------------------------------------------------------------- LpPool geometry


def pool_geometry(in_spatial, kernel_shape, strides=None, pads=None, dilations=None, auto_pad="NOTSET", ceil_mode=0):
    """Returns (out_spatial, pads_begin, pads_end) per the spec (see module doc)."""
    n = len(in_spatial)
    k = list(kernel_shape)
    assert len(k) == n
    s = list(strides) if strides is not None else [1] * n
    d = list(dilations) if dilations is not None else [1] * n
    if auto_pad in ("NOTSET", "", None):
        pb = list(pads[:n]) if pads is not None else [0] * n
        pe = list(pads[n:]) if pads is not None else [0] * n
    else:
        pb, pe = [0] * n, [0] * n
    out = []
    for i in range(n):
        eff_k = (k[i] - 1) * d[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-in_spatial[i] // s[i])  # ceil
            total = max(0, (o - 1) * s[i] + eff_k - in_spatial[i])
            small, big = total // 2, total - total // 2
            if auto_pad == "SAME_UPPER":
                pb[i], pe[i] = small, big
            else:
                pb[i], pe[i] = big, small
        else:
            span = in_spatial[i] + pb[i] + pe[i] - eff_k
            if span < 0:
                raise ValueError("kernel larger than padded input")
            if ceil_mode:
                o = -(-span // s[i]) + 1
                if (o - 1) * s[i] >= in_spatial[i] + pb[i]:
                    o -= 1
            else:
                o = span // s[i] + 1
        out.append(o)
    return out, pb, pe


def output_shape(in_shape, kernel_shape, strides=None, pads=None, dilations=None, auto_pad="NOTSET", ceil_mode=0):
    out, _, _ = pool_geometry(list(in_shape[2:]), kernel_shape, strides, pads, dilations, auto_pad, ceil_mode)
    return tuple(in_shape[:2]) + tuple(out)


def lp_pool(x, kernel_shape, strides=None, pads=None, dilations=None, auto_pad="NOTSET", ceil_mode=0, p=2):
    """LpPool in float64: y = (sum over the window's input elements of |x|^p)^(1/p).

    All windows at once, one kernel offset at a time: the element each window has at that offset, or 0 where that
    position is padding (a 0 adds nothing to the sum and cannot raise the window's max |x|, lp_reduce's scale). A
    window of nothing but padding gives 0."""
    x = to_f64(x)
    in_sp = list(x.shape[2:])
    n = len(in_sp)
    s = list(strides) if strides is not None else [1] * n
    d = list(dilations) if dilations is not None else [1] * n
    out, pb, _ = pool_geometry(in_sp, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode)
    if x.size == 0 or 0 in out:
        return np.zeros(x.shape[:2] + tuple(out), dtype=np.float64)
    a = np.abs(x)
    starts = [np.arange(out[i], dtype=np.int64) * s[i] - pb[i] for i in range(n)]

    def at_offset(offsets):
        positions = [starts[i] + offsets[i] * d[i] for i in range(n)]
        inside = [(q >= 0) & (q < in_sp[i]) for i, q in enumerate(positions)]
        values = a[(slice(None), slice(None)) + np.ix_(*[np.clip(q, 0, in_sp[i] - 1) for i, q in enumerate(positions)])]
        mask = np.ones((), dtype=bool)
        for i, ok in enumerate(inside):  # the windows whose position on every axis is inside the input
            mask = mask & ok.reshape([-1 if j == i else 1 for j in range(n)])
        return np.where(mask, values, 0.0)

    offsets = list(np.ndindex(*kernel_shape))
    p = float(p)
    with np.errstate(all="ignore"):
        m = at_offset(offsets[0])
        for o in offsets[1:]:
            m = np.maximum(m, at_offset(o))  # propagates NaN
        safe = np.where((m > 0) & np.isfinite(m), m, 1.0)
        total = np.zeros_like(m)
        for o in offsets:
            total += (at_offset(o) / safe) ** p
        r = safe * total ** (1.0 / p)
    r = np.where(np.isinf(m), np.inf, r)
    return np.where(np.isnan(m), np.nan, r)


def _self_check():
    # tiny hand-computed cases of the geometry
    assert pool_geometry([5], [3], [2], [1, 1]) == ([3], [1], [1])
    assert pool_geometry([5], [2], [2], [0, 0], ceil_mode=1) == ([3], [0], [0])
    # ceil_mode: last window would start in the right padding -> dropped
    assert pool_geometry([4], [2], [2], [0, 1], ceil_mode=1) == ([2], [0], [1])
    # SAME with kernel < stride: pads stay >= 0
    assert pool_geometry([6], [1], [3], auto_pad="SAME_UPPER") == ([2], [0], [0])
    assert pool_geometry([5], [4], [1], auto_pad="SAME_UPPER") == ([5], [1], [2])
    assert pool_geometry([5], [4], [1], auto_pad="SAME_LOWER") == ([5], [2], [1])
    x = np.array([[[3.0, -4.0, 0.0, 12.0]]])
    np.testing.assert_allclose(lp_pool(x, [2], [2], p=2), [[[5.0, 12.0]]])
    np.testing.assert_allclose(global_lp_pool(x, 1), [[[19.0]]])
    assert math.isclose(global_lp_pool(x, 2)[0, 0, 0], 13.0)


_self_check()
