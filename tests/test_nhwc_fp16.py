"""The loader's answer to onnxruntime's NhwcTransformer on aarch64 CPUs with FP16 arithmetic: which sessions get
optimization.disable_specified_optimizers=NhwcTransformer. The CPU check is replaced here, so this runs anywhere;
whether the library's kernel then really runs on such a CPU is checked under emulation (scripts/aarch64_check.sh,
QEMU_CPU=max, scripts/aarch64_fp16_probe.py and the whole suite's call counters)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_pools
from helpers import graph_model

KEY = "optimization.disable_specified_optimizers"


def disabled(so):
    try:
        return so.get_session_config_entry(KEY).split(",")
    except RuntimeError:
        return []


def model(with_conv):
    nodes = [helper.make_node("GlobalAveragePool", ["H" if with_conv else "X"], ["Y"])]
    inits = []
    if with_conv:
        inits.append(numpy_helper.from_array(np.ones((4, 4, 3, 3), np.float16), "W"))
        nodes.insert(0, helper.make_node("Conv", ["X", "W"], ["H"]))
    return graph_model(nodes, [("X", TensorProto.FLOAT16, [1, 4, 5, 5])], [("Y", TensorProto.FLOAT16, None)], inits)


@pytest.fixture
def fp16_cpu(monkeypatch):
    monkeypatch.setattr(onnx_pools, "_fp16_vector_cpu", lambda: True)


# On a CPU with FP16 arithmetic the library's default types take float16 (ORT runs float16 compute natively there),
# with or without a model: the transformer is disabled wherever the kernels are forced and GlobalAveragePool taken.
NO_FLOAT16 = [t for t in onnx_pools.TYPES if t != "float16"]


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, True),  # no model: the library everywhere
        ({"types": "all"}, True),
        ({"types": NO_FLOAT16}, False),  # no float16 node on the library: nothing to disable the transformer for
        ({"model": "lone"}, True),  # nothing else for the transformer: the transposes could only cost
        ({"model": "conv"}, False),  # ORT's NHWC float16 chain stays
        ({"model": "conv", "ort_layout": False}, True),  # forced
        ({"model": "conv", "ort_layout": False, "types": NO_FLOAT16}, False),
        ({"model": "conv", "ops": "all"}, True),
        ({"ops": ["GlobalAveragePool"]}, True),
        ({"ops": ["GlobalAveragePool"], "types": ["float", "float16"]}, True),
        ({"ops": ["LpPool", "GlobalMaxPool"], "types": "all"}, False),  # GlobalAveragePool left to ORT anyway
    ],
)
def test_which_sessions_disable_the_transformer(fp16_cpu, options, expected):
    options = dict(options)
    if "model" in options:
        options["model"] = model(options["model"] == "conv")
    assert ("NhwcTransformer" in disabled(onnx_pools.session_options(**options))) == expected


def test_keeps_optimizers_already_disabled(fp16_cpu):
    so = ort.SessionOptions()
    so.add_session_config_entry(KEY, "ConstantFolding")
    onnx_pools.session_options(so, types="all")
    assert disabled(so) == ["ConstantFolding", "NhwcTransformer"]


def test_nothing_disabled_without_fp16_arithmetic(monkeypatch):
    monkeypatch.setattr(onnx_pools, "_fp16_vector_cpu", lambda: False)
    assert disabled(onnx_pools.session_options(types="all")) == []
    assert disabled(onnx_pools.session_options(model=model(False), ort_layout=False)) == []
