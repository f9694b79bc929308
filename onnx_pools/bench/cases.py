"""The benchmark's cases: one-node ONNX models of the library's ops, their inputs, and the nearest PyTorch call."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from onnx_pools.bench.engines import torch_module
from onnx_pools.ortvalues import bfloat16

__all__ = [
    "Case",
    "QLINEAR_CONFIGS",
    "TORCH_CALLS",
    "TorchCall",
    "build_model",
    "make_cases",
    "make_input",
    "onnx_type",
    "qlinear_params",
    "small_shape",
    "torch_call_name",
    "with_torch_call",
]

OPSET = 18
IR_VERSION = 9

# A PyTorch counterpart of a case: (case, input array) -> a function running the call (torch imported).
TorchCall = Callable[["Case", np.ndarray], Callable[[], Any]]


@dataclass
class Case:
    label: str
    op: str
    dtype: str  # float32 | float16 | float64 | uint8 | int8
    shape: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    nonneg: bool = False  # feed |x| (torch's lp_pool2d sums x^p with its sign)
    torch_call: TorchCall | None = None
    torch_desc: str = ""
    relu: bool = False  # feed max(x, 0), a ReLU's output: half zeros, and windows of zeros only

    def name(self, shape: tuple[int, ...] | None = None) -> str:
        return f"{self.label} {'x'.join(map(str, shape or self.shape))}"


def _torch_plain(make: Callable[[Any, Any], Any]) -> TorchCall:
    """A TorchCall running make(torch, tensor) under inference_mode on the case's input."""

    def call(case: Case, x: np.ndarray) -> Callable[[], Any]:
        torch = torch_module()
        # bfloat16 (ml_dtypes) has no numpy conversion in torch: its bits, viewed as torch's bfloat16
        xt = (
            torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
            if x.dtype.name == "bfloat16"
            else torch.from_numpy(x)
        )

        def run() -> Any:
            with torch.inference_mode():
                return make(torch, xt)

        return run

    return call


def _lp_pool_padded(p: int, k: int, s: int, pad: int) -> TorchCall:
    # F.lp_pool2d has no padding argument; this is its own formula with avg_pool2d's zero padding.
    return _torch_plain(
        lambda torch, x: (
            torch.nn.functional.avg_pool2d(x.pow(p), k, s, padding=pad, count_include_pad=True).mul(k * k).pow(1.0 / p)
        )
    )


def _torch_quantized_avg_pool(k: int, s: int, pad: int) -> TorchCall:
    """PyTorch's quantized average pool on a channels_last quantized tensor (the input quantized once, outside the
    timing), with the case's scales."""

    def call(case: Case, x: np.ndarray) -> Callable[[], Any]:
        torch = torch_module()
        xs, xz, _, _ = qlinear_params(case)
        nchw = torch.from_numpy(np.moveaxis(x, -1, 1) if case.attrs.get("channels_last") else x)
        qtype = torch.quint8 if case.dtype == "uint8" else torch.qint8
        deq = (nchw.to(torch.float32) - xz) * xs
        qx = torch.quantize_per_tensor(deq, xs, xz, qtype).contiguous(memory_format=torch.channels_last)
        cip = bool(case.attrs.get("count_include_pad"))
        return lambda: torch.ao.nn.quantized.functional.avg_pool2d(qx, k, s, pad, count_include_pad=cip)

    return call


GAP = (_torch_plain(lambda torch, x: torch.nn.functional.adaptive_avg_pool2d(x, 1)), "adaptive_avg_pool2d")
GMP = (_torch_plain(lambda torch, x: torch.amax(x, dim=(2, 3), keepdim=True)), "amax(dim=(2,3))")
GLP2 = (
    _torch_plain(lambda torch, x: torch.linalg.vector_norm(x, 2, dim=(2, 3), keepdim=True)),
    "linalg.vector_norm(dim=(2,3))",
)
GLP1 = (
    _torch_plain(lambda torch, x: torch.linalg.vector_norm(x, 1, dim=(2, 3), keepdim=True)),
    "linalg.vector_norm(ord 1, dim=(2,3))",
)
LP3X3 = (_lp_pool_padded(2, 3, 1, 1), "avg_pool2d(x^2, pad 1)*9, sqrt (lp_pool2d's formula; it has no padding)")
LP2X2 = (_torch_plain(lambda torch, x: torch.nn.functional.lp_pool2d(x, 3, 2, 2)), "lp_pool2d (input >= 0)")
QAVG3X3 = (
    _torch_quantized_avg_pool(3, 1, 1),
    "ao.nn.quantized.functional.avg_pool2d, channels_last quint8/qint8 (x86 engine)",
)
# The TorchCalls by name: a worker process rebuilds a case's PyTorch call from its name (a TorchCall is a closure,
# which pickle cannot send)
TORCH_CALLS = {
    "GAP": GAP,
    "GMP": GMP,
    "GLP2": GLP2,
    "GLP1": GLP1,
    "LP3X3": LP3X3,
    "LP2X2": LP2X2,
    "QAVG3X3": QAVG3X3,
}


def torch_call_name(case: Case) -> str | None:
    """The name in TORCH_CALLS of the case's PyTorch call (None: it has none)."""
    return next((name for name, (call, _) in TORCH_CALLS.items() if call is case.torch_call), None)


def with_torch_call(case: Case, name: str | None) -> Case:
    """The case with the PyTorch call TORCH_CALLS[name] (None: without one)."""
    return replace(case, torch_call=TORCH_CALLS[name][0] if name else None)


LP3X3_ATTRS = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "p": 2}
LP2X2_ATTRS = {"kernel_shape": [2, 2], "strides": [2, 2], "p": 3}
Q3X3_ATTRS = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}
# QLinearAveragePool's configurations (with count_include_pad 0 and 1; qlinear_params): "distinct" scales 0.02 /
# 0.015, whose ratio 4/3 gives every window a short integer rule; "equal" ones; "arbitrary" 0.0371 / 0.0297 with
# zero points off the middle, as a calibration picks them, whose float pass marks windows near a tie.
QLINEAR_CONFIGS = tuple(f"{scales} cip{cip}" for scales in ("distinct", "equal", "arbitrary") for cip in (0, 1))


def _case(
    label: str,
    op: str,
    dtype: str,
    shape: tuple[int, ...],
    attrs: dict[str, Any] | None = None,
    torch_call: tuple[TorchCall | None, str] = (None, ""),
    nonneg: bool = False,
    relu: bool = False,
) -> Case:
    return Case(label, op, dtype, shape, attrs or {}, nonneg, torch_call[0], torch_call[1], relu)


def make_cases() -> list[Case]:
    """The default table's cases, headline cases first."""
    return [
        _case("GlobalAveragePool f32", "GlobalAveragePool", "float32", (32, 64, 112, 112), torch_call=GAP),
        _case("GlobalAveragePool f32", "GlobalAveragePool", "float32", (1, 2048, 7, 7), torch_call=GAP),
        _case("GlobalMaxPool f32", "GlobalMaxPool", "float32", (8, 256, 56, 56), torch_call=GMP),
        _case("GlobalLpPool p=2 f32", "GlobalLpPool", "float32", (8, 256, 56, 56), {"p": 2}, GLP2),
        _case("LpPool 3x3 s1 pad1 p=2 f32", "LpPool", "float32", (8, 64, 56, 56), LP3X3_ATTRS, LP3X3),
        _case(
            "LpPool 2x2 s2 p=3 f32",
            "LpPool",
            "float32",
            (8, 64, 112, 112),
            LP2X2_ATTRS,
            LP2X2,
            nonneg=True,
        ),
        # LpPool after a ReLU, as CNNs feed it: windows of zeros only must cost no more than others
        _case(
            "LpPool over ReLU 3x3 s1 pad1 p=2 f32", "LpPool", "float32", (8, 64, 56, 56), LP3X3_ATTRS, LP3X3, relu=True
        ),
        _case(
            "LpPool over ReLU 2x2 s2 p=3 f32",
            "LpPool",
            "float32",
            (8, 64, 112, 112),
            LP2X2_ATTRS,
            LP2X2,
            relu=True,
        ),
        *[
            _case(
                f"QLinearAveragePool 3x3 pad1 {short} {layout} {config}",
                "QLinearAveragePool",
                dtype,
                (8, 56, 56, 64) if layout == "NHWC" else (8, 64, 56, 56),
                {
                    **Q3X3_ATTRS,
                    "channels_last": int(layout == "NHWC"),
                    "count_include_pad": int(config.endswith("cip1")),
                },
                QAVG3X3,
            )
            for short, dtype in (("u8", "uint8"), ("s8", "int8"))
            for layout in ("NCHW", "NHWC")
            for config in QLINEAR_CONFIGS
        ],
        _case("GlobalAveragePool f64", "GlobalAveragePool", "float64", (4, 256, 56, 56), torch_call=GAP),
        _case("GlobalMaxPool f32", "GlobalMaxPool", "float32", (1, 2048, 7, 7), torch_call=GMP),
        # ResNet heads in the other float types (stock ORT has no double or bfloat16 kernel for these)
        *[
            _case(f"{label} {short}", op, dtype, (1, 2048, 7, 7), torch_call=call)
            for label, op, call in (
                ("GlobalAveragePool", "GlobalAveragePool", GAP),
                ("GlobalMaxPool", "GlobalMaxPool", GMP),
            )
            for short, dtype in (("f16", "float16"), ("f64", "float64"), ("bf16", "bfloat16"))
        ],
        _case("GlobalMaxPool f16", "GlobalMaxPool", "float16", (4, 256, 56, 56), torch_call=GMP),
        _case("GlobalMaxPool f64", "GlobalMaxPool", "float64", (4, 256, 56, 56), torch_call=GMP),
        _case("GlobalLpPool p=2 f16", "GlobalLpPool", "float16", (4, 256, 56, 56), {"p": 2}, GLP2),
        _case("GlobalLpPool p=2 f64", "GlobalLpPool", "float64", (4, 256, 56, 56), {"p": 2}, GLP2),
        _case(
            "GlobalAveragePool f16",
            "GlobalAveragePool",
            "float16",
            (32, 64, 112, 112),
            torch_call=(GAP[0], "adaptive_avg_pool2d (half)"),
        ),
        # Tiny tensors: what is left is the per-run cost of a node, where a custom op must not lose either.
        _case("tiny GlobalAveragePool f32", "GlobalAveragePool", "float32", (1, 8, 4, 4), torch_call=GAP),
        _case("tiny GlobalMaxPool f32", "GlobalMaxPool", "float32", (1, 1, 1, 1), torch_call=GMP),
        _case("tiny GlobalLpPool p=2 f32", "GlobalLpPool", "float32", (1, 8, 4, 4), {"p": 2}, GLP2),
        _case("tiny LpPool 3x3 pad1 p=2 f32", "LpPool", "float32", (1, 4, 8, 8), LP3X3_ATTRS, LP3X3),
        _case(
            "tiny QLinearAveragePool 3x3 pad1 u8 NCHW",
            "QLinearAveragePool",
            "uint8",
            (1, 4, 8, 8),
            {**Q3X3_ATTRS, "channels_last": 0},
        ),
        _case(
            "tiny QLinearAveragePool 3x3 pad1 u8 NHWC",
            "QLinearAveragePool",
            "uint8",
            (1, 8, 8, 4),
            {**Q3X3_ATTRS, "channels_last": 1},
        ),
    ]


def onnx_type(dtype: str) -> int:
    """The ONNX element type (TensorProto) of a numpy type name."""
    from onnx import TensorProto

    return int(
        {
            "float32": TensorProto.FLOAT,
            "float16": TensorProto.FLOAT16,
            "float64": TensorProto.DOUBLE,
            "bfloat16": TensorProto.BFLOAT16,
            "uint8": TensorProto.UINT8,
            "int8": TensorProto.INT8,
        }[dtype]
    )


def qlinear_params(case: Case) -> tuple[float, int, float, int]:
    """(x_scale, x_zero_point, y_scale, y_zero_point) of a QLinearAveragePool case: distinct by default, equal
    scales and zero points (what a TFLite-style quantized average pool has) for the "equal" cases, scales and zero
    points as a calibration picks them for the "arbitrary" ones (see QLINEAR_CONFIGS)."""
    mid = 128 if case.dtype == "uint8" else 0
    if "equal" in case.label:
        return 0.02, mid, 0.02, mid
    if "arbitrary" in case.label:
        return 0.0371, mid - 3, 0.0297, mid + 5
    return 0.02, mid, 0.015, mid - 8


def build_model(case: Case, shape: tuple[int, ...]) -> bytes:
    """The case's one-node model (input X, output Y) over an input of `shape`, serialized."""
    from onnx import helper, numpy_helper

    element_type = onnx_type(case.dtype)
    inits = []
    opsets = [helper.make_opsetid("", OPSET)]
    if case.op == "QLinearAveragePool":
        # both zero points given: stock ORT fails type inference without them
        inputs = ["X", "x_scale", "x_zero_point", "y_scale", "y_zero_point"]
        xs, xz, ys, yz = qlinear_params(case)
        zp = np.uint8 if case.dtype == "uint8" else np.int8
        inits = [
            numpy_helper.from_array(np.array(xs, np.float32), "x_scale"),
            numpy_helper.from_array(np.array(xz, zp), "x_zero_point"),
            numpy_helper.from_array(np.array(ys, np.float32), "y_scale"),
            numpy_helper.from_array(np.array(yz, zp), "y_zero_point"),
        ]
        node = helper.make_node(case.op, inputs, ["Y"], domain="com.microsoft", **case.attrs)
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    else:
        node = helper.make_node(case.op, ["X"], ["Y"], **case.attrs)
    graph = helper.make_graph(
        [node],
        "bench",
        [helper.make_tensor_value_info("X", element_type, list(shape))],
        [helper.make_tensor_value_info("Y", element_type, None)],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = IR_VERSION
    return bytes(m.SerializeToString())


def make_input(case: Case, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random input of the case: the whole integer range, or standard normal floats (|x| for `nonneg`, max(x, 0)
    for `relu`)."""
    if case.dtype in ("uint8", "int8"):
        info = np.iinfo(case.dtype)
        return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(case.dtype)
    x = rng.standard_normal(size=shape, dtype=np.float32)
    if case.nonneg:
        np.abs(x, out=x)
    if case.relu:
        np.maximum(x, 0, out=x)
    return x.astype(bfloat16() if case.dtype == "bfloat16" else case.dtype, copy=False)


def small_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The --small version of a shape: batch 1, every other dimension at most 8."""
    return tuple(1 if i == 0 else min(d, 8) for i, d in enumerate(shape))
