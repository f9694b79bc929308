"""Does a float16 GlobalAveragePool node run on the library on this CPU? (scripts/aarch64_check.sh runs it on an
emulated aarch64 CPU with FP16 arithmetic, QEMU_CPU=max.)

On aarch64 CPUs with FP16 arithmetic, onnxruntime's NhwcTransformer rewrites float16 GlobalAveragePool nodes to its
own NHWC kernel (com.ms.internal.nhwc), and the library's kernel, registered for the node, no longer runs. With the
session config entry optimization.disable_specified_optimizers=NhwcTransformer it does. Exit status 0 when the
library ran with onnx_pools.session_options(model=...) alone, 1 otherwise (the message says which).
"""

import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import onnx_pools

graph = helper.make_graph(
    [helper.make_node("GlobalAveragePool", ["X"], ["Y"])],
    "g",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT16, [1, 8, 4, 4])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, None)],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
model.ir_version = 10
ran = {}
for disabled in ("", "NhwcTransformer"):
    so = onnx_pools.session_options(model=model)
    if disabled:
        so.add_session_config_entry("optimization.disable_specified_optimizers", disabled)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    before = onnx_pools.call_counts()["GlobalAveragePool"]
    sess.run(None, {"X": np.ones((1, 8, 4, 4), np.float16)})
    ran[disabled] = onnx_pools.call_counts()["GlobalAveragePool"] - before
if ran[""] == 1:
    print("fp16 probe: float16 GlobalAveragePool runs on the library's kernel")
    sys.exit(0)
print(
    "fp16 probe: KNOWN ISSUE: onnxruntime's NhwcTransformer takes float16 GlobalAveragePool from the library on "
    f"this FP16-capable CPU (library kernel ran {ran['']}x; with "
    f"optimization.disable_specified_optimizers=NhwcTransformer {ran['NhwcTransformer']}x)"
)
sys.exit(1)
