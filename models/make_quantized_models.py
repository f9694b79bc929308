"""Build small real quantized models that contain com.microsoft.QLinearAveragePool.

    python models/make_quantized_models.py

Float model (opset 13), input X 1x8x16x16:
    Conv 3x3 pad 1 -> Relu -> AveragePool 3x3 pad 1 (count_include_pad 0) -> Add(relu) ->
    Conv 1x1 -> AveragePool 2x2 stride 2 pad 1 ceil_mode 1 count_include_pad 1 -> Y 1x8x9x9
It is quantized with onnxruntime.quantization.quantize_static in the QOperator format
(QLinearConv, com.microsoft QLinearAdd and QLinearAveragePool) with a small deterministic
calibration reader, once with uint8 activations (QUInt8) and once with int8 (QInt8),
weights QInt8 in both.  Writes, next to this script:
    avgpool_float.onnx, avgpool_qop_uint8.onnx, avgpool_qop_int8.onnx, PROVENANCE_quantized.md
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

HERE = os.path.dirname(os.path.abspath(__file__))
INPUT_SHAPE = (1, 8, 16, 16)
IR_VERSION = 8
SEED = 1234
FLOAT_NAME = "avgpool_float.onnx"
QUANT_NAMES = {"uint8": "avgpool_qop_uint8.onnx", "int8": "avgpool_qop_int8.onnx"}


def build_float_model() -> onnx.ModelProto:
    rng = np.random.default_rng(SEED)
    w1 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    b1 = (rng.standard_normal(8) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 1, 1)) * 0.4).astype(np.float32)
    b2 = (rng.standard_normal(8) * 0.1).astype(np.float32)
    inits = [
        numpy_helper.from_array(w1, "conv1_w"),
        numpy_helper.from_array(b1, "conv1_b"),
        numpy_helper.from_array(w2, "conv2_w"),
        numpy_helper.from_array(b2, "conv2_b"),
    ]
    nodes = [
        helper.make_node(
            "Conv", ["X", "conv1_w", "conv1_b"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "AveragePool", ["r1"], ["p1"], name="pool1", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0
        ),
        helper.make_node("Add", ["p1", "r1"], ["a1"], name="add1"),
        helper.make_node("Conv", ["a1", "conv2_w", "conv2_b"], ["c2"], name="conv2", kernel_shape=[1, 1]),
        helper.make_node(
            "AveragePool",
            ["c2"],
            ["Y"],
            name="pool2",
            kernel_shape=[2, 2],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            ceil_mode=1,
            count_include_pad=1,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "avgpool_float",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 8, 9, 9])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    model.producer_name = "onnx-pools make_quantized_models.py"
    onnx.checker.check_model(model, full_check=True)
    return model


def calibration_inputs(n=8, seed=SEED + 1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(INPUT_SHAPE).astype(np.float32) for _ in range(n)]


class Reader(CalibrationDataReader):
    def __init__(self):
        self._it = iter([{"X": x} for x in calibration_inputs()])

    def get_next(self):
        return next(self._it, None)


def qlinear_avgpool_nodes(model):
    return [n for n in model.graph.node if n.op_type == "QLinearAveragePool" and n.domain == "com.microsoft"]


def quantize(float_path, out_path, activation_type):
    with tempfile.TemporaryDirectory() as tmp:
        tmp_out = os.path.join(tmp, "q.onnx")
        quantize_static(
            float_path,
            tmp_out,
            Reader(),
            quant_format=QuantFormat.QOperator,
            activation_type=activation_type,
            weight_type=QuantType.QInt8,
            per_channel=False,
        )
        q = onnx.load(tmp_out)
    if q.ir_version > 10:
        q.ir_version = 10
    q.producer_name = "onnx-pools make_quantized_models.py (onnxruntime.quantization.quantize_static)"
    domains = {o.domain: o.version for o in q.opset_import}
    assert "com.microsoft" in domains and domains.get("", domains.get("ai.onnx")) is not None, domains
    nodes = qlinear_avgpool_nodes(q)
    assert len(nodes) == 2, (
        f"expected 2 com.microsoft QLinearAveragePool nodes, got {[n.op_type for n in q.graph.node]}"
    )
    for n in nodes:
        assert len(n.input) == 5 and all(n.input), list(n.input)
    onnx.checker.check_model(q)
    onnx.save(q, out_path)
    return q


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    float_model = build_float_model()
    float_path = os.path.join(HERE, FLOAT_NAME)
    onnx.save(float_model, float_path)
    summaries = {}
    for tag, at in (("uint8", QuantType.QUInt8), ("int8", QuantType.QInt8)):
        path = os.path.join(HERE, QUANT_NAMES[tag])
        q = quantize(float_path, path, at)
        ops = sorted({(n.domain or "ai.onnx") + "." + n.op_type for n in q.graph.node})
        inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
        zps = []
        for n in qlinear_avgpool_nodes(q):
            zps.append((n.name, int(inits[n.input[2]]), int(inits[n.input[4]])))
        summaries[tag] = (ops, zps)
        print(f"wrote {path}: ops {ops}; QLinearAveragePool (name, x_zero_point, y_zero_point) {zps}")
    print(f"wrote {float_path}")

    lines = [
        "# Provenance of the quantized QLinearAveragePool models",
        "",
        "Generated by `python models/make_quantized_models.py` (deterministic: seeded weights and calibration data).",
        "",
        "| tool | version |",
        "|---|---|",
        f"| python | {platform.python_version()} |",
        f"| onnx | {onnx.__version__} |",
        "| onnxruntime (quantize_static, QOperator format, MinMax calibration, 8 samples) | "
        f"{onnxruntime.__version__} |",
        f"| numpy | {np.__version__} |",
        "",
        "Float model: X 1x8x16x16 -> Conv 3x3 pad 1 -> Relu -> AveragePool 3x3 pad 1 -> Add(relu) -> Conv 1x1 ->",
        "AveragePool 2x2 stride 2 pad 1 ceil_mode 1 count_include_pad 1 -> Y 1x8x9x9 (opset 13, ir_version 8).",
        "",
        "| file | activations | sha256 | ops | QLinearAveragePool zero points (x, y) |",
        "|---|---|---|---|---|",
        f"| {FLOAT_NAME} | float32 | `{sha256(float_path)}` | | |",
    ]
    for tag in ("uint8", "int8"):
        ops, zps = summaries[tag]
        z = "; ".join(f"{name}: ({a}, {b})" for name, a, b in zps)
        digest = sha256(os.path.join(HERE, QUANT_NAMES[tag]))
        lines.append(f"| {QUANT_NAMES[tag]} | {tag} | `{digest}` | {', '.join(ops)} | {z} |")
    with open(os.path.join(HERE, "PROVENANCE_quantized.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
