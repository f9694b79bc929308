"""Concurrency: ORT allows concurrent run() on one session, and a library loaded into an inference server is run
from many threads at once, in sessions with different options.

Every test first runs each input single-threaded and checks that result against the float64 reference, then runs
the same inputs from 8 Python threads at once (InferenceSession.run releases the GIL) and requires every concurrent
output to be bitwise identical to the single-threaded one, and the library's call counters to have moved by exactly
the number of runs. --concurrency-iters N sets the runs per thread (default 30).
"""

import ctypes
import shutil
import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_pools
import reference as R
import reference_qlinear as RQ
from helpers import (
    CASE_COUNTS,
    assert_qlinear_matches,
    counts_one_run,
    graph_model,
    make_session,
    option,
    pool_model,
    qlinear_model,
    qlinear_reference,
    rng_for,
    run_session,
)

THREADS = 8
ITERS = option("concurrency_iters")
INPUTS_PER_THREAD = 3


class InFlight:
    """Counts run() calls in progress; `peak` (reported at the end of the session) shows the runs overlapped. Not
    asserted: whether two tiny runs overlap is up to the scheduler."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = self.peak = 0

    def __enter__(self):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc):
        with self.lock:
            self.now -= 1


IN_FLIGHT = InFlight()


class Family:
    """One op family: a session (built lazily), and per thread a few distinct inputs with their references."""

    def __init__(self, name, op, build, make_input, reference, check):
        self.name, self.op = name, op
        self.build, self.make_input, self.reference, self.check = build, make_input, reference, check
        self.sess = None
        self.feeds = None  # [thread][i] -> feeds
        self.single = None  # [thread][i] -> output (single-threaded)

    def prepare(self):
        self.sess = self.build()
        rng = rng_for("concurrency", self.name)
        self.feeds = [[self.make_input(rng, t, i) for i in range(INPUTS_PER_THREAD)] for t in range(THREADS)]
        self.single = [[None] * INPUTS_PER_THREAD for _ in range(THREADS)]
        for t in range(THREADS):
            for i in range(INPUTS_PER_THREAD):
                with counts_one_run(self.op):
                    y = self.run(t, i)
                self.check(y, self.feeds[t][i], f"{self.name} single-threaded, thread input {t}/{i}")
                self.single[t][i] = y

    def run(self, t, i):
        with IN_FLIGHT:
            (y,) = run_session(self.sess, self.feeds[t][i])
        return y


def _float_check(op, dtype, reference):
    def check(y, feeds, what):
        x = feeds["X"]
        ref = reference(x)
        if op == "GlobalMaxPool":
            np.testing.assert_array_equal(R.to_f64(y), R.to_f64(R.to_dtype(ref, dtype)), err_msg=what)
        else:
            R.assert_close(y, ref, dtype, R.input_scale(x), what)

    return check


def _float_family(name, op, opset, dtype, attrs, shape_fn, reference, threads):
    def build():
        model = pool_model(op, opset, dtype, ["N", "C"] + [f"D{i}" for i in range(len(shape_fn(0, 0)) - 2)], attrs)
        return make_session(model, threads=threads)

    def make_input(rng, t, i):
        x = rng.standard_normal(shape_fn(t, i)) * 2 + 0.25
        if op == "GlobalMaxPool" and (t + i) % 5 == 0:
            x.reshape(-1)[rng.integers(x.size)] = np.nan  # NaN propagates, per channel
        return {"X": R.to_dtype(x, dtype)}

    return Family(name, op, build, make_input, reference, _float_check(op, dtype, reference))


def _qlinear_family(name, dtype, attrs, shape_fn, params, threads):
    xs, xz, ys, yz = params

    def build():
        rank = len(shape_fn(0, 0))
        model, _ = qlinear_model(dtype, ["N"] + [f"D{i}" for i in range(rank - 1)], attrs, xs, xz, ys, yz)
        return make_session(model, threads=threads)

    def make_input(rng, t, i):
        lo, hi = RQ.QRANGE[np.dtype(dtype)]
        return {"X": rng.integers(lo, hi + 1, size=shape_fn(t, i)).astype(dtype)}

    def check(y, feeds, what):
        ref, pre = qlinear_reference(feeds["X"], xs, xz, ys, yz, attrs)
        assert_qlinear_matches(y, ref, pre, what)

    return Family(name, "QLinearAveragePool", build, make_input, None, check)


def _families():
    lp_kw = dict(kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1], dilations=[1, 2], ceil_mode=1, p=2)
    return [
        _float_family(
            "GlobalAveragePool-f32",
            "GlobalAveragePool",
            22,
            "float32",
            {},
            lambda t, i: [1 + (t + i) % 3, 16, 20 + t, 17 + 3 * i],
            R.global_average_pool,
            threads=2,
        ),
        _float_family(
            "GlobalMaxPool-f16",
            "GlobalMaxPool",
            13,
            "float16",
            {},
            lambda t, i: [1 + i, 8 + t, 33 + 7 * t + i],
            R.global_max_pool,
            threads=1,
        ),
        _float_family(
            "GlobalLpPool-bf16",
            "GlobalLpPool",
            22,
            "bfloat16",
            {"p": 3},
            lambda t, i: [2, 5 + t, 9, 11 + i],
            lambda x: R.global_lp_pool(x, 3),
            threads=2,
        ),
        _float_family(
            "LpPool-f64",
            "LpPool",
            18,
            "float64",
            dict(lp_kw),
            lambda t, i: [2, 3, 10 + t, 12 + i],
            lambda x: R.lp_pool(x, **lp_kw),
            threads=2,
        ),
        _float_family(
            "LpPool-f32",
            "LpPool",
            22,
            "float32",
            {"kernel_shape": [2, 2], "p": 3},
            lambda t, i: [1, 4 + i, 9 + t, 13],
            lambda x: R.lp_pool(x, [2, 2], p=3),
            threads=1,
        ),
        _qlinear_family(
            "QLinearAveragePool-u8-nhwc",
            np.uint8,
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1, "channels_last": 1},
            lambda t, i: [1 + i % 2, 9 + t, 8 + i, 16],
            (0.05, 128, 0.07, 120),
            threads=2,
        ),
        _qlinear_family(
            "QLinearAveragePool-s8-nchw",
            np.int8,
            {"kernel_shape": [2, 3], "strides": [2, 2]},
            lambda t, i: [2, 5, 7 + t, 9 + i],
            (0.031, -3, 0.02, 5),
            threads=1,
        ),
    ]


FAMILIES = {f.name: f for f in _families()}


def _run_threads(n, target):
    """Runs target(thread_index) on n threads released together; returns the exceptions they raised."""
    barrier = threading.Barrier(n)
    errors = []

    def body(t):
        try:
            barrier.wait()
            target(t)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append((t, e))

    threads = [threading.Thread(target=body, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _concurrent(families):
    """8 threads; thread t runs, ITERS times, an input of its own from each family in turn (order varies by thread).
    Returns {op: runs} and the list of mismatches."""
    runs = {}
    for f in families:
        runs[f.op] = runs.get(f.op, 0) + THREADS * ITERS
    mismatches = []

    def work(t):
        order = list(range(len(families)))
        rng = np.random.default_rng(t)
        for it in range(ITERS):
            rng.shuffle(order)
            for k in order:
                f = families[k]
                i = (it + t) % INPUTS_PER_THREAD
                y = f.run(t, i)
                if not _same_bits(y, f.single[t][i]):
                    mismatches.append(f"{f.name}: thread {t}, iteration {it}, input {i}")

    before = onnx_pools.call_counts()
    IN_FLIGHT.peak = 0
    errors = _run_threads(THREADS, work)
    after = onnx_pools.call_counts()
    assert not errors, f"{len(errors)} threads raised; first: thread {errors[0][0]}: {errors[0][1]!r}"
    CASE_COUNTS["concurrency: most runs in flight at once (max over tests)"] = max(
        CASE_COUNTS["concurrency: most runs in flight at once (max over tests)"], IN_FLIGHT.peak
    )
    moved = {op: after[op] - before[op] for op in after}
    return moved, runs, mismatches


@pytest.mark.parametrize("name", list(FAMILIES))
def test_one_family_from_8_threads(name):
    f = FAMILIES[name]
    f.prepare()
    moved, runs, mismatches = _concurrent([f])
    assert not mismatches, f"{len(mismatches)} concurrent outputs differ from single-threaded; first: {mismatches[:3]}"
    expected = {op: runs.get(op, 0) for op in moved}
    assert moved == expected, f"call counters moved by {moved}, expected {expected}"
    CASE_COUNTS["concurrency: concurrent runs compared bitwise"] += THREADS * ITERS


def test_all_families_at_once_from_8_threads():
    families = list(FAMILIES.values())
    for f in families:
        if f.sess is None:
            f.prepare()
    moved, runs, mismatches = _concurrent(families)
    assert not mismatches, f"{len(mismatches)} concurrent outputs differ from single-threaded; first: {mismatches[:3]}"
    expected = {op: runs.get(op, 0) for op in moved}
    assert moved == expected, f"call counters moved by {moved}, expected {expected}"
    CASE_COUNTS["concurrency: concurrent runs compared bitwise"] += THREADS * ITERS * len(families)


# --------------------------------------------------------------------------- sessions with different options


def _multi_op_model(ops_and_attrs, dtype="float32", opset=22):
    """Pool nodes side by side on one input X [N, C, H, W]: outputs Y0, Y1..."""
    elem = TensorProto.FLOAT if dtype == "float32" else TensorProto.FLOAT16
    nodes = [
        helper.make_node(op, ["X"], [f"Y{i}"], name=f"n{i}", **attrs) for i, (op, attrs) in enumerate(ops_and_attrs)
    ]
    outputs = [(f"Y{i}", elem, None) for i in range(len(nodes))]
    return graph_model(nodes, [("X", elem, ["N", "C", "H", "W"])], outputs, opsets={"": opset})


class Setup:
    """A session with its own options; per thread an input; the ops the library (or a copy) runs per run()."""

    def __init__(self, name, sess, make_input, reference, lib_ops, copy_ops=None):
        self.name, self.sess, self.make_input, self.reference = name, sess, make_input, reference
        self.lib_ops, self.copy_ops = lib_ops, copy_ops or {}


def _options(threads=1, **kw):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    for k, v in kw.items():
        setattr(so, k, v)
    return so


def _session(model, so):
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _float_input(shape, dtype="float32"):
    def make(rng, t):
        return {"X": R.to_dtype(rng.standard_normal([shape[0], shape[1] + t % 3] + shape[2:]) + 0.5, dtype)}

    return make


def _refs(*fns):
    return lambda x: [fn(x) for fn in fns]


@pytest.fixture(scope="module")
def library_copy(tmp_path_factory):
    """A second copy of the library at another path: a second, independent instance in the process."""
    path = str(tmp_path_factory.mktemp("libcopy") / "libonnx_pools_copy.so")
    shutil.copyfile(onnx_pools.get_library_path(), path)
    lib = ctypes.CDLL(path)
    lib.onnx_pools_call_count.restype = ctypes.c_uint64
    lib.onnx_pools_call_count.argtypes = [ctypes.c_int]
    lib.onnx_pools_op_name.restype = ctypes.c_char_p
    lib.onnx_pools_op_name.argtypes = [ctypes.c_int]

    def counts():
        return {
            lib.onnx_pools_op_name(i).decode(): lib.onnx_pools_call_count(i) for i in range(lib.onnx_pools_op_count())
        }

    return path, counts


def _setups(library_copy):
    copy_path, _ = library_copy
    gap, gmp = R.global_average_pool, R.global_max_pool
    glp = lambda x: R.global_lp_pool(x, 2)  # noqa: E731
    two = _multi_op_model([("GlobalAveragePool", {}), ("GlobalMaxPool", {})])
    three = _multi_op_model([("GlobalAveragePool", {}), ("GlobalMaxPool", {}), ("GlobalLpPool", {"p": 2})])
    lp16 = _multi_op_model([("LpPool", {"kernel_shape": [3, 2], "strides": [1, 2], "p": 3})], "float16")
    lp32 = _multi_op_model([("LpPool", {"kernel_shape": [2, 2], "pads": [1, 0, 0, 1], "p": 1})])
    setups = []

    so = onnx_pools.session_options(_options(threads=2))
    setups.append(
        Setup(
            "default options, 2 intra-op threads",
            _session(two, so),
            _float_input([2, 16, 12, 10]),
            _refs(gap, gmp),
            {"GlobalAveragePool": 1, "GlobalMaxPool": 1},
        )
    )
    so = onnx_pools.session_options(_options(), ops=["GlobalMaxPool"])
    setups.append(
        Setup(
            "ops=[GlobalMaxPool] (GlobalAveragePool on ORT)",
            _session(two, so),
            _float_input([1, 8, 9, 9]),
            _refs(gap, gmp),
            {"GlobalMaxPool": 1},
        )
    )
    setups.append(
        Setup("no library (stock ORT)", _session(two, _options()), _float_input([2, 4, 7, 7]), _refs(gap, gmp), {})
    )
    so = onnx_pools.session_options(_options(inter_op_num_threads=3, execution_mode=ort.ExecutionMode.ORT_PARALLEL))
    setups.append(
        Setup(
            "ORT_PARALLEL, 3 library nodes per run",
            _session(three, so),
            _float_input([2, 6, 11, 13]),
            _refs(gap, gmp, glp),
            {"GlobalAveragePool": 1, "GlobalMaxPool": 1, "GlobalLpPool": 1},
        )
    )
    so = onnx_pools.session_options(
        _options(
            graph_optimization_level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            enable_cpu_mem_arena=False,
            enable_mem_pattern=False,
        )
    )
    setups.append(
        Setup(
            "optimizations and arena off, float16 LpPool",
            _session(lp16, so),
            _float_input([1, 3, 10, 9], "float16"),
            _refs(lambda x: R.lp_pool(x, [3, 2], [1, 2], p=3)),
            {"LpPool": 1},
        )
    )
    so = _options(threads=2)
    so.register_custom_ops_library(copy_path)
    setups.append(
        Setup(
            "second copy of the library",
            _session(lp32, so),
            _float_input([2, 5, 8, 9]),
            _refs(lambda x: R.lp_pool(x, [2, 2], pads=[1, 0, 0, 1], p=1)),
            {},
            {"LpPool": 1},
        )
    )
    qmodel, _ = qlinear_model(np.uint8, ["N", "C", "H", "W"], {"kernel_shape": [2, 2], "ceil_mode": 1}, 0.1, 7, 0.13, 3)
    so = onnx_pools.session_options(_options(threads=2), ops="all", model=qmodel)

    def q_input(rng, t):
        return {"X": rng.integers(0, 256, size=[1, 9, 7 + t, 6]).astype(np.uint8)}

    def q_ref(x):
        return [RQ.qlinear_average_pool(x, 0.1, 7, 0.13, 3, [2, 2], ceil_mode=1)]

    setups.append(Setup("ops=all, QLinearAveragePool", _session(qmodel, so), q_input, q_ref, {"QLinearAveragePool": 1}))
    return setups


def _check_outputs(setup, ys, feeds, what):
    refs = setup.reference(feeds["X"])
    for y, ref in zip(ys, refs):
        if isinstance(ref, tuple):
            assert_qlinear_matches(y, ref[0], ref[1], what)
        else:
            dtype = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}[y.dtype]
            R.assert_close(y, ref, dtype, R.input_scale(feeds["X"]), what)


def test_sessions_with_different_options_concurrently(library_copy):
    """Seven sessions, each with its own options (library ops selection, thread counts, ORT_PARALLEL execution,
    optimizations/arena off, no library, a second copy of the library), run from 8 threads at once."""
    _, copy_counts = library_copy
    setups = _setups(library_copy)
    feeds = [[s.make_input(rng_for("options", s.name, t), t) for t in range(THREADS)] for s in setups]
    single = [[None] * THREADS for _ in setups]
    for k, s in enumerate(setups):
        for t in range(THREADS):
            b, bc = onnx_pools.call_counts(), copy_counts()
            ys = s.sess.run(None, feeds[k][t])
            a, ac = onnx_pools.call_counts(), copy_counts()
            assert {op: a[op] - b[op] for op in a if a[op] != b[op]} == s.lib_ops, f"{s.name}: library counters"
            assert {op: ac[op] - bc[op] for op in ac if ac[op] != bc[op]} == s.copy_ops, f"{s.name}: copy counters"
            _check_outputs(s, ys, feeds[k][t], f"{s.name}, input {t}")
            single[k][t] = ys
    mismatches = []

    def work(t):
        for it in range(ITERS):
            for k in np.random.default_rng(100 * t + it).permutation(len(setups)):
                with IN_FLIGHT:
                    ys = setups[k].sess.run(None, feeds[k][t])
                if not all(_same_bits(a, b) for a, b in zip(ys, single[k][t])):
                    mismatches.append(f"{setups[k].name}: thread {t} iteration {it}")

    b, bc = onnx_pools.call_counts(), copy_counts()
    IN_FLIGHT.peak = 0
    errors = _run_threads(THREADS, work)
    a, ac = onnx_pools.call_counts(), copy_counts()
    assert not errors, f"{len(errors)} threads raised; first: thread {errors[0][0]}: {errors[0][1]!r}"
    CASE_COUNTS["concurrency: most runs in flight at once (max over tests)"] = max(
        CASE_COUNTS["concurrency: most runs in flight at once (max over tests)"], IN_FLIGHT.peak
    )
    assert not mismatches, f"{len(mismatches)} concurrent outputs differ from single-threaded; first: {mismatches[:3]}"
    want, want_copy = {op: 0 for op in a}, {op: 0 for op in ac}
    for s in setups:
        for op, n in s.lib_ops.items():
            want[op] += n * THREADS * ITERS
        for op, n in s.copy_ops.items():
            want_copy[op] += n * THREADS * ITERS
    assert {op: a[op] - b[op] for op in a} == want, "library call counters under concurrency"
    assert {op: ac[op] - bc[op] for op in ac} == want_copy, "the copy's call counters under concurrency"
    CASE_COUNTS["concurrency: concurrent runs compared bitwise"] += THREADS * ITERS * len(setups)


def test_sessions_created_and_dropped_concurrently():
    """8 threads each create sessions (registering the library each time, with different op selections), run them
    once and drop them, while the others do the same."""
    model = _multi_op_model([("GlobalAveragePool", {}), ("GlobalMaxPool", {}), ("LpPool", {"kernel_shape": [2, 2]})])
    per_thread = 12
    selections = [None, "all", ["GlobalMaxPool"], ["LpPool", "GlobalAveragePool"]]
    x = R.to_dtype(rng_for("create").standard_normal([2, 3, 6, 5]), "float32")
    refs = [R.global_average_pool(x), R.global_max_pool(x), R.lp_pool(x, [2, 2], p=2)]
    failures = []

    def work(t):
        for i in range(per_thread):
            so = onnx_pools.session_options(_options(), ops=selections[(t + i) % len(selections)], model=model)
            ys = _session(model, so).run(None, {"X": x})
            for y, ref in zip(ys, refs):
                try:
                    R.assert_close(y, ref, "float32", R.input_scale(x))
                except AssertionError as e:
                    failures.append(f"thread {t} session {i}: {e}")

    before = onnx_pools.call_counts()
    errors = _run_threads(THREADS, work)
    after = onnx_pools.call_counts()
    assert not errors, f"{len(errors)} threads raised; first: thread {errors[0][0]}: {errors[0][1]!r}"
    assert not failures, failures[:3]
    want = {op: 0 for op in after}
    for t in range(THREADS):
        for i in range(per_thread):
            sel = selections[(t + i) % len(selections)]
            for op in ("GlobalAveragePool", "GlobalMaxPool", "LpPool"):
                if sel is None or sel == "all" or op in sel:
                    want[op] += 1
    assert {op: after[op] - before[op] for op in after} == want


def test_library_registered_twice_in_one_session_options():
    """Registering the library twice into the same SessionOptions either works (each pool node runs once, on the
    library) or fails cleanly when the session is created (ORT: the domain is already in the registry); either way
    the process carries on and a fresh registration works."""
    model = pool_model("GlobalAveragePool", 22, "float64", [2, 3, 4, 5])
    x = R.to_dtype(rng_for("twice").standard_normal([2, 3, 4, 5]), "float64")
    so = onnx_pools.session_options(_options())
    try:
        so.register_custom_ops_library(onnx_pools.get_library_path())
        sess = _session(model, so)
    except Exception as e:  # noqa: BLE001
        assert "already" in str(e) and "registry" in str(e), f"unexpected error: {e}"
    else:
        with counts_one_run("GlobalAveragePool"):
            (y,) = sess.run(None, {"X": x})
        R.assert_close(y, R.global_average_pool(x), "float64", R.input_scale(x))
    # the same options object again through the loader, and a fresh one: both must still give working sessions
    sess = make_session(model)
    with counts_one_run("GlobalAveragePool"):
        (y,) = sess.run(None, {"X": x})
    R.assert_close(y, R.global_average_pool(x), "float64", R.input_scale(x))
