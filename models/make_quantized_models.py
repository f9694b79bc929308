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

and the whole-model benchmark network (bench --whole-models times it at batch 1 and 8):
    inception_qop_uint8.onnx, inception_qop_int8.onnx
an Inception-v3-style float network (opset 13, symbolic batch "N", input Nx3x71x71; see build_inception_float)
with 9 AveragePool 3x3 s1 pad 1 branches, quantized the same way: 9 com.microsoft.QLinearAveragePool nodes on
Nx64x35x35 (3), Nx128x17x17 (4) and Nx192x8x8 (2) inputs.  Its float model is not kept (it holds 4x the weights).

and the QDQ benchmark networks (`--sets qdq` writes only these and PROVENANCE_qdq.md):
    inception_qdq_uint8.onnx, inception_qdq_int8.onnx, resnet_qdq_uint8.onnx, resnet_qdq_int8.onnx
the same Inception-style network and a ResNet-style one (see build_resnet_float: 2 ResNet-D downsampling
shortcuts with AveragePool 2x2 s2, GlobalAveragePool head), quantized by quantize_static in its default QDQ format
(DequantizeLinear -> op -> QuantizeLinear around every op, standard domain only, as most quantizers emit them): ORT
fuses each DequantizeLinear -> AveragePool -> QuantizeLinear into com.microsoft.QLinearAveragePool at load, the
plugin EP claims the unit as one fused node.
"""

from __future__ import annotations

import argparse
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


INCEPTION_INPUT = (1, 3, 71, 71)
INCEPTION_NAMES = {"uint8": "inception_qop_uint8.onnx", "int8": "inception_qop_int8.onnx"}
INCEPTION_POOLS = 9


class _Builder:
    """Nodes and seeded He-initialised weights of a float CNN, written with onnx.helper."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, kind):
        self.count += 1
        return f"{kind}{self.count}"

    def conv_relu(self, x, cin, cout, kernel, stride=1, pads=None, relu=True):
        """Conv (+ Relu unless relu=False); returns its output's name."""
        kh, kw = kernel
        n = self.name("conv")
        w = self.rng.standard_normal((cout, cin, kh, kw)) * np.sqrt(2.0 / (cin * kh * kw))
        b = self.rng.standard_normal(cout) * 0.05
        self.inits += [numpy_helper.from_array(w.astype(np.float32), n + "_w")]
        self.inits += [numpy_helper.from_array(b.astype(np.float32), n + "_b")]
        pads = pads if pads is not None else [kh // 2, kw // 2, kh // 2, kw // 2]
        self.nodes.append(
            helper.make_node(
                "Conv", [x, n + "_w", n + "_b"], [n], name=n, kernel_shape=[kh, kw], strides=[stride] * 2, pads=pads
            )
        )
        if not relu:
            return n
        self.nodes.append(helper.make_node("Relu", [n], [n + "_relu"], name=n + "_relu"))
        return n + "_relu"

    def avg_pool(self, x, count_include_pad):
        n = self.name("avgpool")
        self.nodes.append(
            helper.make_node(
                "AveragePool",
                [x],
                [n],
                name=n,
                kernel_shape=[3, 3],
                strides=[1, 1],
                pads=[1, 1, 1, 1],
                count_include_pad=count_include_pad,
            )
        )
        return n

    def max_pool(self, x):
        n = self.name("maxpool")
        self.nodes.append(helper.make_node("MaxPool", [x], [n], name=n, kernel_shape=[3, 3], strides=[2, 2]))
        return n

    def concat(self, xs):
        n = self.name("concat")
        self.nodes.append(helper.make_node("Concat", xs, [n], name=n, axis=1))
        return n

    def classifier_model(self, x, channels, name, input_shape, pools):
        """The network's head (GlobalAveragePool, Flatten, Gemm to 10 classes) on `x`, and the checked float model
        (opset 13, symbolic batch N) holding `pools` AveragePool nodes."""
        wf = (self.rng.standard_normal((10, channels)) * np.sqrt(1.0 / channels)).astype(np.float32)
        self.inits += [numpy_helper.from_array(wf, "fc_w"), numpy_helper.from_array(np.zeros(10, np.float32), "fc_b")]
        self.nodes += [
            helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
            helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
            helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["Y"], name="fc", transB=1),
        ]
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", *input_shape[1:]])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 10])],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
        model.producer_name = "onnx-pools make_quantized_models.py"
        onnx.checker.check_model(model, full_check=True)
        assert sum(n.op_type == "AveragePool" for n in model.graph.node) == pools
        return model


def build_inception_float() -> onnx.ModelProto:
    """Inception-v3 in miniature (channel counts cut down, the structure and the pooled sizes kept):
    stem Conv 3x3 s2 (3->64) at 35x35; 3 blocks A (1x1 | 1x1->3x3 | 1x1->3x3->3x3 | avgpool->1x1, 64 channels;
    the pool excludes padding, count_include_pad 0, as TensorFlow's SAME average pool); reduction (Conv 3x3 s2 |
    MaxPool 3x3 s2) to 128x17x17; 4 blocks B (1x1 | 1x1->1x7->7x1 | 1x1->7x1->1x7 | avgpool->1x1; count_include_pad
    1, as torchvision's F.avg_pool2d); reduction to 192x8x8; 2 blocks C (1x1 | 1x1->3x3 | avgpool->1x1,
    count_include_pad 0); GlobalAveragePool, Flatten, Gemm (10 classes)."""
    b = _Builder(SEED + 7)
    x = b.conv_relu("X", 3, 64, (3, 3), stride=2, pads=[0, 0, 0, 0])  # 71 -> 35
    c = 64
    for _ in range(3):
        b1 = b.conv_relu(x, c, 16, (1, 1))
        b2 = b.conv_relu(b.conv_relu(x, c, 16, (1, 1)), 16, 24, (3, 3))
        b3 = b.conv_relu(b.conv_relu(b.conv_relu(x, c, 16, (1, 1)), 16, 16, (3, 3)), 16, 16, (3, 3))
        bp = b.conv_relu(b.avg_pool(x, 0), c, 8, (1, 1))
        x = b.concat([b1, b2, b3, bp])  # 16 + 24 + 16 + 8 = 64
    x = b.concat([b.conv_relu(x, 64, 64, (3, 3), stride=2, pads=[0, 0, 0, 0]), b.max_pool(x)])  # 128 x 17 x 17
    c = 128
    for _ in range(4):
        b1 = b.conv_relu(x, c, 32, (1, 1))
        b2 = b.conv_relu(b.conv_relu(b.conv_relu(x, c, 24, (1, 1)), 24, 24, (1, 7)), 24, 32, (7, 1))
        b3 = b.conv_relu(b.conv_relu(b.conv_relu(x, c, 24, (1, 1)), 24, 24, (7, 1)), 24, 32, (1, 7))
        bp = b.conv_relu(b.avg_pool(x, 1), c, 32, (1, 1))
        x = b.concat([b1, b2, b3, bp])  # 128
    x = b.concat([b.conv_relu(x, 128, 64, (3, 3), stride=2, pads=[0, 0, 0, 0]), b.max_pool(x)])  # 192 x 8 x 8
    c = 192
    for _ in range(2):
        b1 = b.conv_relu(x, c, 64, (1, 1))
        b2 = b.conv_relu(b.conv_relu(x, c, 48, (1, 1)), 48, 64, (3, 3))
        bp = b.conv_relu(b.avg_pool(x, 0), c, 64, (1, 1))
        x = b.concat([b1, b2, bp])  # 192
    return b.classifier_model(x, 192, "inception_float", INCEPTION_INPUT, INCEPTION_POOLS)


RESNET_INPUT = (1, 3, 64, 64)
RESNET_POOLS = 2
QDQ_NAMES = {
    "inception": {"uint8": "inception_qdq_uint8.onnx", "int8": "inception_qdq_int8.onnx"},
    "resnet": {"uint8": "resnet_qdq_uint8.onnx", "int8": "resnet_qdq_int8.onnx"},
}


def build_resnet_float() -> onnx.ModelProto:
    """A ResNet-D-style network: stem Conv 3x3 s2 (3->16) at 32x32; stages of 2 basic blocks (Conv 3x3 -> Relu ->
    Conv 3x3, + shortcut, Relu) at 16x32x32, 32x16x16 and 64x8x8; the first block of the second and third stage
    downsamples with a Conv 3x3 s2 and a shortcut AveragePool 2x2 s2 -> Conv 1x1 (ResNet-D's avg-pool shortcut);
    GlobalAveragePool, Flatten, Gemm (10 classes)."""
    b = _Builder(SEED + 11)

    conv = b.conv_relu  # relu=False: a block's second conv and the shortcut's feed the Add

    def add_relu(x, shortcut):
        n = b.name("add")
        b.nodes += [
            helper.make_node("Add", [x, shortcut], [n], name=n),
            helper.make_node("Relu", [n], [n + "_relu"], name=n + "_relu"),
        ]
        return n + "_relu"

    def shortcut_pool(x):
        n = b.name("avgpool")
        b.nodes.append(helper.make_node("AveragePool", [x], [n], name=n, kernel_shape=[2, 2], strides=[2, 2]))
        return n

    x = conv("X", 3, 16, (3, 3), stride=2)  # 64 -> 32
    c = 16
    for stage, width in enumerate((16, 32, 64)):
        for block in range(2):
            down = stage > 0 and block == 0
            y = conv(x, c, width, (3, 3), stride=2 if down else 1)
            y = conv(y, width, width, (3, 3), relu=False)
            shortcut = conv(shortcut_pool(x), c, width, (1, 1), relu=False) if down else x
            x = add_relu(y, shortcut)
            c = width
    return b.classifier_model(x, c, "resnet_float", RESNET_INPUT, RESNET_POOLS)


def calibration_inputs(n=8, seed=SEED + 1, shape=INPUT_SHAPE):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


class Reader(CalibrationDataReader):
    def __init__(self, shape=INPUT_SHAPE):
        self._it = iter([{"X": x} for x in calibration_inputs(shape=shape)])

    def get_next(self):
        return next(self._it, None)


def qlinear_avgpool_nodes(model):
    return [n for n in model.graph.node if n.op_type == "QLinearAveragePool" and n.domain == "com.microsoft"]


def _check_qoperator(q, pools):
    domains = {o.domain: o.version for o in q.opset_import}
    assert "com.microsoft" in domains and domains.get("", domains.get("ai.onnx")) is not None, domains
    nodes = qlinear_avgpool_nodes(q)
    assert len(nodes) == pools, (
        f"expected {pools} com.microsoft QLinearAveragePool nodes, got {[n.op_type for n in q.graph.node]}"
    )
    for n in nodes:
        assert len(n.input) == 5 and all(n.input), list(n.input)


def _check_qdq(q, pools):
    """Every AveragePool between a DequantizeLinear and a QuantizeLinear, the model importing the standard domain
    only."""
    assert {o.domain for o in q.opset_import} <= {"", "ai.onnx"}, [o.domain for o in q.opset_import]
    producer = {o: n for n in q.graph.node for o in n.output}
    readers = {}
    for n in q.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    units = 0
    for n in q.graph.node:
        if n.op_type != "AveragePool":
            continue
        dq, (qn,) = producer[n.input[0]], readers[n.output[0]]
        assert dq.op_type == "DequantizeLinear" and qn.op_type == "QuantizeLinear", (dq.op_type, qn.op_type)
        units += 1
    assert units == pools, f"expected {pools} DequantizeLinear -> AveragePool -> QuantizeLinear units, got {units}"


# quant_format -> (producer name suffix, the check of the quantized model)
FORMATS = {
    QuantFormat.QOperator: ("", _check_qoperator),
    QuantFormat.QDQ: (", QDQ", _check_qdq),
}


def quantize(float_path, out_path, activation_type, shape=INPUT_SHAPE, pools=2, quant_format=QuantFormat.QOperator):
    """quantize_static of the float model (weights int8, per tensor) in `quant_format`: QOperator (QLinearConv,
    com.microsoft QLinearAdd and QLinearAveragePool) or QDQ (DequantizeLinear -> op -> QuantizeLinear around every
    op), checked to hold `pools` quantized average pools, written to out_path."""
    suffix, check = FORMATS[quant_format]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_out = os.path.join(tmp, "q.onnx")
        quantize_static(
            float_path,
            tmp_out,
            Reader(shape),
            quant_format=quant_format,
            activation_type=activation_type,
            weight_type=QuantType.QInt8,
            per_channel=False,
        )
        q = onnx.load(tmp_out)
    if q.ir_version > 10:
        q.ir_version = 10
    q.producer_name = f"onnx-pools make_quantized_models.py (onnxruntime.quantization.quantize_static{suffix})"
    check(q, pools)
    onnx.checker.check_model(q)
    onnx.save(q, out_path)
    return q


def write_qdq_models():
    """The QDQ benchmark networks and PROVENANCE_qdq.md."""
    builders = {
        "inception": (build_inception_float, INCEPTION_INPUT, INCEPTION_POOLS),
        "resnet": (build_resnet_float, RESNET_INPUT, RESNET_POOLS),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for net, (build, shape, pools) in builders.items():
            float_path = os.path.join(tmp, f"{net}_float.onnx")
            onnx.save(build(), float_path)
            for tag, at in (("uint8", QuantType.QUInt8), ("int8", QuantType.QInt8)):
                path = os.path.join(HERE, QDQ_NAMES[net][tag])
                q = quantize(float_path, path, at, shape, pools, QuantFormat.QDQ)
                ops = sorted({(n.domain or "ai.onnx") + "." + n.op_type for n in q.graph.node})
                rows.append(f"| {QDQ_NAMES[net][tag]} | {tag} | `{sha256(path)}` | {pools} | {', '.join(ops)} |")
                print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    lines = [
        "# Provenance of the QDQ benchmark models",
        "",
        "Generated by `python models/make_quantized_models.py --sets qdq` (deterministic: seeded weights and",
        "calibration data).",
        "",
        "| tool | version |",
        "|---|---|",
        f"| python | {platform.python_version()} |",
        f"| onnx | {onnx.__version__} |",
        f"| onnxruntime (quantize_static, QDQ format, MinMax calibration, 8 samples) | {onnxruntime.__version__} |",
        f"| numpy | {np.__version__} |",
        "",
        "Float networks (opset 13, symbolic batch N, not kept): the Inception-style one of PROVENANCE_quantized.md",
        "(X Nx3x71x71, 9 AveragePool 3x3 s1 pad 1) and a ResNet-D-style one (see build_resnet_float: X Nx3x64x64,",
        "basic blocks at 16x32x32, 32x16x16, 64x8x8, 2 AveragePool 2x2 s2 shortcuts on 16x32x32 and 32x16x16,",
        "GlobalAveragePool head). Activations uint8 or int8, weights int8, per tensor; the models import the",
        "standard domain only.",
        "",
        "| file | activations | sha256 | DequantizeLinear -> AveragePool -> QuantizeLinear units | ops |",
        "|---|---|---|---|---|",
        *rows,
    ]
    with open(os.path.join(HERE, "PROVENANCE_qdq.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python models/make_quantized_models.py", description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="qoperator,qdq", help="qoperator and/or qdq (default both)")
    sets = set(ap.parse_args(argv).sets.split(","))
    if "qdq" in sets:
        write_qdq_models()
    if "qoperator" in sets:
        write_qoperator_models()
    return 0


def write_qoperator_models():
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
    inception = {}
    with tempfile.TemporaryDirectory() as tmp:
        inception_float = os.path.join(tmp, "inception_float.onnx")
        onnx.save(build_inception_float(), inception_float)
        for tag, at in (("uint8", QuantType.QUInt8), ("int8", QuantType.QInt8)):
            path = os.path.join(HERE, INCEPTION_NAMES[tag])
            q = quantize(inception_float, path, at, INCEPTION_INPUT, INCEPTION_POOLS)
            inception[tag] = sorted({(n.domain or "ai.onnx") + "." + n.op_type for n in q.graph.node})
            print(f"wrote {path} ({os.path.getsize(path)} bytes)")

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
    lines += [
        "",
        "Whole-model benchmark network (`bench --whole-models`): an Inception-v3-style float network, built with",
        "onnx.helper (seeded He-initialised weights; see build_inception_float for the layers), opset 13, symbolic",
        "batch N, X Nx3x71x71 -> Y Nx10, with 9 AveragePool 3x3 s1 pad 1 branches (3 at 64x35x35 and 2 at 192x8x8",
        "excluding padding, 4 at 128x17x17 including it), quantized as above with calibration inputs 1x3x71x71.",
        "The float network itself is not kept.",
        "",
        "| file | activations | sha256 | ops |",
        "|---|---|---|---|",
    ]
    for tag in ("uint8", "int8"):
        digest = sha256(os.path.join(HERE, INCEPTION_NAMES[tag]))
        lines.append(f"| {INCEPTION_NAMES[tag]} | {tag} | `{digest}` | {', '.join(inception[tag])} |")
    with open(os.path.join(HERE, "PROVENANCE_quantized.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
