"""The Python loader: library path, version, op selection, call counters, forced ISA."""

import os
import platform

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_pools
import reference as R
from helpers import (
    ALL_DTYPES,
    DEFAULT_TYPES_TAKE_FLOAT16,
    call_count_moves,
    counts_one_run,
    cpu_isas,
    graph_model,
    make_session,
    optimized_session,
    pool_model,
    random_lppool_case,
    random_lppool_input,
    rerun_on_isa,
    rng_for,
    run_op,
    run_session,
)

ALL_OPS = {
    "GlobalAveragePool": "",
    "GlobalMaxPool": "",
    "GlobalLpPool": "",
    "LpPool": "",
    "QLinearAveragePool": "com.microsoft",
}


def test_library_path_exists():
    path = onnx_pools.get_library_path()
    assert isinstance(path, str) and os.path.isfile(path), path
    assert os.path.basename(path).startswith("libonnx_pools") and ".so" in os.path.basename(path)


def test_version():
    assert onnx_pools.__version__ == "0.1.0"


def test_ops_and_call_counts_names():
    assert dict(onnx_pools.OPS) == ALL_OPS
    counts = onnx_pools.call_counts()
    assert set(counts) == set(ALL_OPS)
    assert all(isinstance(v, int) and v >= 0 for v in counts.values())


AARCH64 = platform.machine() in ("aarch64", "arm64")


def test_active_isa_value():
    assert onnx_pools.active_isa() in (("neon", "portable") if AARCH64 else ("avx512", "avx2", "portable"))
    if AARCH64 and os.environ.get("ONNX_POOLS_ISA") != "portable":
        assert onnx_pools.active_isa() == "neon"  # baseline on aarch64: always chosen unless portable is forced


def test_session_options_registers_into_given_object():
    so = ort.SessionOptions()
    out = onnx_pools.session_options(so)
    assert out is so
    x = R.to_dtype(np.random.default_rng(0).standard_normal([2, 3, 4, 5]), "float64")  # no ORT double kernel
    sess = ort.InferenceSession(
        pool_model("GlobalAveragePool", 13, "float64", [2, 3, 4, 5]).SerializeToString(),
        so,
        providers=["CPUExecutionProvider"],
    )
    with counts_one_run("GlobalAveragePool"):
        (y,) = run_session(sess, {"X": x})
    R.assert_close(y, R.global_average_pool(x), "float64", R.input_scale(x))


def _two_op_model(opset=13):
    elem = TensorProto.FLOAT
    nodes = [
        helper.make_node("GlobalAveragePool", ["X"], ["A"], name="gap"),
        helper.make_node("GlobalMaxPool", ["X"], ["M"], name="gmp"),
    ]
    return graph_model(nodes, [("X", elem, [2, 3, 5, 6])], [("A", elem, None), ("M", elem, None)], opsets={"": opset})


@pytest.mark.parametrize("opset", [13, 22])
@pytest.mark.parametrize("selected", ["GlobalMaxPool", "GlobalAveragePool"])
def test_ops_selection(selected, opset):
    sess = make_session(_two_op_model(opset), ops=[selected])
    x = R.to_dtype(np.random.default_rng(1).standard_normal([2, 3, 5, 6]), "float32")
    with call_count_moves() as moved:
        a, m = sess.run(None, {"X": x})
    assert moved == {selected: 1}, f"{selected} selected: library call counters moved by {moved}"
    R.assert_close(a, R.global_average_pool(x), "float32", R.input_scale(x))
    np.testing.assert_array_equal(m, R.global_max_pool(x).astype(np.float32))


def test_ops_selection_all_by_default():
    sess = make_session(_two_op_model())
    x = R.to_dtype(np.random.default_rng(2).standard_normal([2, 3, 5, 6]), "float32")
    with call_count_moves() as moved:
        sess.run(None, {"X": x})
    assert moved == {"GlobalMaxPool": 1, "GlobalAveragePool": 1}


# --------------------------------------------------------------------------- element-type selection


def _f16_relu_pool_model(fed_by_relu=True):
    """X(f16) -> [Relu ->] GlobalAveragePool: the pool fed by an ORT compute node, or by the graph input."""
    elem = TensorProto.FLOAT16
    nodes = [helper.make_node("GlobalAveragePool", ["R" if fed_by_relu else "X"], ["Y"], name="gap")]
    if fed_by_relu:
        nodes.insert(0, helper.make_node("Relu", ["X"], ["R"], name="relu"))
    return graph_model(nodes, [("X", elem, [2, 8, 6, 5])], [("Y", elem, None)], opsets={"": 18})


def _pool_input_type(so, model, tmp_path):
    """Element type of the GlobalAveragePool node's input in ORT's optimised graph (after its inserted casts)."""
    import onnx

    sess, optimized = optimized_session(model.SerializeToString(), so, tmp_path)
    opt = onnx.shape_inference.infer_shapes(optimized)
    types = {v.name: v.type.tensor_type.elem_type for v in list(opt.graph.input) + list(opt.graph.value_info)}
    (gap,) = [n for n in opt.graph.node if n.op_type == "GlobalAveragePool"]
    return sess, types.get(gap.input[0])


@pytest.mark.parametrize("fed_by_relu", [True, False])
def test_float16_kernels_taken_only_where_they_help(fed_by_relu, tmp_path):
    """A float16 pool fed by an ORT compute node runs on the float kernel between ORT's casts (a float16 kernel would
    add a cast and keep the Relu in ORT's slow float16 kernel); fed by the graph input it runs in float16. On a CPU
    where ORT runs float16 compute natively (aarch64 with FP16 arithmetic) it runs in float16 either way."""
    model = _f16_relu_pool_model(fed_by_relu)
    sess, pool_input = _pool_input_type(onnx_pools.session_options(model=model), model, tmp_path)
    in_float = fed_by_relu and not onnx_pools._fp16_vector_cpu()
    assert pool_input == (TensorProto.FLOAT if in_float else TensorProto.FLOAT16)
    x = R.to_dtype(np.random.default_rng(3).standard_normal([2, 8, 6, 5]), "float16")
    with counts_one_run("GlobalAveragePool"):
        (y,) = sess.run(None, {"X": x})
    xr = np.maximum(x, 0) if fed_by_relu else x
    R.assert_close(y, R.global_average_pool(xr), "float16", R.input_scale(xr))


def test_float16_left_out_without_model_and_explicit_types(tmp_path):
    """Without a model the library's default leaves float16 out (from onnxruntime 1.32; before, leaving a type out
    costs ORT's NCHWc rewrite, so every type is taken; and not where ORT runs float16 compute natively): the float16
    pool behind a Relu runs in float between ORT's casts, as in stock ORT. types="all" takes it, types=["float"]
    leaves it out."""
    model = _f16_relu_pool_model(True)
    _, pool_input = _pool_input_type(onnx_pools.session_options(), model, tmp_path)
    assert pool_input == (TensorProto.FLOAT16 if DEFAULT_TYPES_TAKE_FLOAT16 else TensorProto.FLOAT)
    _, pool_input = _pool_input_type(onnx_pools.session_options(types="all"), model, tmp_path)
    assert pool_input == TensorProto.FLOAT16
    _, pool_input = _pool_input_type(onnx_pools.session_options(types=["float"]), model, tmp_path)
    assert pool_input == TensorProto.FLOAT


def test_types_selection_unknown_name_is_a_clear_error():
    with pytest.raises(Exception, match=r"onnx_pools\.types.*unknown element type 'float17'"):
        onnx_pools.session_options(types="float,float17")  # RegisterCustomOps reads the entry and refuses


def test_types_selection_leaves_other_types_to_ort():
    """A double model with only float taken: ORT has no double kernel, so the session fails to load (as stock ORT
    does) rather than running the library's double kernel."""
    m = pool_model("GlobalMaxPool", 13, "float64", [1, 2, 3, 3])
    with pytest.raises(Exception, match="GlobalMaxPool"):
        ort.InferenceSession(
            m.SerializeToString(), onnx_pools.session_options(types=["float"]), providers=["CPUExecutionProvider"]
        )
    sess = ort.InferenceSession(
        m.SerializeToString(), onnx_pools.session_options(types=["float", "double"]), providers=["CPUExecutionProvider"]
    )
    x = np.random.default_rng(4).standard_normal([1, 2, 3, 3])
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], R.global_max_pool(x))


def test_reset_call_counts():
    x = R.to_dtype(np.ones([1, 2, 3, 3]), "float32")
    run_op("GlobalMaxPool", 13, "float32", x)
    assert onnx_pools.call_counts()["GlobalMaxPool"] >= 1
    onnx_pools.reset_call_counts()
    assert all(v == 0 for v in onnx_pools.call_counts().values()), onnx_pools.call_counts()
    run_op("GlobalMaxPool", 13, "float32", x)
    assert onnx_pools.call_counts()["GlobalMaxPool"] == 1


def test_counts_every_run():
    x = R.to_dtype(np.ones([1, 2, 3, 3]), "float32")
    _, sess = run_op("LpPool", 22, "float32", x, {"kernel_shape": [2, 2]})
    with counts_one_run("LpPool", 3):
        for _ in range(3):
            sess.run(None, {"X": x})


# --------------------------------------------------------------------------- forced ISA (subprocess)


def check_forced_isa():
    """The global pools and LpPool on the ISA path of this process (rerun_on_isa runs this with each ISA forced):
    every dtype, shapes around the vector widths, NaN / inf, 16-bit subnormals, long channels side by side, random
    LpPool cases, float32 accuracy on 1M elements. Every check runs; the failures are reported together. Returns
    the number of checks."""
    isa = onnx_pools.active_isa()
    n = 0
    failures = []

    def check(fn, what):
        nonlocal n
        n += 1
        try:
            fn()
        except pytest.skip.Exception:  # EP route: a model ORT's own schema refuses before any EP (helpers.ort_refusal)
            n -= 1
        except Exception as e:  # collect them all, report at the end
            failures.append(f"{what}: {type(e).__name__}: {e}")

    def exact_max(x, dtype):
        y, _ = run_op("GlobalMaxPool", 22, dtype, x)
        np.testing.assert_array_equal(R.to_f64(y), R.to_f64(R.to_dtype(R.global_max_pool(x), dtype)))

    def close(op, opset, dtype, x, attrs, ref, scale):
        y, _ = run_op(op, opset, dtype, x, attrs)
        R.assert_close(y, ref, dtype, scale, f"{op}-{opset} {attrs}")

    for dtype in ALL_DTYPES:
        rng = rng_for("isa", isa, dtype)
        for shape in (
            [2, 3, 5, 7],
            [1, 2, 33],
            [2, 3, 16, 16],
            [1, 1, 3, 4, 5],
            [3, 5, 1, 1],
            [2, 17, 9, 11],
            [1, 2, 127],
            [1, 3, 2, 2, 2, 3],
        ):
            x = R.to_dtype(rng.standard_normal(shape) * 2 + 0.5, dtype)
            sc = R.input_scale(x)
            what = f"{dtype} {shape}"
            check(lambda: close("GlobalAveragePool", 22, dtype, x, {}, R.global_average_pool(x), sc), "GAP " + what)
            check(lambda: exact_max(x, dtype), "GMP " + what)
            for p in (1, 2, 3):
                check(
                    lambda: close("GlobalLpPool", 22, dtype, x, {"p": p}, R.global_lp_pool(x, p), sc),
                    f"GLP p={p} " + what,
                )
            check(
                lambda: close("GlobalLpPool", 1, dtype, x, {"p": 1.5}, R.global_lp_pool(x, 1.5), sc),
                "GLP-1 p=1.5 " + what,
            )
        # NaN at the last element of an odd-length channel, inf elsewhere
        x = rng.standard_normal([2, 3, 33])
        x[0, 1, 32] = np.nan
        x[1, 2, 0] = np.inf
        x = R.to_dtype(x, dtype)
        for op, ref in (
            ("GlobalMaxPool", R.global_max_pool(x)),
            ("GlobalAveragePool", R.global_average_pool(x)),
            ("GlobalLpPool", R.global_lp_pool(x, 2)),
        ):
            check(lambda: close(op, 22, dtype, x, {}, ref, 3.0), f"{op} NaN/inf {dtype}")
        if dtype in ("float16", "bfloat16"):
            # GlobalMaxPool of 16-bit floats compares integer keys of the bits: negative-only channels, subnormals,
            # a +0 among -0 (IEEE maximum: +0), a negative NaN; 70 elements: the vector loop and a scalar tail
            x = -np.abs(rng.standard_normal([1, 4, 70])) - 1e-3
            x[0, 1, 10:20] = 1e-7 if dtype == "float16" else 1e-40
            x[0, 2, :] = -0.0
            x[0, 2, 35] = 0.0
            x[0, 3, 40] = -np.nan
            x = R.to_dtype(x, dtype)

            def half_max():
                y = R.to_f64(run_op("GlobalMaxPool", 22, dtype, x)[0])[0, :, 0]
                ref = R.to_f64(R.global_max_pool(x))[0, :, 0]
                assert np.array_equal(y[:2], ref[:2]), (y, ref)
                assert y[2] == 0 and not np.signbit(y[2]), y[2]
                assert np.isnan(y[3]), y[3]

            check(half_max, f"GlobalMaxPool {dtype} signs, subnormals, negative NaN")

            # Sums convert 16-bit floats in registers, and without F16C only zeros and normal halves that way: a block
            # holding a subnormal, inf or NaN is redone through the block conversion. Channels of 2500 (a clean 1024
            # block, a block with the odd value, a tail): multiples of 2^-24 (the smallest float16 subnormal) that
            # every float sum adds exactly, so GlobalAveragePool's sum and GlobalLpPool p=1 must equal the float64 ones.
            tiny = 2.0**-24 if dtype == "float16" else 2.0**-133  # the smallest subnormal of each
            x = rng.integers(-64, 65, [1, 6, 2500]).astype(np.float64) * 2.0**-10
            x[0, 0, :] = 0.0  # zeros only, both signs
            x[0, 0, ::3] = -0.0
            x[0, 1, 1500] = 5 * tiny  # one subnormal in the second block
            x[0, 2, 1030:1040] = -tiny  # several, negative
            x[0, 3, 2000] = np.inf
            x[0, 4, 1100] = np.nan
            x[0, 5, 2400:] = tiny  # subnormals in the tail only
            x = R.to_dtype(x, dtype)

            def half_sums():
                xd = R.to_f64(x)
                y = R.to_f64(run_op("GlobalAveragePool", 22, dtype, x)[0])[0, :, 0]
                ref = R.to_f64(R.to_dtype(xd.sum(axis=-1) / 2500, dtype))[0]
                assert np.array_equal(y, ref, equal_nan=True), (y, ref)
                y1 = R.to_f64(run_op("GlobalLpPool", 22, dtype, x, {"p": 1})[0])[0, :, 0]
                ref1 = R.to_f64(R.to_dtype(np.abs(xd).sum(axis=-1), dtype))[0]
                assert np.array_equal(y1, ref1, equal_nan=True), (y1, ref1)

            check(
                half_sums, f"GlobalAveragePool/GlobalLpPool {dtype}: zeros, subnormals, inf, NaN in 1024-element blocks"
            )
        # Long channels are pooled side by side (kStreamsOf: 4 on AVX2 / AVX-512 and for max, 3 for 16-bit floats and Lp
        # on AVX2, 2 on SSE2 / NEON): each channel must come out with the bits it has when pooled alone (the one-channel
        # path), and a channel the side-by-side sums leave to that path (a NaN, a float-lane overflow, an Lp sum of tiny
        # values, a float16 subnormal) must not disturb the others. 11 channels (groups and a rest), 2070 elements (two
        # 1024 blocks and a short tail).
        x = rng.standard_normal([1, 11, 2070]) * 3
        x[0, 1, 700] = np.nan
        x[0, 2, :] = 3e38 if dtype in ("float32", "bfloat16") else (6e4 if dtype == "float16" else 1e308)
        x[0, 2, ::2] *= -0.5
        x[0, 5, :] *= 1e-30 if dtype != "float16" else 1e-3  # float16: Lp sums in float lanes, no tiny case
        x[0, 6, 1500] = 1e-7 if dtype == "float16" else 1e-40
        x[0, 9, :] = -np.abs(x[0, 9, :])
        x = R.to_dtype(x, dtype)

        def streamed_as_alone():
            for op, attrs, ref in (
                ("GlobalAveragePool", {}, R.global_average_pool(x)),
                ("GlobalMaxPool", {}, R.global_max_pool(x)),
                ("GlobalLpPool", {"p": 2}, R.global_lp_pool(x, 2)),
                ("GlobalLpPool", {"p": 3}, R.global_lp_pool(x, 3)),
            ):
                y, _ = run_op(op, 22, dtype, x, attrs)
                for c in range(x.shape[1]):
                    alone, _ = run_op(op, 22, dtype, x[:, c : c + 1].copy(), attrs)
                    assert R.to_f64(y[:, c]).tobytes() == R.to_f64(alone[:, 0]).tobytes(), (op, c, y[:, c], alone)
                for c in range(x.shape[1]):
                    R.assert_close(y[:, c], ref[:, c], dtype, R.input_scale(x[:, c]), f"{op} {attrs} channel {c}")

        check(streamed_as_alone, f"global pools {dtype}: long channels side by side = each alone")
        for opset in (1, 11, 18, 22):
            for _ in range(6):
                attrs, ref_kwargs, shape = random_lppool_case(rng, opset)
                x = random_lppool_input(rng, shape, dtype)
                check(
                    lambda: close("LpPool", opset, dtype, x, attrs, R.lp_pool(x, **ref_kwargs), R.input_scale(x)),
                    f"LpPool-{opset} {dtype} shape={shape}",
                )
    # float32 accuracy on 1M elements per channel
    rng = np.random.default_rng(5)
    for name, x in (
        ("uniform(1,2)", rng.uniform(1, 2, (1, 2, 1000, 1000))),
        ("constant 0.1", np.full((1, 2, 1000, 1000), 0.1)),
    ):
        x = x.astype(np.float32)
        for op, p, ref in (
            ("GlobalAveragePool", None, R.global_average_pool(x)),
            ("GlobalLpPool", 1, R.global_lp_pool(x, 1)),
            ("GlobalLpPool", 2, R.global_lp_pool(x, 2)),
        ):

            def acc():
                y, _ = run_op(op, 22, "float32", x, {"p": p} if p else {})
                err = float(np.max(np.abs(y - ref) / np.abs(ref)))
                assert err <= 1e-5, f"relative error {err:.3g} > 1e-5"

            check(acc, f"{op} p={p} 1M float32 {name}")
    assert not failures, f"{len(failures)} of {n} checks failed:\n" + "\n".join(failures[:40])
    return n


@pytest.mark.parametrize("isa", cpu_isas())
def test_forced_isa_subprocess(isa):
    assert int(rerun_on_isa(isa, "test_loader", "check_forced_isa")) > 250


def test_model_argument_read_without_onnx_and_bad_bytes_are_a_clear_error():
    """session_options(model=...) reads the protobuf itself (onnx is not a run-time dependency); the same facts
    come out of a path, bytes and a ModelProto, and bytes that are not a model are a clear error."""
    model = _f16_relu_pool_model(True)
    facts = onnx_pools._read_model(model)
    assert facts == onnx_pools._read_model(model.SerializeToString())
    domains, nodes = facts
    assert [(op, inputs, outputs) for op, _, inputs, outputs in nodes] == [
        ("Relu", ["X"], ["R"]),
        ("GlobalAveragePool", ["R"], ["Y"]),
    ]
    assert onnx_pools._pool_fed_by_compute(nodes)
    assert not onnx_pools._pool_fed_by_compute(onnx_pools._read_model(_f16_relu_pool_model(False))[1])
    with pytest.raises(ValueError, match="cannot read the model"):
        onnx_pools.session_options(model=b"\xff\xff\xff\xff")
