"""Fuzz of invalid and odd attribute/input combinations: each case must either fail with a clear error (naming the
op and the attribute or input at fault) or give the correct result (against the references), and never crash or
hang the process.

Cases run in worker subprocesses (fuzz_harness.py), so a crash or hang is caught instead of killing the test run.

The tests carry the `fuzz` marker. --fuzz-cases (default 1500) and --fuzz-seed (default 7) choose the cases; the
generator is deterministic for a seed. --fuzz-timeout (default 60) is the time without progress that counts as a hang.

Found by this fuzz and fixed: wrongly typed attributes silently ignored, run time proportional to the kernel length
(a 2^40 window ran for hours), int64 overflow of pad_begin + stride (out-of-bounds access, a segfault), an output
whose byte size overflows reported by ORT's SafeInt, the precision of a tiny fractional p: their deterministic cases
stay below as regression tests.
"""

import base64
import math
import os
import threading

import numpy as np
import pytest
from onnx import AttributeProto, TensorProto, helper

import reference as R
import reference_qlinear as RQ
from fuzz_harness import SANITIZER_REPORTS, run_cases
from helpers import (
    ALL_DTYPES,
    CASE_COUNTS,
    assert_close_with_subnormals,
    assert_qlinear_matches,
    option,
    pool_model,
    qlinear_model,
    run_op,
)

pytestmark = pytest.mark.fuzz

I64_MAX = 2**63 - 1
HUGE = [2**31 - 1, 2**31, 2**31 + 1, 2**32, 2**40, 2**62, I64_MAX]
MAX_OUTPUT_ELEMENTS = 1 << 20  # valid cases with bigger outputs are not generated (they would really allocate)
ALLOC_FAILS_BYTES = 1 << 40  # outputs this big cannot be allocated: a clear error is expected
GEOMETRY = ("kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode")
OOM_WORDS = ("alloc", "memory", "64 bits")
# Under AddressSanitizer (scripts/sanitize.sh) a failing multi-TB operator new inside ORT aborts the process instead
# of throwing, so cases whose output cannot be allocated are left out there (they run in the normal suite).
SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "")

# --------------------------------------------------------------------------- models


def float_model(op, opset, dtype, declared, attrs, x_type=None):
    return pool_model(op, opset, dtype, declared, attrs, x_type=x_type).SerializeToString()


def qlinear_model_raw(dtype, declared, attrs, params, names, as_inputs, extra_inputs=0):
    """params: {name: array} (xs, xz, ys, yz); names: the node's input list (may hold '' for absent)."""
    model, feeds = qlinear_model(
        dtype, declared, attrs, params.get("xs"), params.get("xz"), params.get("ys"), params.get("yz"),
        as_inputs=as_inputs, node_inputs=list(names) + ["X"] * extra_inputs,
    )  # fmt: skip
    return model.SerializeToString(), feeds


# --------------------------------------------------------------------------- geometry with python integers


class Invalid(Exception):
    def __init__(self, *culprits):
        super().__init__(culprits)
        self.culprits = set(culprits)


def _check_per_axis(attrs, name, n, per_axis, minimum):
    v = attrs.get(name)
    if v is None:
        return None
    if len(v) != n * per_axis:
        raise Invalid(name)
    if any(e < minimum for e in v):
        raise Invalid(name)
    return list(v)


def attribute_culprits(attrs, qlinear):
    """Every attribute that is wrong by itself (the library reports the first it checks)."""
    found = set()
    for name in ("kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode"):
        if name == "dilations" and qlinear:
            continue
        probe = {"kernel_shape": attrs.get("kernel_shape")}
        probe[name] = attrs.get(name)
        probe = {k: v for k, v in probe.items() if v is not None}
        try:
            geometry(probe, None, allow_dilations=not qlinear)
        except Invalid as e:
            found |= e.culprits if name == "kernel_shape" else {name}
    if qlinear:
        found |= {flag for flag in ("count_include_pad", "channels_last") if attrs.get(flag, 0) not in (0, 1)}
    return found


def geometry(attrs, spatial, allow_dilations=True):
    """Validates the pooling attributes for the spatial dims; returns (out dims, pads_begin, strides, dilations,
    kernel, overflow) or raises Invalid(culprits). Python integers: `overflow` tells whether any size the library
    computes in 64 bits would not fit."""
    k = attrs.get("kernel_shape")
    if k is None or len(k) == 0:
        raise Invalid("kernel_shape")
    if any(e < 1 for e in k):
        raise Invalid("kernel_shape")
    n = len(k)
    s = _check_per_axis(attrs, "strides", n, 1, 1) or [1] * n
    d = (_check_per_axis(attrs, "dilations", n, 1, 1) if allow_dilations else None) or [1] * n
    pads = _check_per_axis(attrs, "pads", n, 2, 0)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise Invalid("auto_pad")
    ceil_mode = attrs.get("ceil_mode", 0)
    if ceil_mode not in (0, 1):
        raise Invalid("ceil_mode")
    if spatial is None:  # attributes only
        return None
    if len(spatial) != n:
        raise Invalid("kernel_shape", "X")
    overflow = False
    out, pb_all = [], []
    for i in range(n):
        extent = (k[i] - 1) * d[i] + 1
        overflow |= extent > I64_MAX
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-spatial[i] // s[i])
            need = max(0, (o - 1) * s[i] + extent - spatial[i])
            overflow |= (o - 1) * s[i] + extent > I64_MAX
            pb = need // 2 if auto_pad == "SAME_UPPER" else need - need // 2
        else:
            pb, pe = (pads[i], pads[i + n]) if (pads and auto_pad in ("NOTSET", "")) else (0, 0)
            padded = spatial[i] + pb + pe
            overflow |= padded > I64_MAX
            if extent > padded:
                raise Invalid("kernel_shape", "dilations", "pads")
            span = padded - extent
            o = span // s[i] + 1
            if ceil_mode:
                if span % s[i]:
                    o += 1
                if (o - 1) * s[i] >= spatial[i] + pb:
                    o -= 1
        out.append(o)
        pb_all.append(pb)
    return out, pb_all, s, d, k, overflow


def fast_lp_pool(x, out, pb, s, d, k, p):
    """LpPool in float64 for windows of any length (positions computed, not enumerated); same semantics as
    reference.lp_pool (checked against it in test_fast_reference_matches_reference)."""
    x = R.to_f64(x)
    y = np.zeros(x.shape[:2] + tuple(out))
    axes = tuple(range(2, x.ndim))
    for o in np.ndindex(*out):
        idx = []
        for i, L in enumerate(x.shape[2:]):
            start = o[i] * s[i] - pb[i]
            j_lo = 0 if start >= 0 else (-start + d[i] - 1) // d[i]
            j_hi = min(k[i], (L - 1 - start) // d[i] + 1) if start < L else 0
            idx.append([start + j * d[i] for j in range(j_lo, max(j_lo, j_hi))])
        if any(len(v) == 0 for v in idx) or x.shape[0] * x.shape[1] == 0:
            continue
        win = x[(slice(None), slice(None)) + np.ix_(*idx)]
        y[(slice(None), slice(None)) + o] = R.lp_reduce(win, p, axes).reshape(x.shape[:2])
    return y


# --------------------------------------------------------------------------- case generation

FLOAT_OPS = ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LpPool"]
GARBAGE = ["FOO", "same_upper", "SAME", "VALIDX", " NOTSET", "NOTSET\x00X", "\u00e9", "SAME_UPPER " * 50]


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _mutate_geometry(rng, attrs, n, qlinear):
    """One mutation of a pooling attribute (some leave the case valid)."""
    names = ["kernel_shape", "strides", "pads", "auto_pad", "ceil_mode"] + ([] if qlinear else ["dilations"])
    name = _pick(rng, names)
    per = 2 if name == "pads" else 1
    r = int(rng.integers(8))
    if name == "auto_pad":
        attrs["auto_pad"] = _pick(rng, GARBAGE + ["", "VALID", "SAME_LOWER", "SAME_UPPER"])
        return
    if name == "ceil_mode":
        attrs["ceil_mode"] = _pick(rng, [2, -1, 2**40, -(2**63), 1])
        return
    if r == 0 and name != "kernel_shape":
        attrs.pop(name, None)
    elif r == 1:
        attrs[name] = []
    elif r == 2:  # wrong length
        attrs[name] = [1] * (n * per + _pick(rng, [-1, 1, 2, n * per]))
    elif r == 3:  # zero / negative
        v = list(_ints_or_none(attrs.get(name)) or [1] * (n * per))
        v[int(rng.integers(len(v)))] = _pick(rng, [0, -1, -(2**40), -I64_MAX - 1])
        attrs[name] = v
    else:  # huge values, sometimes with the other attributes made to fit them
        v = list(_ints_or_none(attrs.get(name)) or [1] * (n * per))
        h = _pick(rng, HUGE)
        v[int(rng.integers(len(v)))] = h
        attrs[name] = v
        if rng.random() < 0.5:
            attrs["strides"] = [_pick(rng, [1, h, h // 2 + 1]) for _ in range(n)]
        if rng.random() < 0.3:
            attrs["pads"] = [_pick(rng, [0, h, h // 2]) for _ in range(2 * n)]


WRONG_TYPED = {
    "ints": [("INT", 2), ("FLOATS", [2.0, 2.0]), ("FLOAT", 2.0), ("STRING", "2")],
    "int": [("INTS", [1]), ("FLOAT", 1.0), ("STRING", "1"), ("FLOATS", [1.0])],
    "string": [("INT", 1), ("INTS", [1, 2]), ("FLOAT", 1.0)],
    "p": [("STRING", "2"), ("INTS", [2]), ("FLOATS", [2.0])],  # INT and FLOAT p are both accepted
}
KIND_OF = {
    "kernel_shape": "ints",
    "strides": "ints",
    "pads": "ints",
    "dilations": "ints",
    "ceil_mode": "int",
    "count_include_pad": "int",
    "channels_last": "int",
    "auto_pad": "string",
    "p": "p",
}


def _wrong_type(rng, name):
    """An attribute of a type the op does not define for `name`: an error naming it."""
    t, v = _pick(rng, WRONG_TYPED[KIND_OF[name]])
    return helper.make_attribute(name, v, attr_type=getattr(AttributeProto, t))


def _ints_or_none(value):
    return value if isinstance(value, list) else None


def _split_wrong_types(attrs):
    bad = {k for k, v in attrs.items() if isinstance(v, AttributeProto)}
    return bad, {k: v for k, v in attrs.items() if k not in bad}


def gen_float_case(rng):
    op = _pick(rng, FLOAT_OPS)
    dtype = _pick(rng, ALL_DTYPES)
    culprits = set()
    forced_error = False
    if op == "LpPool":
        opset = _pick(rng, [1, 2, 11, 18, 22])
        n = int(rng.integers(1, 4))
        k = [int(rng.integers(1, 4)) for _ in range(n)]
        attrs = {
            "kernel_shape": k,
            "strides": [int(rng.integers(1, 3)) for _ in range(n)],
            "pads": [int(rng.integers(0, k[i % n])) for i in range(2 * n)],
        }
        spatial = [int(rng.integers(k[i], 7)) for i in range(n)]
    else:
        opset = _pick(rng, [1, 2, 13, 22])
        attrs = {}
        spatial = [int(rng.integers(1, 9)) for _ in range(int(rng.integers(1, 4)))]
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + spatial
    if op in ("LpPool", "GlobalLpPool"):
        attrs["p"] = 2.0 if opset == 1 else 2
    for _ in range(int(rng.integers(1, 3))):
        what = rng.random()
        if op == "LpPool" and what < 0.55:
            _mutate_geometry(rng, attrs, max(1, len(_ints_or_none(attrs.get("kernel_shape")) or [1])), qlinear=False)
        elif op in ("LpPool", "GlobalLpPool") and what < 0.75:
            if opset == 1:
                attrs["p"] = float(
                    _pick(rng, [0.0, -1.0, math.nan, math.inf, -math.inf, 1e-3, 1e30, 3.5, 1e-45, -1e-45])
                )
            else:
                attrs["p"] = _pick(rng, [0, -1, -(2**40), 2**40, I64_MAX, 1, 7, 2.5])  # a FLOAT p is accepted
        elif what < 0.85:  # the input: rank < 3, empty dims, 0 in N or C
            r = int(rng.integers(4))
            if r == 0:
                shape = shape[: int(rng.integers(0, 3))]
            elif r == 1 and len(shape) > 2:
                shape[int(rng.integers(2, len(shape)))] = 0
            elif len(shape) >= 2:
                shape[int(rng.integers(0, 2))] = 0
        elif what < 0.89:  # an attribute the op does not have: ignored
            attrs[_pick(rng, ["foo", "kernel", "storage_order", "count_include_pad"])] = _pick(rng, [1, [1, 2], "x"])
        elif what < 0.95 and op in ("LpPool", "GlobalLpPool"):  # an attribute of the wrong type
            name = _pick(
                rng,
                (["kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode"] if op == "LpPool" else [])
                + ["p"],
            )
            attrs[name] = _wrong_type(rng, name)
        else:  # an element type the op has no kernel for
            forced_error = True
            culprits |= {"implementation", "type", "Type"}
    declared = list(shape) if rng.random() < 0.5 else None
    x_type = TensorProto.INT32 if forced_error else None
    case = {
        "op": op,
        "opset": opset,
        "dtype": dtype,
        "shape": shape,
        "attrs": attrs,
        "model": float_model(op, opset, dtype, declared, attrs, x_type),
    }
    if forced_error:
        x = np.zeros(shape, np.int32)
        case.update(feeds={"X": x}, expect=("error", culprits))
        return case
    x = R.to_dtype(rng.standard_normal(shape) * 2, dtype)
    case["feeds"] = {"X": x}
    case["expect"] = expect_float(op, opset, dtype, shape, attrs, x)
    return case


def _p_value(attrs, opset):
    p = attrs.get("p", 2)
    if isinstance(p, str) or not math.isfinite(float(p)) or float(p) <= 0:
        raise Invalid("p")
    return float(np.float32(p)) if isinstance(p, float) else float(p)  # a FLOAT attribute is a float32


def size_expectation(n, c, spatial, out, kernel, itemsize, qlinear):
    """What the sizes alone decide, as the library computes them (64-bit checked products of the output shape,
    the kernel, the separable passes' intermediates): ('error', culprits) | ('empty', None) | ('skip', why) | None
    (go on: compute the reference)."""
    inter = max(math.prod(spatial[:a]) * math.prod(out[a:]) for a in range(len(out)))
    total = n * c * math.prod(out)
    if (
        math.prod(out) > I64_MAX
        or inter > I64_MAX
        or math.prod(kernel) > I64_MAX
        or n * c * math.prod(out) > I64_MAX
        or (qlinear and inter * max(c, 1) * 8 > I64_MAX)
    ):
        return "error", set(GEOMETRY) | {"64 bits"}
    if total == 0:
        return "empty", None
    if total * itemsize > I64_MAX:
        return "error", set(GEOMETRY) | {"64 bits"}
    scratch = (2 * inter * c + math.prod(spatial)) * 8 if qlinear else 3 * max(inter, math.prod(spatial)) * 8
    if total * itemsize >= ALLOC_FAILS_BYTES or scratch >= ALLOC_FAILS_BYTES:
        return "error", set(GEOMETRY) | set(OOM_WORDS)
    if total > MAX_OUTPUT_ELEMENTS or scratch > 64 * MAX_OUTPUT_ELEMENTS:
        return "skip", "too large to allocate in a test"
    return None


def expect_float(op, opset, dtype, shape, attrs, x):
    bad, clean = _split_wrong_types(attrs)
    exp = _expect_float(op, opset, dtype, shape, clean, x)
    return ("error", bad | (exp[1] if exp[0] == "error" else set())) if bad else exp


def _expect_float(op, opset, dtype, shape, attrs, x):
    """('error', culprits) | ('value', ref) | ('empty', shape) | ('skip', reason).
    Attributes are checked when the session is created, the input in run(): when both are wrong, either may be named."""
    culprits = set()
    p = 2.0
    try:
        if op in ("LpPool", "GlobalLpPool"):
            p = _p_value(attrs, opset)
    except Invalid as e:
        culprits |= e.culprits
    if op == "LpPool":
        culprits |= attribute_culprits(attrs, qlinear=False)
    if len(shape) < 3:
        culprits |= {"X", "input"}
    if culprits:
        return "error", culprits
    nc = shape[0] * shape[1]
    if op != "LpPool":
        if nc and 0 in shape[2:]:
            return "error", {"X", "input"}
        if nc == 0:
            return "value", np.zeros(shape[:2] + [1] * (len(shape) - 2))
        with np.errstate(all="ignore"):
            ref = {"GlobalAveragePool": R.global_average_pool, "GlobalMaxPool": R.global_max_pool}.get(
                op, lambda v: R.global_lp_pool(v, p)
            )(x)
        return "value", ref
    try:
        out, pb, s, d, k, overflow = geometry(attrs, shape[2:])
    except Invalid as e:
        return "error", e.culprits
    if overflow:
        return "error", set(GEOMETRY) | {"64 bits"}
    sizes = size_expectation(shape[0], shape[1], shape[2:], out, k, R.DTYPES[dtype].itemsize, qlinear=False)
    if sizes is not None:
        return sizes if sizes[0] != "empty" else ("empty", shape[:2] + out)
    with np.errstate(all="ignore"):
        ref = fast_lp_pool(x, out, pb, s, d, k, p)
    return "value", ref


def gen_qlinear_case(rng):
    dtype = np.dtype(_pick(rng, [np.uint8, np.int8]))
    lo, hi = RQ.QRANGE[dtype]
    n = int(rng.integers(1, 3))
    cl = int(rng.random() < 0.4)
    k = [int(rng.integers(1, 4)) for _ in range(n)]
    attrs = {
        "kernel_shape": k,
        "strides": [int(rng.integers(1, 3)) for _ in range(n)],
        "pads": [int(rng.integers(0, k[i % n])) for i in range(2 * n)],
    }
    if cl or rng.random() < 0.3:
        attrs["channels_last"] = cl
    spatial = [int(rng.integers(k[i], 7)) for i in range(n)]
    N, C = int(rng.integers(1, 3)), int(rng.integers(1, 5))
    shape = [N] + (spatial + [C] if cl else [C] + spatial)
    params = {
        "xs": np.array(0.05, np.float32),
        "xz": np.array(lo + 100, dtype),
        "ys": np.array(0.07, np.float32),
        "yz": np.array(lo + 90, dtype),
    }
    names = ["X", "xs", "xz", "ys", "yz"]
    as_inputs = set(p for p in ("xs", "xz", "ys", "yz") if rng.random() < 0.3)
    extra_inputs = 0
    forced_by = {}  # per scale / zero point / input list: the culprits that make it invalid
    for _ in range(int(rng.integers(1, 3))):
        what = rng.random()
        if what < 0.4:
            _mutate_geometry(rng, attrs, max(1, len(_ints_or_none(attrs.get("kernel_shape")) or [1])), qlinear=True)
        elif what < 0.5:
            attrs[_pick(rng, ["count_include_pad", "channels_last"])] = _pick(rng, [2, -1, 2**40, 0, 1])
        elif what < 0.75:  # scales and zero points
            present = [p for p in ("xs", "ys", "xz", "yz") if p in names]
            if not present:
                continue
            name = _pick(rng, present)
            forced_by.pop(name, None)
            spec = {"xs": "x_scale", "ys": "y_scale", "xz": "x_zero_point", "yz": "y_zero_point"}[name]
            r = int(rng.integers(6))
            if name in ("xs", "ys"):
                if r == 0:
                    params[name] = np.array([0.05, 0.05], np.float32)
                    forced_by[name] = {spec}
                elif r == 1:
                    params[name] = np.array([[0.05]], np.float32)
                    forced_by[name] = {spec}
                elif r == 2:
                    names[names.index(name)] = ""
                    forced_by[name] = {spec, "input"}
                else:
                    v = _pick(rng, [0.0, -0.05, math.nan, math.inf, -math.inf, 1e-45, 3e38, 1e-30])
                    params[name] = np.array(v, np.float32)
                    if not (math.isfinite(v) and v > 0):
                        forced_by[name] = {spec}
            else:
                if r == 0:
                    params[name] = np.array([1, 2], dtype)
                    forced_by[name] = {spec}
                elif r == 1:  # the other 8-bit type
                    params[name] = np.array(3, np.int8 if dtype == np.uint8 else np.uint8)
                    forced_by[name] = {spec, name, "type", "Type"}
                elif r == 2:
                    names[names.index(name)] = ""  # absent: 0
                else:
                    params[name] = np.array(_pick(rng, [lo, hi, 0]), dtype)
        elif what < 0.85:  # the input
            r = int(rng.integers(3))
            if r == 0:
                shape = shape[: int(rng.integers(0, 3))]
            elif len(shape) >= 3:
                shape[_pick(rng, [0, len(shape) - 1 if cl else 1])] = 0
        elif what < 0.9:
            extra_inputs = 1
            forced_by["extra"] = {"input"}
        elif what < 0.95:
            attrs[_pick(rng, ["foo", "dilation", "p"])] = _pick(rng, [1, [2, 2], "x"])
        else:  # an attribute of the wrong type
            name = _pick(
                rng, ["kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "count_include_pad", "channels_last"]
            )
            attrs[name] = _wrong_type(rng, name)
    declared = list(shape) if rng.random() < 0.5 else None
    model, feeds = qlinear_model_raw(dtype, declared, attrs, params, names, as_inputs, extra_inputs)
    x = rng.integers(lo, hi + 1, size=shape).astype(dtype)
    case = {
        "op": "QLinearAveragePool",
        "dtype": dtype.name,
        "shape": shape,
        "attrs": attrs,
        "model": model,
        "feeds": {"X": x, **feeds},
        "ops": "all",
        "params": {k: v.tolist() for k, v in params.items()},
        "names": names,
    }
    forced = set().union(*forced_by.values()) if forced_by else None
    case["expect"] = expect_qlinear(x, shape, attrs, params, names, forced)
    return case


def expect_qlinear(x, shape, attrs, params, names, forced=None):
    bad, clean = _split_wrong_types(attrs)
    exp = _expect_qlinear(x, shape, clean, params, names, forced)
    return ("error", bad | (exp[1] if exp[0] == "error" else set())) if bad else exp


def _expect_qlinear(x, shape, attrs, params, names, forced=None):
    """As expect_float; `forced`: culprits of an invalid scale, zero point or input list (ORT or the kernel names
    them; an attribute or rank error found first may be named instead)."""
    culprits = set(forced or ()) | attribute_culprits(attrs, qlinear=True)
    if len(shape) < 3:
        culprits |= {"X", "input"}
    if culprits:
        return "error", culprits
    try:
        cl = attrs.get("channels_last", 0)
        spatial = shape[1:-1] if cl else shape[2:]
        out, pb, s, _, k, overflow = geometry(attrs, spatial, allow_dilations=False)
    except Invalid as e:
        return "error", e.culprits
    c = shape[-1] if cl else shape[1]
    if overflow:
        return "error", set(GEOMETRY) | {"64 bits"}
    sizes = size_expectation(shape[0], c, spatial, out, k, 1, qlinear=True)
    if sizes is not None and sizes[0] != "empty":
        return sizes
    if sizes is not None:  # N = 0 or C = 0: an empty output of the right shape
        return "empty", [shape[0]] + (list(out) + [c] if cl else [c] + list(out))
    xs, ys = float(params["xs"]), float(params["ys"])
    xz = int(params["xz"]) if "xz" in names else None
    yz = int(params["yz"]) if "yz" in names else None
    try:
        with np.errstate(all="ignore"):
            ref, pre = RQ.qlinear_average_pool(
                x,
                xs,
                xz,
                ys,
                yz,
                k,
                s,
                attrs.get("pads"),
                attrs.get("auto_pad", "NOTSET") or "NOTSET",
                attrs.get("ceil_mode", 0),
                attrs.get("count_include_pad", 0),
                cl,
            )
    except ValueError as e:
        if "empty window" in str(e):
            return "skip", "a window with no input element (README: gives y_zero_point; not in the reference)"
        raise
    if not (1e-4 <= xs / ys <= 1e4) or not np.all(np.isfinite(pre)):
        # the reference dequantises in float32: its rounding residue of a zero sum, divided by a tiny y_scale, can
        # saturate where the exact (integer) sum the library uses gives y_zero_point, and x_scale near the float32
        # maximum overflows it to inf. Shape and type only.
        return "empty", list(ref.shape)
    return "qvalue", (ref, pre)


def gen_cases(n, seed):
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < n:
        case = gen_qlinear_case(rng) if rng.random() < 0.35 else gen_float_case(rng)
        kind = case["expect"][0]
        if kind == "skip":
            continue
        if SANITIZED and kind == "error" and "alloc" in case["expect"][1]:
            continue
        case["id"] = f"f{len(cases):04d}"
        cases.append(case)
    return cases


# --------------------------------------------------------------------------- judging


def _decode(o):
    dt = R.BF16 if o["dtype"] == "bfloat16" else np.dtype(o["dtype"])
    return np.frombuffer(base64.b64decode(o["data"]), dtype=dt).reshape(o["shape"])


def describe(case):
    attrs = {
        k: (
            f"<{AttributeProto.AttributeType.Name(v.type)} {helper.get_attribute_value(v)!r}>"
            if isinstance(v, AttributeProto)
            else v
        )
        for k, v in case["attrs"].items()
    }
    return f"{case['id']} {case['op']} {case.get('dtype')} x{case['shape']} attrs={attrs}" + (
        f" params={case['params']} inputs={case['names']}" if "params" in case else ""
    )


def judge(case, rec):
    """None when the outcome is acceptable, else the reason."""
    kind, payload = case["expect"]
    status = rec["status"]
    if status in ("crash", "hang"):
        return f"{status.upper()}: {rec['message']}"
    if rec.get("batch_failure"):
        return f"worker {rec['batch_failure']}"
    if status == "refused by ORT":  # EP route only: refused before any EP, as stock ORT refuses it
        return None
    if status == "error":
        msg = rec["message"]
        if case["op"] not in msg:
            return f"error does not name the op: {msg}"
        culprits = payload if kind == "error" else set(GEOMETRY) | {"p", "X", "input"} | set(OOM_WORDS)
        if not any(c in msg for c in culprits):
            return f"error names none of {sorted(culprits)}: {msg}"
        return None  # invalid, or valid but refused with a clear error (counted as such)
    # ran
    if kind == "error":
        return f"accepted although invalid (expected an error naming one of {sorted(payload)})"
    if rec["counted"] != {case["op"]: 1}:
        return f"library call counters moved by {rec['counted']}, expected {{{case['op']!r}: 1}}"
    if kind == "empty":  # shape (and, with the data, type) only
        o = rec["outputs"][0]
        want_dtype = case["dtype"]
        if o["shape"] != list(payload) or o["dtype"] != want_dtype:
            return f"output {o['dtype']}{o['shape']}, expected {want_dtype}{list(payload)}"
        return None
    y = _decode(rec["outputs"][0])
    try:
        if kind == "qvalue":
            assert_qlinear_matches(y, payload[0], payload[1], "")
        elif case["op"] == "GlobalMaxPool":
            np.testing.assert_array_equal(R.to_f64(y), R.to_f64(R.to_dtype(payload, case["dtype"])))
        else:
            assert_close_with_subnormals(y, payload, case["dtype"], case["feeds"]["X"], "")
    except (AssertionError, pytest.fail.Exception) as e:
        return f"wrong result: {str(e)[:600]}"
    return None


def _report(cases, results):
    bad = []
    for i, case in enumerate(cases):
        why = judge(case, results[i])
        if why:
            bad.append(f"{describe(case)}\n    -> {why}")
    return bad


def test_fuzz_invalid_combinations(tmp_path):
    cases = gen_cases(option("fuzz_cases"), option("fuzz_seed"))
    del SANITIZER_REPORTS[:]
    results = run_cases(cases, str(tmp_path))
    assert not SANITIZER_REPORTS, "sanitizer report in a fuzz worker:\n" + SANITIZER_REPORTS[0]
    bad = _report(cases, results)
    for i, case in enumerate(cases):
        valid = case["expect"][0] != "error"
        ran = results[i]["status"] == "ok"
        if results[i]["status"] == "refused by ORT":
            CASE_COUNTS["fuzz: refused by ORT's own schema (EP route)"] += 1
            continue
        CASE_COUNTS[
            "fuzz: "
            + (
                "valid, ran, result checked"
                if ran
                else "valid, refused with a clear error"
                if valid
                else "invalid, clear error"
            )
        ] += 1
    assert not bad, f"{len(bad)} of {len(cases)} fuzz cases misbehaved:\n" + "\n".join(bad[:25])


# --------------------------------------------------------------------------- the harness itself


def test_harness_catches_crash_and_hang(tmp_path):
    """A worker that dies (abort) is noticed, the case is confirmed alone, and the rest still run; a worker that
    stalls is noticed too (checked side by side, without the confirmation run)."""
    good = gen_cases(3, 1)
    hang = {}
    (tmp_path / "hang").mkdir()
    th = threading.Thread(
        target=lambda: hang.update(
            run_cases([{**good[0], "selftest": "hang"}, good[1]], str(tmp_path / "hang"), timeout=1, confirm=False)
        )
    )
    th.start()
    cases = [good[0], {**good[1], "selftest": "abort"}, good[2]]
    results = run_cases(cases, str(tmp_path))
    th.join()
    assert results[1]["status"] == "crash", results[1]
    for i in (0, 2):
        assert judge(cases[i], results[i]) is None, judge(cases[i], results[i])
    assert hang[0]["status"] == "hang", hang[0]
    assert judge(good[1], hang[1]) is None, judge(good[1], hang[1])


def test_fast_reference_matches_reference():
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(1, 3))
        k = [int(rng.integers(1, 4)) for _ in range(n)]
        attrs = {
            "kernel_shape": k,
            "strides": [int(rng.integers(1, 4)) for _ in range(n)],
            "dilations": [int(rng.integers(1, 3)) for _ in range(n)],
            "pads": [int(rng.integers(0, 4)) for _ in range(2 * n)],
            "ceil_mode": int(rng.integers(2)),
        }
        spatial = [int(rng.integers(6, 10)) for _ in range(n)]
        x = rng.standard_normal([1, 2] + spatial)
        out, pb, s, d, kk, _ = geometry(attrs, spatial)
        ref = R.lp_pool(x, k, attrs["strides"], attrs["pads"], attrs["dilations"], ceil_mode=attrs["ceil_mode"], p=3)
        np.testing.assert_allclose(fast_lp_pool(x, out, pb, s, d, kk, 3), ref, rtol=1e-12)


# --------------------------------------------------------------------------- regression cases


def _attr(name, value, kind):
    return helper.make_attribute(name, value, attr_type=kind)


WRONG_TYPES = [
    # (op, opset, attribute name, AttributeProto of the wrong type)
    ("LpPool", 22, "p", _attr("p", "abc", AttributeProto.STRING)),
    ("LpPool", 22, "p", _attr("p", [3, 4], AttributeProto.INTS)),
    ("GlobalLpPool", 22, "p", _attr("p", [3, 4], AttributeProto.INTS)),
    ("GlobalLpPool", 1, "p", _attr("p", "3", AttributeProto.STRING)),
    ("LpPool", 22, "auto_pad", _attr("auto_pad", 1, AttributeProto.INT)),
    ("LpPool", 22, "ceil_mode", _attr("ceil_mode", 1.0, AttributeProto.FLOAT)),
    ("LpPool", 22, "strides", _attr("strides", 2, AttributeProto.INT)),
    ("LpPool", 22, "kernel_shape", _attr("kernel_shape", [2.0, 2.0], AttributeProto.FLOATS)),
    ("LpPool", 22, "pads", _attr("pads", [1.0, 1.0, 1.0, 1.0], AttributeProto.FLOATS)),
    ("LpPool", 22, "dilations", _attr("dilations", "2", AttributeProto.STRING)),
    ("QLinearAveragePool", 1, "count_include_pad", _attr("count_include_pad", 1.0, AttributeProto.FLOAT)),
    ("QLinearAveragePool", 1, "channels_last", _attr("channels_last", "1", AttributeProto.STRING)),
    ("QLinearAveragePool", 1, "strides", _attr("strides", [2.0, 2.0], AttributeProto.FLOATS)),
]


def test_wrong_attribute_types_are_errors(tmp_path):
    """(These were once treated as absent: silently the default.)"""
    cases = []
    for op, opset, name, attr in WRONG_TYPES:
        if op == "QLinearAveragePool":
            attrs = {"kernel_shape": [2, 2], name: attr}
            model, feeds = qlinear_model_raw(
                np.uint8,
                [1, 3, 4, 4],
                attrs,
                {"xs": np.array(0.1, np.float32), "ys": np.array(0.1, np.float32)},
                ["X", "xs", "", "ys"],
                set(),
            )
            x = np.arange(48, dtype=np.uint8).reshape(1, 3, 4, 4)
            case = {"op": op, "model": model, "feeds": {"X": x}, "ops": "all"}
        else:
            attrs = {"kernel_shape": [2, 2]} if op == "LpPool" and name != "kernel_shape" else {}
            attrs[name] = attr
            x = R.to_dtype(np.random.default_rng(0).standard_normal([1, 3, 4, 4]), "float32")
            case = {"op": op, "model": float_model(op, opset, "float32", [1, 3, 4, 4], attrs), "feeds": {"X": x}}
        case.update(
            id=f"wrong-type-{op}-{name}",
            dtype="float32",
            shape=[1, 3, 4, 4],
            attrs={name: AttributeProto.AttributeType.Name(attr.type)},
            expect=("error", {name}),
        )
        cases.append(case)
    results = run_cases(cases, str(tmp_path))
    bad = _report(cases, results)
    assert not bad, f"{len(bad)} of {len(cases)} wrongly typed attributes misbehaved:\n" + "\n".join(bad)


def test_huge_kernel_windows_finish(tmp_path):
    """Valid nodes whose windows are astronomically long but hold a few input elements (huge kernel with matching
    pads and strides, or SAME padding) must give the right answer promptly, like any other small input (these once
    ran for hours)."""
    cases = []
    K = 2**40
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 4)
    for attrs in (
        {"kernel_shape": [K], "pads": [K, K], "strides": [K], "p": 1},
        {"kernel_shape": [K], "auto_pad": "SAME_UPPER", "p": 2},
    ):
        exp = expect_float("LpPool", 22, "float32", [1, 1, 4], attrs, x)
        assert exp[0] == "value"
        cases.append(
            {
                "id": f"lp-{attrs}",
                "op": "LpPool",
                "dtype": "float32",
                "shape": [1, 1, 4],
                "attrs": attrs,
                "model": float_model("LpPool", 22, "float32", [1, 1, 4], attrs),
                "feeds": {"X": x},
                "expect": ("value", exp[1]),
            }
        )
    q = np.arange(1, 5, dtype=np.uint8).reshape(1, 1, 4)
    attrs = {"kernel_shape": [K], "pads": [K, K], "strides": [K], "count_include_pad": 0}
    model, _ = qlinear_model_raw(
        np.uint8,
        [1, 1, 4],
        attrs,
        {"xs": np.array(1.0, np.float32), "ys": np.array(1.0, np.float32)},
        ["X", "xs", "", "ys"],
        set(),
    )
    # windows: positions [-2^40, 0) then [0, 2^40): the second holds all four elements, mean 2.5 -> 2 (half to even)
    ref = np.array([[[0, 2]]], np.uint8)
    cases.append(
        {
            "id": "qlinear",
            "op": "QLinearAveragePool",
            "dtype": "uint8",
            "shape": [1, 1, 4],
            "attrs": attrs,
            "model": model,
            "feeds": {"X": q},
            "ops": "all",
            "expect": ("qvalue", (ref, np.array([[[0.0, 2.5]]]))),
        }
    )
    # one worker per case, side by side: a hang costs its timeout once
    results = {}

    def one(i):
        results[i] = run_cases([cases[i]], str(tmp_path / str(i)), timeout=30, confirm=False)[0]

    for i in range(len(cases)):
        (tmp_path / str(i)).mkdir()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cases))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    bad = _report(cases, results)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("dtype,p", [("float32", 1e-3), ("float64", 1e-6), ("float16", 1e-6), ("float32", 1e-45)])
def test_small_fractional_p_accuracy(dtype, p):
    """LpPool/GlobalLpPool version 1 take any float p > 0. Windows of one element must give |x| whatever p is; the
    reference computes m * (sum (|x|/m)^p)^(1/p) in float64."""
    x = R.to_dtype(np.random.default_rng(11).uniform(0.1, 10, (1, 3, 4, 5)), dtype)
    y, _ = run_op("LpPool", 1, dtype, x, {"kernel_shape": [1, 1], "p": p})
    R.assert_close(y, R.lp_pool(x, [1, 1], p=float(np.float32(p))), dtype, R.input_scale(x), f"LpPool-1 p={p}")


def test_output_size_overflow_error(tmp_path):
    """2^61 float outputs (element count fits int64, bytes do not): a clear error naming the op and the attribute."""
    attrs = {"kernel_shape": [2, 2], "pads": [0, 0, 2**31 + 1, 2**30], "p": 2}
    x = np.ones([1, 1, 4, 2], np.float32)
    cases = [
        {
            "id": "lp-bytes-overflow",
            "op": "LpPool",
            "dtype": "float32",
            "shape": [1, 1, 4, 2],
            "attrs": attrs,
            "model": float_model("LpPool", 22, "float32", [1, 1, 4, 2], attrs),
            "feeds": {"X": x},
            "expect": ("error", set(GEOMETRY) | {"64 bits"}),
        }
    ]
    results = run_cases(cases, str(tmp_path))
    bad = _report(cases, results)
    assert not bad, "\n".join(bad)


def test_extreme_strides_and_pads(tmp_path):
    """Valid nodes with a stride of 2^63 - 1 (one window along that axis) must give the reference's answer (and, under
    the sanitizers or valgrind, no report). In subprocesses: these once read and wrote outside the buffers (and one
    segfaulted)."""
    cases = []
    x = np.array([[[1.0, 2.0, 4.0]]], np.float32)
    attrs = {"kernel_shape": [3], "strides": [I64_MAX], "pads": [2, 0], "p": 1}
    cases.append(
        {
            "id": "lp",
            "op": "LpPool",
            "dtype": "float32",
            "shape": [1, 1, 3],
            "attrs": attrs,
            "model": float_model("LpPool", 22, "float32", [1, 1, 3], attrs),
            "feeds": {"X": x},
            "expect": ("value", np.array([[[1.0]]])),
        }
    )
    rng = np.random.default_rng(0)
    params = {
        "xs": np.array(0.05, np.float32),
        "xz": np.array(-28, np.int8),
        "ys": np.array(0.07, np.float32),
        "yz": np.array(-38, np.int8),
    }
    for cl, spatial, k, st, pads in [
        (0, [5], [3], [I64_MAX], [2, 0]),
        (0, [4, 6], [3, 2], [I64_MAX, 1], [2, 0, 0, 0]),
        (1, [3, 3], [2, 3], [2, I64_MAX], [1, 2, 0, 1]),
    ]:
        shape = [1] + (spatial + [3] if cl else [3] + spatial)
        q = rng.integers(-128, 128, shape).astype(np.int8)
        attrs = {"kernel_shape": k, "strides": st, "pads": pads, "channels_last": cl}
        model, _ = qlinear_model_raw(np.int8, shape, attrs, params, ["X", "xs", "xz", "ys", "yz"], set())
        ref, pre = RQ.qlinear_average_pool(q, 0.05, -28, 0.07, -38, k, st, pads, channels_last=cl)
        cases.append(
            {
                "id": f"qlinear-{len(cases)}",
                "op": "QLinearAveragePool",
                "dtype": "int8",
                "shape": shape,
                "attrs": attrs,
                "model": model,
                "feeds": {"X": q},
                "ops": "all",
                "expect": ("qvalue", (ref, pre)),
            }
        )
    results = run_cases(cases, str(tmp_path))
    bad = _report(cases, results)
    assert not bad, "\n".join(bad)
