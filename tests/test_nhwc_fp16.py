"""The loader's answer to onnxruntime's NhwcTransformer on aarch64 CPUs with FP16 arithmetic: which sessions get
optimization.disable_specified_optimizers=NhwcTransformer. The CPU check is replaced here, so this runs anywhere;
whether the library's kernel then really runs on such a CPU is checked under emulation (scripts/aarch64_check.sh,
QEMU_CPU=max, scripts/aarch64_fp16_probe.py and the whole suite's call counters)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_pools
from helpers import ORT_SCHEMA_ONLY_AT_BLOCKED_START, graph_model

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


# The library's default types leave float16 out (ORT then runs float16 pools in float through casts), except with
# onnxruntime before 1.32: nothing to disable the transformer for when the library takes no float16 node.
DEFAULT_TAKES_FLOAT16 = not ORT_SCHEMA_ONLY_AT_BLOCKED_START


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, DEFAULT_TAKES_FLOAT16),  # no model: the library everywhere, float16 by default only before ORT 1.32
        ({"types": "all"}, True),
        ({"model": "lone"}, True),  # nothing else for the transformer: the transposes could only cost
        ({"model": "conv"}, False),  # ORT's NHWC float16 chain stays
        ({"model": "conv", "ort_layout": False}, False),  # a Conv-fed float16 pool runs in float between casts
        ({"model": "conv", "ort_layout": False, "types": "all"}, True),  # forced, float16 taken
        ({"model": "conv", "ops": "all"}, False),
        ({"model": "conv", "ops": "all", "types": "all"}, True),
        ({"ops": ["GlobalAveragePool"]}, DEFAULT_TAKES_FLOAT16),
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
