"""The library as an ONNX Runtime plugin execution provider (onnxruntime >= 1.24).

    import onnxruntime as ort, onnx_pools
    sess = ort.InferenceSession("model.onnx", onnx_pools.ep_session_options())

The same shared library (get_library_path()) serves both routes: registered as a custom-op library
(session_options()) or, here, as an execution provider library whose EP takes the pooling nodes through ORT's
kernel registry, and fuses QDQ DequantizeLinear -> AveragePool -> QuantizeLinear units into one node.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["EP_MIN_ORT_VERSION", "ep_route_available", "ep_session_options", "get_ep_name", "register_ep_library"]

# The first onnxruntime with EP kernel registries (OrtEpApi::CreateKernelRegistry).
EP_MIN_ORT_VERSION = (1, 24)

_lock = threading.Lock()
_registered = False


def _library() -> ctypes.CDLL:
    from . import _library as load

    lib = load()
    lib.onnx_pools_ep_name.restype = ctypes.c_char_p
    lib.onnx_pools_ep_name.argtypes = []
    return lib


def get_ep_name() -> str:
    """The execution provider's name, as onnxruntime.get_ep_devices() lists it."""
    return _library().onnx_pools_ep_name().decode()


def ep_route_available() -> bool:
    """Whether this onnxruntime has the plugin-EP API the library's execution provider needs (EP_MIN_ORT_VERSION)."""
    from . import _onnxruntime_version

    return _onnxruntime_version() >= EP_MIN_ORT_VERSION


def register_ep_library() -> None:
    """Registers the library with onnxruntime as an execution provider library, once per process."""
    global _registered
    import onnxruntime

    from . import get_library_path

    if not ep_route_available():
        raise RuntimeError(
            f"onnx-pools: the execution provider needs onnxruntime >= 1.24 (this is {onnxruntime.__version__}); "
            "use onnx_pools.session_options() (the custom-op route) instead"
        )
    with _lock:
        if _registered:
            return
        name = get_ep_name()
        if not any(device.ep_name == name for device in onnxruntime.get_ep_devices()):
            onnxruntime.register_execution_provider_library(name, get_library_path())
        _registered = True


def _ep_device() -> Any:
    import onnxruntime

    name = get_ep_name()
    devices = [device for device in onnxruntime.get_ep_devices() if device.ep_name == name]
    if not devices:
        raise RuntimeError(f"onnx-pools: onnxruntime lists no device of the execution provider {name}")
    return devices[0]


def ep_session_options(
    so: Any | None = None,
    *,
    ops: str | Iterable[str] | None = None,
    ort_layout: bool = True,
    float16: str = "auto",
    qdq: bool = True,
) -> Any:
    """SessionOptions (`so`, or a new one) running the library's execution provider ahead of ORT's CPU provider.

    ops: "all" (default None: all five ops), or names of the ops the EP takes; the others keep ORT's kernels.
    ort_layout: on x86-64 at graph optimization level ALL, a float32 GlobalAveragePool / GlobalMaxPool fed by a Conv
    is left to ORT, whose NCHWc layout rewrite pools it in its blocked layout (cheaper than converting the Conv's
    output back to NCHW for the library's kernel); int8 QDQ average-pool units and quantized pools of at most 4
    window elements are left to ORT too; and a QLinearAveragePool beside QLinearConvs (which ORT runs in NHWC) is
    taken in ORT's NHWC form. False, or a lower optimization level set on `so` before this call: every node is
    taken, in its own layout.
    float16: "auto" leaves a float16 pool fed by a compute node (not a Cast) to ORT, which runs float16 neighbours
    in float through casts anyway; "all" takes every float16 node.
    qdq: fuse DequantizeLinear -> AveragePool -> QuantizeLinear units (int8/uint8, scalar scales and zero points)
    into one node on the library's QLinearAveragePool kernel.
    The EP makes these choices itself (GetCapability), so other languages get them by passing the same provider
    options (ort_layout, float16, qdq, ops) to their AppendExecutionProvider_V2 call.
    """
    import onnxruntime

    register_ep_library()
    if so is None:
        so = onnxruntime.SessionOptions()
    if float16 not in ("auto", "all"):
        raise ValueError(f"onnx-pools: float16 must be 'auto' or 'all', got {float16!r}")
    all_levels = so.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options = {
        "ort_layout": "1" if ort_layout and all_levels else "0",
        "float16": float16,
        "qdq": "1" if qdq else "0",
    }
    if ops is not None:
        options["ops"] = ops if isinstance(ops, str) else ",".join(ops)
    so.add_provider_for_devices([_ep_device()], options)
    return so
