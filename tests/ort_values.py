"""numpy arrays to and from onnxruntime OrtValues, bfloat16 included.

onnxruntime's Python API has no numpy type for bfloat16: a bfloat16 input (an ml_dtypes.bfloat16 array) is handed over
as its uint16 bit pattern with the ONNX element type given explicitly, and a bfloat16 output, which OrtValue.numpy()
cannot return, is read from the OrtValue's memory and viewed as ml_dtypes.bfloat16. The one place the tests (and the
fuzz workers) convert bfloat16 data.
"""

import ctypes

import numpy as np
import onnxruntime as ort
from onnx import TensorProto

from reference import BF16


def to_ortvalue(array):
    """An OrtValue over `array`'s own memory (no copy: a misaligned buffer stays misaligned); `array` must be
    C-contiguous."""
    if array.dtype == BF16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(array)


def from_ortvalue(ortvalue):
    """The OrtValue's data as a numpy array (a copy for bfloat16, as ml_dtypes.bfloat16)."""
    if ortvalue.data_type() != "tensor(bfloat16)":
        return ortvalue.numpy()
    shape = ortvalue.shape()
    nbytes = 2 * int(np.prod(shape))
    raw = ctypes.string_at(ortvalue.data_ptr(), nbytes) if nbytes else b""
    return np.frombuffer(raw, np.uint16).view(BF16).reshape(shape).copy()
