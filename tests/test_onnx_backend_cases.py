"""The ONNX project's own node test cases for the pooling ops, run with the library registered."""

import functools
import warnings

import numpy as np
import pytest

from helpers import CASE_COUNTS, IR_VERSION, counts_one_run, make_session, run_session

OPS = ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LpPool")


@functools.cache
def _cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    out = {}
    for c in cases:
        ops = {n.op_type for n in c.model.graph.node}
        if ops & set(OPS):
            out[c.name] = c
    return out


# the names we expect onnx 1.23 to ship (collected dynamically below, this list guards against an
# empty selection silently passing)
EXPECTED = [
    "test_globalaveragepool",
    "test_globalaveragepool_precomputed",
    "test_globalmaxpool",
    "test_globalmaxpool_precomputed",
    "test_lppool_1d_default",
    "test_lppool_2d_default",
    "test_lppool_3d_default",
    "test_lppool_2d_same_upper",
    "test_lppool_2d_same_lower",
    "test_lppool_2d_pads",
    "test_lppool_2d_strides",
    "test_lppool_2d_dilations",
]


def test_cases_were_collected():
    names = set(_cases())
    missing = [n for n in EXPECTED if n not in names]
    assert not missing, f"ONNX node test cases not found: {missing}"
    assert any(n.startswith("test_lppool_") for n in names)


def _names():
    return sorted(_cases())


@pytest.mark.parametrize("name", _names())
def test_onnx_node_case(name):
    case = _cases()[name]
    model = case.model
    model.ir_version = min(model.ir_version, IR_VERSION)
    (op,) = {n.op_type for n in model.graph.node}
    assert op in OPS
    sess = make_session(model)
    in_names = [i.name for i in model.graph.input]
    for inputs, outputs in case.data_sets:
        feeds = dict(zip(in_names, inputs))
        with counts_one_run(op):
            got = run_session(sess, feeds)
        assert len(got) == len(outputs)
        for g, e in zip(got, outputs):
            assert g.dtype == e.dtype and g.shape == e.shape, (name, g.shape, e.shape)
            rtol = 1e-5 if e.dtype == np.float32 else case.rtol
            np.testing.assert_allclose(g, e, rtol=rtol, atol=max(case.atol, 1e-6), err_msg=name)
        CASE_COUNTS["ONNX backend node cases"] += 1
