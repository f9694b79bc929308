"""Write the small demo/test models of onnx-pools into this folder.

    python models/make_models.py [--out DIR]

Models (all tiny: one 8->16 channel convolution, a ReLU and a pooling op; 16 channels, not 8, so that the
float32 global pools meet ORT's NCHWc layout transformer the way real CNNs do):

  cnn_gap_<t>.onnx        Conv2d -> ReLU -> nn.AdaptiveAvgPool2d(1)  => GlobalAveragePool   (torch export)
  cnn_gmp_<t>.onnx        Conv2d -> ReLU -> nn.AdaptiveMaxPool2d(1)  => GlobalMaxPool       (torch export)
  cnn_lppool2d_<t>.onnx   Conv2d -> ReLU -> nn.LPPool2d(2, 3, stride=2) => LpPool p=2      (torch export)
  cnn_lppool1d_<t>.onnx   Conv1d -> ReLU -> nn.LPPool1d(3, 2, stride=2) => LpPool p=3      (torch export)
  globallppool_opset22_f32.onnx  Conv -> Relu -> GlobalLpPool(p=3), opset 22            (onnx.helper)

with <t> in f32, f16, bf16, f64.  Inputs are 1x8x16x16 (1x8x16 for the 1-D model).

How the torch exports are done (torch.onnx.export, legacy TorchScript exporter, dynamo=False, opset 18, bfloat16: 22;
the dynamo exporter needs onnxscript, which is not installed here):

* AdaptiveAvgPool2d(1) exports to GlobalAveragePool as is.
* AdaptiveMaxPool2d(1) exports to MaxPool(kernel_shape = H x W) when the spatial sizes are static; the exporter emits
  GlobalMaxPool only when they are dynamic.  We register a symbolic for aten::adaptive_max_pool2d (output size 1) that
  emits GlobalMaxPool, i.e. the op the exporter itself picks for dynamic shapes, and keep static shapes.
* nn.LPPool1d/2d are Python compositions (pow, avg_pool, sign, relu, ...) and export as that decomposition.  The
  modules here subclass them and route forward through a torch.autograd.Function whose forward is the stock
  F.lp_pool1d/2d and whose `symbolic` emits ONNX LpPool (p, kernel_shape, strides).  torch computes
  sign(x)*relu(|x|)^p where ONNX uses |x|^p; they agree here because the pooled input comes out of a ReLU.
* float16: the whole module is converted with .half() and exported with a float16 input.
* bfloat16 variants are exported at opset 22, the first opset whose pooling schemas list bfloat16 (all others at
  opset 18), so that every model passes onnx.checker's full check (strict type/shape inference).
* bfloat16 and float64: the module is exported in that dtype, but the convolution runs in float32 inside it
  (input -> float() -> conv -> relu -> to(dtype) -> pool), because ONNX Runtime's CPU provider has no Conv kernel for
  double or bfloat16.  The exported graph is Cast(float) -> Conv -> Relu -> Cast(dtype) -> <pool>; model input and
  output are of the variant's type and the pooling op runs in that type.  No onnx-level type conversion was needed.

The opset-22 GlobalLpPool model is written with onnx.helper (torch has no path to GlobalLpPool).

Whole-model benchmark set (bench --whole-models times these at batch 1 and 8; the batch dimension is symbolic, "N", so
the batch is chosen at run time; small channel counts keep the files small, the pooled tensors are realistic):

  resnet_gap_f32.onnx     ResNet-like: stem Conv7x7 s2 + BN + ReLU + MaxPool, one bottleneck block (1x1, 3x3, 1x1
                          expanding to 256, projection shortcut, BN, Add, ReLU), AdaptiveAvgPool2d(1), Linear;
                          X Nx3x224x224, pool input Nx256x56x56 (6.4M elements at batch 8; ResNet-50's layer1 size)
  vgg_gmp_f32.onnx        VGG-like: Conv3x3 + ReLU, MaxPool, Conv3x3 + ReLU, Conv1x1 to 256 + ReLU,
                          AdaptiveMaxPool2d(1), Linear; X Nx3x112x112, pool input Nx256x56x56
  lpnet_lppool_f32.onnx   Conv3x3 + ReLU, LPPool2d(2, 2, stride 2), Conv3x3 + ReLU, LPPool2d(2, 3, stride 2),
                          Conv1x1 + ReLU, AdaptiveAvgPool2d(1), Linear; X Nx3x64x64, LpPool inputs Nx32x64x64
                          and Nx64x32x32 (smaller than the others: the tests' float64 LpPool reference is slow)

All three: torch modules with torchvision's default initialisation (seeded), eval mode (BatchNorm folded into the
convolutions by the exporter), legacy exporter, opset 18, float32.
Every model is checked with onnx.checker and for the pooling op(s) and element type it is meant to have.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import warnings
from collections import Counter

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
OPSET_BF16 = 22  # first opset whose pooling schemas list bfloat16
SEED = 0

DTYPES = {
    "f32": (torch.float32, TensorProto.FLOAT),
    "f16": (torch.float16, TensorProto.FLOAT16),
    "bf16": (torch.bfloat16, TensorProto.BFLOAT16),
    "f64": (torch.float64, TensorProto.DOUBLE),
}


# ----------------------------------------------------------------------------------------------- export helpers
class _LpPoolFn(torch.autograd.Function):
    """forward: torch's own lp_pool; export: ONNX LpPool."""

    @staticmethod
    def forward(ctx, x, p, kernel, stride):
        if len(kernel) == 1:
            return F.lp_pool1d(x, p, kernel[0], stride[0])
        return F.lp_pool2d(x, p, tuple(kernel), tuple(stride))

    @staticmethod
    def symbolic(g, x, p, kernel, stride):
        return g.op("LpPool", x, p_i=int(p), kernel_shape_i=list(kernel), strides_i=list(stride))


class LPPool2dONNX(torch.nn.LPPool2d):
    def forward(self, x):
        k = self.kernel_size if isinstance(self.kernel_size, tuple) else (self.kernel_size,) * 2
        s = self.stride if isinstance(self.stride, tuple) else (self.stride,) * 2
        return _LpPoolFn.apply(x, self.norm_type, k, s)


class LPPool1dONNX(torch.nn.LPPool1d):
    def forward(self, x):
        return _LpPoolFn.apply(x, self.norm_type, (self.kernel_size,), (self.stride,))


def _adaptive_max_pool2d_global(g, x, output_size):
    # Only output size 1 is used here; the second output (indices) is unused by nn.AdaptiveMaxPool2d(1).
    return g.op("GlobalMaxPool", x), None


class ConvPool(torch.nn.Module):
    """x(dtype) -> [float] -> conv -> relu -> dtype -> pool."""

    def __init__(self, pool, dims=2, conv_dtype=torch.float32, dtype=torch.float32):
        super().__init__()
        conv = torch.nn.Conv2d if dims == 2 else torch.nn.Conv1d
        self.conv = conv(8, 16, 3, padding=1)
        self.pool = pool
        self.conv_dtype = conv_dtype
        self.dtype = dtype

    def forward(self, x):
        if self.conv_dtype != self.dtype:
            x = x.to(self.conv_dtype)
        x = torch.relu(self.conv(x))
        if self.conv_dtype != self.dtype:
            x = x.to(self.dtype)
        return self.pool(x)


FAMILIES = {
    # name: (pool module factory, conv dims, input shape)
    "cnn_gap": (lambda: torch.nn.AdaptiveAvgPool2d(1), 2, (1, 8, 16, 16)),
    "cnn_gmp": (lambda: torch.nn.AdaptiveMaxPool2d(1), 2, (1, 8, 16, 16)),
    "cnn_lppool2d": (lambda: LPPool2dONNX(2, 3, stride=2), 2, (1, 8, 16, 16)),
    "cnn_lppool1d": (lambda: LPPool1dONNX(3, 2, stride=2), 1, (1, 8, 16)),
}
EXPECTED_OP = {
    "cnn_gap": "GlobalAveragePool",
    "cnn_gmp": "GlobalMaxPool",
    "cnn_lppool2d": "LpPool",
    "cnn_lppool1d": "LpPool",
}


def legacy_export(model, x, opset: int, doc: str, dynamic_batch: bool = False) -> onnx.ModelProto:
    """model(x) exported by torch's legacy (TorchScript) exporter, input X and output Y, constants folded."""
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (x,),
            f,
            dynamo=False,
            opset_version=opset,
            input_names=["X"],
            output_names=["Y"],
            dynamic_axes={"X": {0: "N"}, "Y": {0: "N"}} if dynamic_batch else None,
            do_constant_folding=True,
        )
    m = onnx.load_from_string(f.getvalue())
    m.producer_name = "pytorch"
    m.doc_string = doc
    return m


def export_torch(family: str, tname: str) -> onnx.ModelProto:
    factory, dims, shape = FAMILIES[family]
    dtype, _ = DTYPES[tname]
    conv_dtype = dtype if tname in ("f32", "f16") else torch.float32
    torch.manual_seed(SEED)  # same weights in every type variant of a family
    model = ConvPool(factory(), dims=dims, conv_dtype=conv_dtype, dtype=dtype)
    model.conv.to(conv_dtype)
    model.eval()
    x = torch.randn(*shape).to(dtype)
    opset = OPSET_BF16 if tname == "bf16" else OPSET
    return legacy_export(model, x, opset, f"onnx-pools demo model {family}_{tname}: made by models/make_models.py")


def make_globallppool22(p: int = 3) -> onnx.ModelProto:
    rng = np.random.default_rng(SEED)
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    b = (rng.standard_normal(16) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["X", "W", "B"], ["C"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["C"], ["R"], name="relu"),
        helper.make_node("GlobalLpPool", ["R"], ["Y"], p=p, name="globallppool"),
    ]
    graph = helper.make_graph(
        nodes,
        "globallppool_opset22",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 16, 1, 1])],
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 22)],
        ir_version=10,
        producer_name="onnx.helper",
        producer_version=onnx.__version__,
    )
    m.doc_string = "onnx-pools demo model globallppool_opset22_f32: made by models/make_models.py"
    return m


def check(m: onnx.ModelProto, op: str, elem_type: int, name: str) -> None:
    onnx.checker.check_model(m, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {
        vi.name: vi.type.tensor_type.elem_type
        for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)
    }
    pools = [n for n in m.graph.node if n.op_type == op]
    if len(pools) != 1:
        raise SystemExit(f"{name}: expected one {op} node, found ops {[n.op_type for n in m.graph.node]}")
    t = types.get(pools[0].input[0])
    if t != elem_type:
        raise SystemExit(f"{name}: {op} input type {t}, expected {elem_type}")
    for other in ("AveragePool", "MaxPool", "Pow"):
        if any(n.op_type == other for n in m.graph.node):
            raise SystemExit(f"{name}: unexpected {other} node (export decomposed the pooling op)")


# ----------------------------------------------------------------------------------- whole-model benchmark set
class Bottleneck(torch.nn.Module):
    """torchvision's Bottleneck (1x1 -> 3x3 -> 1x1 expand, BN after each, projection shortcut, Add, ReLU)."""

    def __init__(self, cin, width, cout):
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + self.downsample(x))


class ResNetLike(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        self.layer1 = Bottleneck(16, 32, 256)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layer1(self.stem(x))), 1))


class VGGLike(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 256, 1),
            nn.ReLU(),
        )
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class LpNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            LPPool2dONNX(2, 2, stride=2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            LPPool2dONNX(2, 3, stride=2),
            nn.Conv2d(64, 128, 1),
            nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


# name: (module class, input C x H x W, {pooling op: node count}, description)
WHOLE_MODELS = {
    "resnet_gap_f32": (
        ResNetLike,
        (3, 224, 224),
        {"GlobalAveragePool": 1},
        "ResNet-like: Conv7x7 s2 (3->16) + BN + ReLU + MaxPool 3x3 s2, Bottleneck(16, width 32, 256) with projection "
        "shortcut, AdaptiveAvgPool2d(1), Linear(256, 10); X Nx3x224x224, pool input Nx256x56x56",
    ),
    "vgg_gmp_f32": (
        VGGLike,
        (3, 112, 112),
        {"GlobalMaxPool": 1},
        "VGG-like: Conv3x3 (3->32) + ReLU, MaxPool 2, Conv3x3 (32->64) + ReLU, Conv1x1 (64->256) + ReLU, "
        "AdaptiveMaxPool2d(1), Linear(256, 10); X Nx3x112x112, pool input Nx256x56x56",
    ),
    "lpnet_lppool_f32": (
        LpNet,
        (3, 64, 64),
        {"LpPool": 2, "GlobalAveragePool": 1},
        "Conv3x3 (3->32) + ReLU, LPPool2d(2, 2, stride 2), Conv3x3 (32->64) + ReLU, LPPool2d(2, 3, stride 2), "
        "Conv1x1 (64->128) + ReLU, AdaptiveAvgPool2d(1), Linear(128, 10); X Nx3x64x64, LpPool inputs "
        "Nx32x64x64 and Nx64x32x32",
    ),
}


def export_whole(name: str) -> onnx.ModelProto:
    cls, chw, _, _ = WHOLE_MODELS[name]
    torch.manual_seed(SEED)
    model = cls().eval()
    x = torch.randn(1, *chw)
    doc = f"onnx-pools whole-model benchmark {name}: made by models/make_models.py"
    return legacy_export(model, x, OPSET, doc, dynamic_batch=True)


def check_whole(m: onnx.ModelProto, name: str) -> None:
    onnx.checker.check_model(m, full_check=True)
    want = WHOLE_MODELS[name][2]
    got = {op: sum(n.op_type == op for n in m.graph.node) for op in want}
    if got != want:
        raise SystemExit(f"{name}: pooling nodes {got}, expected {want} (ops {[n.op_type for n in m.graph.node]})")
    if any(n.op_type in ("BatchNormalization", "Pow", "AveragePool") for n in m.graph.node):
        raise SystemExit(f"{name}: BatchNormalization not folded or a pooling op decomposed")
    if m.graph.input[0].type.tensor_type.shape.dim[0].dim_param != "N":
        raise SystemExit(f"{name}: batch dimension is not symbolic")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    torch.onnx.register_custom_op_symbolic("aten::adaptive_max_pool2d", _adaptive_max_pool2d_global, OPSET)
    try:
        written = []
        for family in FAMILIES:
            for tname, (_, elem) in DTYPES.items():
                name = f"{family}_{tname}"
                m = export_torch(family, tname)
                check(m, EXPECTED_OP[family], elem, name)
                onnx.save(m, os.path.join(args.out, name + ".onnx"))
                written.append(name)
        for name in WHOLE_MODELS:
            m = export_whole(name)
            check_whole(m, name)
            onnx.save(m, os.path.join(args.out, name + ".onnx"))
            written.append(name)
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::adaptive_max_pool2d", OPSET)
    m = make_globallppool22()
    check(m, "GlobalLpPool", TensorProto.FLOAT, "globallppool_opset22_f32")
    onnx.save(m, os.path.join(args.out, "globallppool_opset22_f32.onnx"))
    written.append("globallppool_opset22_f32")
    for name in written:
        path = os.path.join(args.out, name + ".onnx")
        print(f"{path}  ({os.path.getsize(path)} bytes)")
    write_provenance(args.out, written)
    print(
        f"torch {torch.__version__}, onnx {onnx.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}"
    )
    return 0


DESCRIPTIONS = {
    "cnn_gap": "Conv2d(8,16,3,pad 1) -> ReLU -> nn.AdaptiveAvgPool2d(1); X 1x8x16x16 -> Y 1x16x1x1",
    "cnn_gmp": "Conv2d(8,16,3,pad 1) -> ReLU -> nn.AdaptiveMaxPool2d(1); X 1x8x16x16 -> Y 1x16x1x1",
    "cnn_lppool2d": "Conv2d(8,16,3,pad 1) -> ReLU -> nn.LPPool2d(2, 3, stride=2); X 1x8x16x16 -> Y 1x16x7x7",
    "cnn_lppool1d": "Conv1d(8,16,3,pad 1) -> ReLU -> nn.LPPool1d(3, 2, stride=2); X 1x8x16 -> Y 1x16x8",
}


def write_provenance(out, written):
    rows = []
    for name in written:
        path = os.path.join(out, name + ".onnx")
        sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
        m = onnx.load(path)
        ops = " -> ".join(n.op_type for n in m.graph.node)
        opset = ", ".join(str(o.version) for o in m.opset_import)
        if name.startswith("globallppool"):
            tool = f"onnx.helper (onnx {onnx.__version__})"
            what = "Conv(8,16,3x3,pad 1) -> Relu -> GlobalLpPool(p=3); X 1x8x16x16 float -> Y 1x16x1x1"
        elif name in WHOLE_MODELS:
            tool = f"torch.onnx.export, legacy exporter (dynamo=False), torch {torch.__version__}, eval mode"
            what = WHOLE_MODELS[name][3]
            ops = ", ".join(f"{op} x{c}" for op, c in sorted(Counter(n.op_type for n in m.graph.node).items()))
        else:
            tool = f"torch.onnx.export, legacy exporter (dynamo=False), torch {torch.__version__}"
            what = DESCRIPTIONS[name.rsplit("_", 1)[0]]
        rows.append(f"| {name}.onnx | {tool} | {opset} | {what} | {ops} | `{sha[:16]}` |")
    text = (
        f"""# Provenance of the demo/test models made by make_models.py

All models below were written by one command, from the repository root:

    python models/make_models.py

with python {sys.version.split()[0]}, torch {torch.__version__} (CPU), onnx {onnx.__version__}, numpy {np.__version__}.
The script is deterministic (seeded weights; re-running it reproduces the files byte for byte with these versions).
How each pooling op comes out of the exporter, and why the bfloat16/float64 variants run their convolution in float32,
is explained in the docstring of make_models.py. In short:

* AdaptiveAvgPool2d(1) exports to GlobalAveragePool as is.
* AdaptiveMaxPool2d(1) with static input sizes exports to MaxPool(kernel = H x W); the exporter emits GlobalMaxPool
  only for dynamic spatial sizes. make_models.py registers a symbolic for aten::adaptive_max_pool2d that emits
  GlobalMaxPool.
* LPPool1d/2d export as a decomposition (Pow, AveragePool, Sign, Abs, Relu, Mul); make_models.py routes them through
  an autograd.Function whose symbolic emits LpPool (forward = torch's own lp_pool).
* float16: module.half(), exported with a float16 input. bfloat16 / float64: exported in that dtype with the
  convolution kept in float32 (Cast -> Conv -> Relu -> Cast -> pool), because ONNX Runtime's CPU provider has no
  bfloat16 or double Conv. bfloat16 variants use opset 22 (first opset whose pooling schemas list bfloat16).
  No onnx-level type conversion was used.
* The opset-22 GlobalLpPool model is built with onnx.helper: torch has no export path to GlobalLpPool.
* The whole-model benchmark set (resnet_gap_f32, vgg_gmp_f32, lpnet_lppool_f32; timed by bench --whole-models) are
  torch modules with torchvision's default initialisation (torch.manual_seed(0)), exported in eval mode (BatchNorm
  folded into the convolutions) with a symbolic batch dimension "N" (dynamic_axes); channel counts are small to
  keep the files small, the pooled tensors have realistic sizes (ResNet-50's layer1 output, 256x56x56 per image).
  Their "ONNX ops" column counts nodes instead of listing the chain.

Each model was checked with onnx.checker (full_check) and for its pooling op and that op's element type.

| file | tool | opset | model | ONNX ops | sha256 (first 16) |
|---|---|---|---|---|---|
"""
        + "\n".join(rows)
        + """

The quantized models (avgpool_float.onnx, avgpool_qop_uint8.onnx, avgpool_qop_int8.onnx) are made by
make_quantized_models.py; see PROVENANCE_quantized.md.
"""
    )
    with open(os.path.join(out, "PROVENANCE.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
