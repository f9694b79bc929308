"""Does float16 GlobalAveragePool run on the library on this CPU? (scripts/aarch64_check.sh runs it on an emulated
aarch64 CPU with FP16 arithmetic, QEMU_CPU=max; it passes anywhere.)

On aarch64 CPUs with FP16 arithmetic, onnxruntime's NhwcTransformer rewrites float16 GlobalAveragePool nodes to its
own NHWC kernel (com.ms.internal.nhwc), and the library's kernel, registered for the node, would not run.
onnx_pools.session_options() disables the transformer for the session when the library's kernels are forced or the
model has nothing else the transformer rewrites (see its docstring). Checked here, by the call counter:
  lone pool, session_options(model=...)          -> the library
  lone pool, session_options()                   -> the library
  Conv -> pool, session_options(model=..., ort_layout=False) -> the library
  Conv -> pool, session_options(model=...)       -> reported only (ORT's NHWC chain on FP16 CPUs)
Exit status 0 when the first three ran on the library, 1 otherwise.
"""

import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnx_pools


def model(with_conv):
    nodes, inits = [helper.make_node("GlobalAveragePool", ["H" if with_conv else "X"], ["Y"])], []
    if with_conv:
        w = np.random.default_rng(0).standard_normal((8, 8, 3, 3)).astype(np.float16)
        inits.append(numpy_helper.from_array(w, "W"))
        nodes.insert(0, helper.make_node("Conv", ["X", "W"], ["H"], pads=[1, 1, 1, 1]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT16, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    m.ir_version = 10
    return m


def library_runs(m, **options):
    sess = ort.InferenceSession(
        m.SerializeToString(), onnx_pools.session_options(**options), providers=["CPUExecutionProvider"]
    )
    before = onnx_pools.call_counts()["GlobalAveragePool"]
    sess.run(None, {"X": np.ones((1, 8, 4, 4), np.float16)})
    return onnx_pools.call_counts()["GlobalAveragePool"] - before == 1


lone, conv = model(False), model(True)


def main():
    required = {
        "lone pool, session_options(model=...)": library_runs(lone, model=lone),
        "lone pool, session_options()": library_runs(lone),
        "Conv -> pool, ort_layout=False": library_runs(conv, model=conv, ort_layout=False),
    }
    fp16_cpu = onnx_pools._fp16_vector_cpu()
    default_conv = library_runs(conv, model=conv)
    for case, ran in required.items():
        print(f"fp16 probe: {case}: {'library' if ran else 'NOT the library'}")
    print(  # informational: ORT's NHWC float16 chain on FP16 CPUs, its NCHWc layout on x86-64, else the library
        f"fp16 probe: Conv -> pool, session_options(model=...): {'library' if default_conv else 'ORT'} "
        f"(CPU with FP16 vector arithmetic: {fp16_cpu})"
    )
    sys.exit(0 if all(required.values()) else 1)


if __name__ == "__main__":
    main()
