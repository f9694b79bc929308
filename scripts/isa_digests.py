"""Bit-for-bit comparison of kernel paths across instruction sets and architectures.

    python scripts/isa_digests.py OUT.json       # this process's path (ONNX_POOLS_ISA forces one)
    python scripts/isa_digests.py --compare A.json B.json ...

Runs a fixed set of cases, every op x element type x layout (global pools with NaN/inf, LpPool 1-D/2-D/3-D with
padding, strides, dilations and ceil_mode, Lp p = 1, 2, 3 and 1.5, QLinearAveragePool uint8/int8 NCHW/NHWC with
and without count_include_pad), on the onnx_pools found on sys.path, and writes the SHA-256 of each output's bytes.
Inputs are made from integers only (no libm), so they are the same bits on every machine. Used by
scripts/aarch64_check.sh to compare the aarch64 paths (under qemu) with the x86-64 ones. Needs onnx and ml_dtypes.
"""

import hashlib
import json
import os
import platform
import re
import sys


def cases():
    import ml_dtypes
    import numpy as np

    dtypes = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
    rng = np.random.default_rng(14)
    out = []
    for name, dt in dtypes.items():
        for shape in ([2, 3, 5, 7], [1, 2, 1001], [2, 17, 9, 11], [1, 3, 2, 3, 5]):
            x = ((rng.integers(-4000, 4000, shape).astype(np.float64)) / 512.0).astype(dt)
            out += [
                (f"GAP {name} {shape}", "GlobalAveragePool", 22, x, {}),
                (f"GMP {name} {shape}", "GlobalMaxPool", 22, x, {}),
            ]
            for p in (1, 2, 3):
                out.append((f"GLP p={p} {name} {shape}", "GlobalLpPool", 22, x, {"p": p}))
            out.append((f"GLP-1 p=1.5 {name} {shape}", "GlobalLpPool", 1, x, {"p": 1.5}))
        x = rng.integers(-4000, 4000, [2, 3, 33]).astype(np.float64) / 512.0
        x[0, 1, 32] = np.nan
        x[1, 2, 0] = np.inf
        x = x.astype(dt)
        for op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
            out.append((f"{op} NaN/inf {name}", op, 22, x, {}))
        x2 = (rng.integers(-4000, 4000, [2, 4, 19, 23]).astype(np.float64) / 256.0).astype(dt)
        x1 = (rng.integers(-4000, 4000, [2, 4, 57]).astype(np.float64) / 256.0).astype(dt)
        x3 = (rng.integers(-4000, 4000, [1, 2, 7, 8, 9]).astype(np.float64) / 256.0).astype(dt)
        for tag, x, attrs in (
            ("2d k3 s1 pad1 p2", x2, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}),
            ("2d k2 s2 p3", x2, {"kernel_shape": [2, 2], "strides": [2, 2], "p": 3}),
            (
                "2d k3x2 dil2 ceil p1",
                x2,
                {"kernel_shape": [3, 2], "dilations": [2, 1], "strides": [2, 3], "ceil_mode": 1, "p": 1},
            ),
            ("2d k4 same_upper p2", x2, {"kernel_shape": [4, 4], "auto_pad": "SAME_UPPER", "strides": [3, 2], "p": 2}),
            ("1d k5 s2 pad2 p3", x1, {"kernel_shape": [5], "strides": [2], "pads": [2, 1], "p": 3}),
            ("3d k2x3x2 pad p2", x3, {"kernel_shape": [2, 3, 2], "pads": [1, 0, 1, 0, 1, 1], "p": 2}),
        ):
            out.append((f"LpPool {tag} {name}", "LpPool", 18, x, attrs))
        out.append((f"LpPool-1 2d k3 p=1.5 {name}", "LpPool", 1, x2, {"kernel_shape": [3, 3], "p": 1.5}))
        # ReLU outputs: windows of zeros, skipped or recomputed by the elements read up to their row, beside values
        # whose powers underflow (a power of two times small integers): which windows are recomputed, and whether a
        # plane is redone at a new scale, must not depend on the path's blocks (p = 1.5 and double cube roots are
        # not exact under scaling)
        tiny = {"float32": 2.0**-100, "float64": 2.0**-700, "float16": 2.0**-24, "bfloat16": 2.0**-100}[name]
        xr = np.maximum(rng.integers(-4000, 4000, [1, 3, 20, 40]).astype(np.float64), 0.0) / 256.0
        xr[0, 1, 5:, ::7] = np.where(xr[0, 1, 5:, ::7] > 0, tiny * 3, 0.0)
        xr[0, 2, :10] = 0.0
        xr[0, 2, 15, 3] = tiny
        xr = xr.astype(dt)
        for tag, attrs in (
            ("k2 s2", {"kernel_shape": [2, 2], "strides": [2, 2]}),
            ("k3 pad1", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
            ("k1", {"kernel_shape": [1, 1]}),
        ):
            out.append((f"LpPool relu {tag} p3 {name}", "LpPool", 18, xr, dict(attrs, p=3)))
            if name != "bfloat16":
                out.append((f"LpPool-1 relu {tag} p=1.5 {name}", "LpPool", 1, xr, dict(attrs, p=1.5)))
    for qt, lo, hi in (("uint8", 0, 256), ("int8", -128, 128)):
        for layout in ("nchw", "nhwc"):
            for tag, shape, attrs in (
                ("2d k3 pad1", [2, 5, 13, 11], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
                ("2d k2 s2 ceil", [1, 8, 15, 9], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
                ("1d k4 s3 pad2", [2, 3, 40], {"kernel_shape": [4], "strides": [3], "pads": [2, 2]}),
                ("3d k2 pad1", [1, 4, 5, 6, 7], {"kernel_shape": [2, 2, 2], "pads": [1, 1, 1, 0, 0, 0]}),
            ):
                for cip in (0, 1):
                    s = list(shape)
                    if layout == "nhwc":
                        s = [s[0]] + s[2:] + [s[1]]
                    x = rng.integers(lo, hi, s).astype(qt)
                    a = dict(attrs, count_include_pad=cip, channels_last=int(layout == "nhwc"))
                    q = (0.0371, int(rng.integers(lo, hi)), 0.0297, int(rng.integers(lo, hi)))
                    out.append((f"QLinear {qt} {layout} {tag} cip={cip}", "QLinearAveragePool", q, x, a))
    # NCHW 3x3 pads 1 over planes of 40 columns (the one-pass path of every ISA), with equal scales and zero points
    # too (ties at the edge windows); their own generator, so the cases above keep their inputs
    rng = np.random.default_rng(15)
    for qt, lo, hi in (("uint8", 0, 256), ("int8", -128, 128)):
        for equal in (0, 1):
            for cip in (0, 1):
                x = rng.integers(lo, hi, [2, 3, 6, 40]).astype(qt)
                a = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": cip}
                zero = (lo + hi) // 2
                q = (
                    (0.05, zero, 0.05, zero)
                    if equal
                    else (0.0371, int(rng.integers(lo, hi)), 0.0297, int(rng.integers(lo, hi)))
                )
                out.append((f"QLinear {qt} nchw 2d k3 pad1 w40 equal={equal} cip={cip}", "QLinearAveragePool", q, x, a))
    # one window over each whole unit (a quantized head; ORT's global-average rule at ties without pads), with
    # equal scales and an odd zero point too (ties on the even-count windows); their own generator
    rng = np.random.default_rng(16)
    for qt, lo, hi in (("uint8", 0, 256), ("int8", -128, 128)):
        for layout in ("nchw", "nhwc"):
            for tag, shape, attrs in (
                ("whole 7x7", [2, 70, 7, 7], {"kernel_shape": [7, 7]}),
                ("whole 4x6", [1, 40, 4, 6], {"kernel_shape": [4, 6]}),
                ("whole pad1", [1, 9, 6, 5], {"kernel_shape": [8, 7], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
            ):
                for equal in (0, 1):
                    s = list(shape)
                    if layout == "nhwc":
                        s = [s[0]] + s[2:] + [s[1]]
                    x = rng.integers(lo, hi, s).astype(qt)
                    a = dict(attrs, channels_last=int(layout == "nhwc"))
                    q = (0.05, lo + 101, 0.05, lo + 101) if equal else (0.0371, lo + 77, 0.0297, lo + 130)
                    out.append((f"QLinear {qt} {layout} {tag} equal={equal}", "QLinearAveragePool", q, x, a))
    return out


def model(op, opset, x, attrs):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    elem = {
        "float32": TensorProto.FLOAT,
        "float64": TensorProto.DOUBLE,
        "float16": TensorProto.FLOAT16,
        "bfloat16": TensorProto.BFLOAT16,
        "uint8": TensorProto.UINT8,
        "int8": TensorProto.INT8,
    }[str(x.dtype)]
    inits, inputs, domain, opsets = [], ["X"], "", []
    if op == "QLinearAveragePool":
        xs, xz, ys, yz = opset
        qdt = x.dtype
        inits = [
            numpy_helper.from_array(np.array(xs, np.float32), "xs"),
            numpy_helper.from_array(np.array(xz, qdt), "xz"),
            numpy_helper.from_array(np.array(ys, np.float32), "ys"),
            numpy_helper.from_array(np.array(yz, qdt), "yz"),
        ]
        inputs = ["X", "xs", "xz", "ys", "yz"]
        domain, opset = "com.microsoft", 19
        opsets = [helper.make_opsetid("com.microsoft", 1)]
    node = helper.make_node(op, inputs, ["Y"], domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", elem, list(x.shape))],
        [helper.make_tensor_value_info("Y", elem, None)],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] + opsets)
    m.ir_version = min(onnx.IR_VERSION, 10)
    return m.SerializeToString()


def run(path):
    import numpy as np
    import onnxruntime as ort

    import onnx_pools
    from onnx_pools.ortvalues import from_ortvalue, to_ortvalue

    digests, not_ran = {}, []
    for name, op, opset, x, attrs in cases():
        data = model(op, opset, x, attrs)
        so = onnx_pools.session_options(ops="all", model=data)
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        before = onnx_pools.call_counts()[op]
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        # through OrtValues (the package's conversion, bfloat16 included); the output's raw bytes are hashed
        b = sess.io_binding()
        b.bind_ortvalue_input("X", to_ortvalue(x))
        b.bind_output("Y")
        sess.run_with_iobinding(b)
        y = from_ortvalue(b.get_outputs()[0])
        digests[name] = hashlib.sha256(np.ascontiguousarray(y).tobytes()).hexdigest()[:16] + f" {list(y.shape)}"
        if onnx_pools.call_counts()[op] != before + 1:
            not_ran.append(name)
    assert not not_ran, f"the library's kernel did not run for {not_ran}"
    forced = os.environ.get("ONNX_POOLS_ISA")
    assert not forced or onnx_pools.active_isa() == forced, (onnx_pools.active_isa(), forced)
    where = f"{platform.machine()} {onnx_pools.active_isa()}"
    with open(path, "w") as f:
        json.dump({"where": where, "digests": digests}, f, indent=0)
    print(f"isa digests: {len(digests)} cases on {where} (library kernels ran for each) -> {path}")


def compare(paths, allow=None):
    """Compares every run with the first; differences in cases matching `allow` (a regex) are reported only."""
    runs = [json.load(open(p)) for p in paths]
    first = runs[0]
    bad = 0
    for r in runs[1:]:
        diff = [k for k in first["digests"] if r["digests"].get(k) != first["digests"][k]]
        allowed = [k for k in diff if allow and re.search(allow, k)]
        bad += len(diff) - len(allowed)
        status = "bit-for-bit identical" if not diff else f"{len(diff)} of {len(first['digests'])} cases differ"
        if allowed:
            status += f" ({len(allowed)} of them allowed: {allow})"
        print(f"isa digests: {r['where']} vs {first['where']}: {status}")
        for k in diff[:20]:
            print(f"    {k}: {r['digests'].get(k)} vs {first['digests'][k]}")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        args, allow = sys.argv[2:], None
        if args[0] == "--allow":
            allow, args = args[1], args[2:]
        sys.exit(compare(args, allow))
    run(sys.argv[1])
