"""numpy arrays to and from onnxruntime OrtValues, bfloat16 included (onnxruntime's Python API has no numpy type
for it: ml_dtypes.bfloat16 arrays go over as their uint16 bit patterns). The one place the package, its benchmark
and its tests convert bfloat16 data; ml_dtypes and onnx are imported only when a bfloat16 array needs them."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnxruntime

__all__ = ["bfloat16", "from_ortvalue", "is_bfloat16", "run_session", "to_ortvalue"]


def bfloat16() -> np.dtype[Any]:
    """ml_dtypes' bfloat16 as a numpy dtype (ImportError without ml_dtypes)."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def is_bfloat16(dtype: np.dtype[Any]) -> bool:
    """Whether dtype is ml_dtypes' bfloat16, without importing ml_dtypes for other types."""
    return np.dtype(dtype).name == "bfloat16"


def to_ortvalue(array: np.ndarray) -> onnxruntime.OrtValue:
    """An OrtValue over `array`'s memory (no copy for a C-contiguous array, even a misaligned one); a bfloat16
    array goes over as its uint16 bit pattern with the ONNX element type given."""
    import onnxruntime

    array = np.ascontiguousarray(array)
    if is_bfloat16(array.dtype):
        bfloat16_type = 16  # onnx.TensorProto.BFLOAT16
        return onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), bfloat16_type)
    return onnxruntime.OrtValue.ortvalue_from_numpy(array)


def from_ortvalue(ortvalue: onnxruntime.OrtValue) -> np.ndarray:
    """The OrtValue's data as a numpy array; a bfloat16 one (which OrtValue.numpy() cannot return) is copied from the
    OrtValue's memory as ml_dtypes.bfloat16."""
    if ortvalue.data_type() != "tensor(bfloat16)":
        return np.asarray(ortvalue.numpy())
    shape = ortvalue.shape()
    nbytes = 2 * int(np.prod(shape))
    raw = ctypes.string_at(ortvalue.data_ptr(), nbytes) if nbytes else b""
    return np.frombuffer(raw, np.uint16).view(bfloat16()).reshape(shape).copy()


def run_session(sess: onnxruntime.InferenceSession, feeds: Mapping[str, Any]) -> Sequence[np.ndarray]:
    """sess.run for {name: array}; bfloat16 (ml_dtypes) inputs/outputs go through OrtValues."""
    if not any(is_bfloat16(np.asarray(v).dtype) for v in feeds.values()) and not any(
        o.type == "tensor(bfloat16)" for o in sess.get_outputs()
    ):
        return list(sess.run(None, dict(feeds)))
    outs = sess.run_with_ort_values(None, {k: to_ortvalue(np.asarray(v)) for k, v in feeds.items()})
    return [from_ortvalue(o) for o in outs]
