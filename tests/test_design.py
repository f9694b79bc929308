"""The library's two tables (element types, ops) against the tests and the README, so the README's recipes for adding
a type or an op cannot go stale: the types the library exports are the types the tests cover, every op row x version
x type is registered and runs (against the float64 reference, call counter moving), the versions are ONNX's, and the
README's Supported ops table and Design section name what exists."""

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import onnx_pools
import reference as R
from helpers import ONNX_TYPES, counts_one_run, make_session, pool_model, qlinear_model, run_session
from reference_qlinear import QRANGE, near_tie, qlinear_average_pool

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
needs_checkout = pytest.mark.skipif(
    not (README.exists() and (ROOT / "csrc").is_dir()), reason="README.md and csrc/ ship with the source checkout only"
)

# The tests' own lists of the types they check: the float types of the reference and the quantized ones of
# QLinearAveragePool's reference, named as ONNX names the element types (TensorProto.FLOAT -> "float").
FLOAT_TYPES = {TensorProto.DataType.Name(t).lower(): dtype for dtype, t in ONNX_TYPES.items()}
QUANT_TYPES = {np.dtype(d).name: np.dtype(d) for d in QRANGE}


def test_library_types_are_the_types_the_tests_cover():
    assert set(onnx_pools.TYPES) == set(FLOAT_TYPES) | set(QUANT_TYPES)
    assert len(onnx_pools.TYPES) == len(set(onnx_pools.TYPES))
    for name, domain, _, types in onnx_pools._op_table():
        assert set(types) == (set(QUANT_TYPES) if domain == "com.microsoft" else set(FLOAT_TYPES)), name
    assert dict(onnx_pools.OPS) == {name: domain for name, domain, _, _ in onnx_pools._op_table()}
    assert set(onnx_pools.call_counts()) == set(onnx_pools.OPS)


def test_versions_are_the_onnx_schema_versions():
    """A standard-domain row lists every version ONNX defines for the op (a new opset version of an op is a change
    to review, not something to pick up silently)."""
    history = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "":
            history.setdefault(schema.name, set()).add(schema.since_version)
    for name, domain, versions, _ in onnx_pools._op_table():
        if domain == "":
            assert set(versions) == history[name], name


def _float_case(op, version, type_name):
    dtype = FLOAT_TYPES[type_name]
    x = R.to_dtype(np.random.default_rng(version).uniform(-4, 4, [2, 3, 5, 4]), dtype)
    xr = R.to_f64(x)
    p = 2.0 if version == 1 else 2  # p is a FLOAT in version 1 of the Lp ops, an INT later
    if op == "GlobalAveragePool":
        return x, {}, R.global_average_pool(xr)
    if op == "GlobalMaxPool":
        return x, {}, R.global_max_pool(xr)
    if op == "GlobalLpPool":
        return x, {"p": p}, R.global_lp_pool(xr, 2)
    assert op == "LpPool", f"no test case for the op {op}: add one here"
    attrs = {"kernel_shape": [2, 3], "strides": [1, 2], "p": p}
    return x, attrs, R.lp_pool(xr, [2, 3], strides=[1, 2], p=2)


def _qlinear(type_name):
    dtype = QUANT_TYPES[type_name]
    lo, hi = QRANGE[dtype]
    x = np.random.default_rng(5).integers(lo, hi + 1, [1, 2, 6, 5]).astype(dtype)
    q = {"xs": 0.05, "xz": 3, "ys": 0.03, "yz": -2 if lo < 0 else 7}
    attrs = {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1]}
    model, feeds = qlinear_model(dtype, list(x.shape), attrs, q["xs"], q["xz"], q["ys"], q["yz"])
    want, pre = qlinear_average_pool(x, q["xs"], q["xz"], q["ys"], q["yz"], **attrs)
    return model, dict(feeds, X=x), want, near_tie(pre)


@pytest.mark.parametrize(
    "op,version,type_name",
    [(name, v, t) for name, _, versions, types in onnx_pools._op_table() for v in versions for t in types],
)
def test_every_row_version_and_type_runs(op, version, type_name):
    if op == "QLinearAveragePool":
        model, feeds, want, tie = _qlinear(type_name)
        sess = make_session(model, ops="all")
        with counts_one_run(op):
            (y,) = run_session(sess, feeds)
        assert y.dtype == want.dtype and y.shape == want.shape
        diff = np.abs(y.astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1 and not diff[~tie].any()  # one step only where float order decides a tie
        return
    x, attrs, want = _float_case(op, version, type_name)
    dtype = FLOAT_TYPES[type_name]
    sess = make_session(pool_model(op, version, dtype, list(x.shape), attrs))
    with counts_one_run(op):
        (y,) = run_session(sess, {"X": x})
    assert y.dtype == R.DTYPES[dtype] and y.shape == want.shape
    R.assert_close(y, want, dtype, R.input_scale(x), f"{op}-{version} {type_name}")


def _section(text, heading):
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


@needs_checkout
def test_readme_supported_ops_is_the_op_table():
    rows = {}
    for line in _section(README.read_text(), "## Supported ops").splitlines()[4:]:
        if not line.startswith("| "):
            break
        name, domain, versions, types = [c.strip() for c in line.strip("|").split("|")][:4]
        versions = tuple(int(v) for v in re.findall(r"\d+", re.sub(r"\(.*?\)", "", versions)))
        rows[name] = (domain.strip("`").replace('""', ""), versions, {t.strip() for t in types.split(",")})
    table = {name: (domain, versions, set(types)) for name, domain, versions, types in onnx_pools._op_table()}
    assert rows == table


def _expand(path):
    """`csrc/kernels_{a,b}.cc` -> the paths it stands for."""
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in _expand(path[: m.start()] + alt + path[m.end() :])]


@needs_checkout
def test_readme_design_names_files_and_names_that_exist():
    """Every repository path in the Design section's tables exists, and every code name in a table row occurs in
    one of the files that row names."""
    top = ("csrc/", "onnx_pools/", "tests/", "cmake/", "examples/", "scripts/", "bench/")
    checked = 0
    for line in _section(README.read_text(), "## Design").splitlines():
        if not line.startswith("| "):
            continue
        tokens = re.findall(r"`([^`]+)`", line)
        files = [p for t in tokens if t.startswith(top) or t == "README.md" for p in _expand(t)]
        for f in files:
            assert (ROOT / f).exists(), f"README Design names {f}, which does not exist"
        sources = "".join((ROOT / f).read_text() for f in files if (ROOT / f).is_file())
        for t in tokens:
            name = re.sub(r"<.*>$", "", t)
            if files and re.fullmatch(r"[A-Za-z_]\w*", name) and t not in files:
                assert re.search(rf"\b{name}\b", sources), f"README Design names {name}, not found in {files}"
                checked += 1
    assert checked >= 20  # the tables were found and read
