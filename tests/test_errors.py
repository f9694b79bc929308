"""Bad inputs and attributes: every one must give an error naming the op and the attribute/input.

Each case runs twice: with the input shape declared in the model (errors may surface at load,
e.g. from the library's shape inference) and with no declared shape (errors surface at run)."""

import math

import numpy as np
import pytest

from helpers import CASE_COUNTS, counts_one_run, expect_error, make_session, pool_model, run_session

GLOBAL_OPS = ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]
I64_MAX = 2**63 - 1

# (id, op, opset, attrs, input shape, pattern)
CASES = []


def case(id_, op, opset, attrs, shape, pattern):
    CASES.append(pytest.param(op, opset, attrs, shape, pattern, id=id_))


# ---- input rank < 3 and empty spatial dims
for op in GLOBAL_OPS + ["LpPool"]:
    extra = {"kernel_shape": [2]} if op == "LpPool" else {}
    for shape in ([2, 3], [5], []):
        what = "(input|\\bX\\b|kernel_shape)" if op == "LpPool" else "(input|\\bX\\b)"
        case(f"{op}-rank{len(shape)}", op, 22, extra, shape, rf"{op}.*{what}")
    if op == "LpPool":
        # kernel_shape of length 0 on a rank-2 input
        case(f"{op}-rank2-empty-kernel", op, 22, {"kernel_shape": []}, [2, 3], rf"{op}.*(input|\bX\b|kernel_shape)")
for op in GLOBAL_OPS:
    for shape in ([1, 2, 0, 3], [1, 2, 0], [2, 2, 3, 3, 0]):
        case(f"{op}-zero-spatial-{shape}", op, 22, {}, shape, rf"{op}.*(input|\bX\b)")

# ---- p <= 0 / not finite
for op in ("GlobalLpPool", "LpPool"):
    extra = {"kernel_shape": [2, 2]} if op == "LpPool" else {}
    for opset in (2, 11, 18, 22):
        if op == "GlobalLpPool" and opset not in (2, 22):
            continue
        for p in (0, -1, -7):
            case(f"{op}-{opset}-p{p}", op, opset, dict(extra, p=p), [1, 2, 4, 4], rf"{op}.*\bp\b")
    for p in (0.0, -1.5, math.inf, -math.inf, math.nan):
        case(f"{op}-1-p{p}", op, 1, dict(extra, p=p), [1, 2, 4, 4], rf"{op}.*\bp\b")

# ---- LpPool attributes
S4 = [1, 2, 4, 4]
for opset in (1, 2, 11, 18, 22):
    p = 2.0 if opset == 1 else 2
    case(f"LpPool-{opset}-no-kernel_shape", "LpPool", opset, {"p": p}, S4, r"LpPool.*kernel_shape")
    case(
        f"LpPool-{opset}-no-kernel_shape-strides",
        "LpPool",
        opset,
        {"p": p, "strides": [1, 1]},
        S4,
        r"LpPool.*kernel_shape",
    )

K = {"kernel_shape": [2, 2]}
LP = [
    ("kernel_shape-short", {"kernel_shape": [2]}, S4, "kernel_shape"),
    ("kernel_shape-long", {"kernel_shape": [2, 2, 2]}, S4, "kernel_shape"),
    ("kernel_shape-long-1d", {"kernel_shape": [2, 2]}, [1, 2, 5], "kernel_shape"),
    ("kernel_shape-zero", {"kernel_shape": [0, 2]}, S4, "kernel_shape"),
    ("kernel_shape-negative", {"kernel_shape": [2, -1]}, S4, "kernel_shape"),
    ("strides-short", dict(K, strides=[1]), S4, "strides"),
    ("strides-long", dict(K, strides=[1, 1, 1]), S4, "strides"),
    ("strides-zero", dict(K, strides=[0, 1]), S4, "strides"),
    ("strides-negative", dict(K, strides=[1, -2]), S4, "strides"),
    ("pads-short", dict(K, pads=[0, 0]), S4, "pads"),
    ("pads-odd", dict(K, pads=[0, 0, 0]), S4, "pads"),
    ("pads-long", dict(K, pads=[0, 0, 0, 0, 0, 0]), S4, "pads"),
    ("pads-negative", dict(K, pads=[-1, 0, 0, 0]), S4, "pads"),
    ("pads-negative-end", dict(K, pads=[0, 0, 0, -1]), S4, "pads"),
    ("dilations-short", dict(K, dilations=[1]), S4, "dilations"),
    ("dilations-long", dict(K, dilations=[1, 1, 1]), S4, "dilations"),
    ("dilations-zero", dict(K, dilations=[1, 0]), S4, "dilations"),
    ("dilations-negative", dict(K, dilations=[-1, 1]), S4, "dilations"),
    ("kernel-larger-than-input", {"kernel_shape": [5, 2]}, S4, "kernel"),
    ("kernel-larger-than-padded-input", {"kernel_shape": [2, 7], "pads": [0, 1, 0, 1]}, S4, "kernel"),
    ("kernel-larger-than-input-valid", {"kernel_shape": [5, 2], "auto_pad": "VALID"}, S4, "kernel"),
    ("dilated-kernel-larger-than-input", {"kernel_shape": [2, 2], "dilations": [4, 1]}, S4, "(kernel|dilations)"),
    ("auto_pad-unknown", dict(K, auto_pad="FOO"), S4, "auto_pad"),
    ("auto_pad-SAME", dict(K, auto_pad="SAME"), S4, "auto_pad"),
    ("auto_pad-lowercase", dict(K, auto_pad="same_upper"), S4, "auto_pad"),
    # 64-bit overflow
    ("kernel_shape-2^62", {"kernel_shape": [2**62, 2**62]}, S4, "kernel_shape"),
    ("kernel_shape-i64max", {"kernel_shape": [I64_MAX, 2]}, S4, "kernel_shape"),
    (
        "kernel_shape-2^62-with-pads",
        {"kernel_shape": [2**62, 2], "pads": [2**62, 0, 2**62, 0]},
        S4,
        "(kernel_shape|pads)",
    ),
    ("pads-near-2^63", dict(K, pads=[I64_MAX, 0, 0, 0]), S4, "pads"),
    ("pads-sum-overflow", dict(K, pads=[2**62, 0, 2**62, 0]), S4, "pads"),
    ("pads-end-near-2^63", dict(K, pads=[0, 0, 0, I64_MAX - 2]), S4, "pads"),
    ("dilations-2^62", dict(K, dilations=[2**62, 1]), S4, "(dilations|kernel)"),
    ("dilations-i64max", {"kernel_shape": [3, 2], "dilations": [I64_MAX, 1]}, S4, "(dilations|kernel)"),
]
for id_, attrs, shape, what in LP:
    for opset in (2, 22):
        case(f"LpPool-{opset}-{id_}", "LpPool", opset, dict(attrs, p=2), shape, rf"LpPool.*{what}")
# a few also at opset 1 (FLOAT p)
OPSET1_IDS = {
    "kernel_shape-short",
    "kernel_shape-long",
    "strides-short",
    "pads-negative",
    "kernel-larger-than-input",
    "auto_pad-unknown",
    "pads-sum-overflow",
}
for id_, attrs, shape, what in [c for c in LP if c[0] in OPSET1_IDS]:
    case(f"LpPool-1-{id_}", "LpPool", 1, dict(attrs, p=2.0), shape, rf"LpPool.*{what}")


@pytest.mark.parametrize("declared", ["static", "unknown"])
@pytest.mark.parametrize("op,opset,attrs,shape,pattern", CASES)
def test_bad_input_names_op_and_attribute(op, opset, attrs, shape, pattern, declared):
    x = np.ones(shape, dtype=np.float32)
    model = pool_model(op, opset, "float32", list(shape) if declared == "static" else None, attrs)
    expect_error(model.SerializeToString(), {"X": x}, pattern)
    CASE_COUNTS["error cases"] += 1


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_errors_for_other_dtypes(dtype):
    import reference as R

    x = R.to_dtype(np.ones([1, 2, 4, 4]), dtype)
    model = pool_model("LpPool", 22, dtype, None, {"kernel_shape": [2, 2], "strides": [0, 1]})
    expect_error(model.SerializeToString(), {"X": x}, r"LpPool.*strides")
    model = pool_model("GlobalLpPool", 22, dtype, None, {"p": 0})
    expect_error(model.SerializeToString(), {"X": x}, r"GlobalLpPool.*\bp\b")
    x2 = R.to_dtype(np.ones([2, 4]), dtype)
    model = pool_model("GlobalMaxPool", 22, dtype, None)
    expect_error(model.SerializeToString(), {"X": x2}, r"GlobalMaxPool.*(input|\bX\b)")


def test_session_survives_a_failed_run():
    """A shape error at run() must not poison the session: a good input runs afterwards."""
    sess = make_session(pool_model("LpPool", 22, "float32", None, {"kernel_shape": [3, 3], "p": 1}))
    with pytest.raises(Exception, match=r"LpPool.*kernel"):
        run_session(sess, {"X": np.ones([1, 1, 2, 2], np.float32)})
    with counts_one_run("LpPool"):
        (y,) = run_session(sess, {"X": np.ones([1, 1, 3, 4], np.float32)})
    np.testing.assert_allclose(y, np.full([1, 1, 1, 2], 9.0))
