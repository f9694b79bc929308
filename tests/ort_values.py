"""numpy arrays to and from onnxruntime OrtValues, bfloat16 included: the package's own conversion
(onnx_pools.ortvalues), so that bfloat16 data is converted in one place. A bfloat16 input (an ml_dtypes.bfloat16
array) is handed over as its uint16 bit pattern with the ONNX element type given; a bfloat16 output is read from
the OrtValue's memory.
"""

from onnx_pools.ortvalues import from_ortvalue, to_ortvalue

__all__ = ["from_ortvalue", "to_ortvalue"]
