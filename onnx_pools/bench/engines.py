"""What the benchmark times besides the library: ONNX Runtime sessions run through IOBinding, and the optional
engines (PyTorch, OpenVINO), imported only when installed and asked for."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Callable

import numpy as np

import onnx_pools
from onnx_pools.ortvalues import from_ortvalue, to_ortvalue

__all__ = [
    "json_from_child",
    "bound_runner",
    "library_at",
    "openvino_module",
    "openvino_runner",
    "ort_session",
    "python_path_env",
    "short_spin",
    "torch_module",
]


@functools.cache
def _optional_import(name: str) -> ModuleType | None:
    try:
        return __import__(name)
    except ImportError:
        return None


def torch_module() -> Any:
    """torch, or None when not installed (its columns then read "-"); imported on first use (~3 s)."""
    return _optional_import("torch")


def openvino_module() -> Any:
    """openvino, or None when not installed (its column then reads "-"); imported on first use."""
    return _optional_import("openvino")


@functools.cache
def _openvino_core() -> Any:
    """The process's one OpenVINO Core (its CPU plugin is loaded once, whatever the number of models compiled)."""
    return openvino_module().Core()


@contextlib.contextmanager
def library_at(path: str | None) -> Iterator[None]:
    """Within it, onnx_pools registers the build of the library at `path` (None: the one this process loaded):
    another build timed in the same process."""
    saved = os.environ.get("ONNX_POOLS_LIBRARY")
    if path is not None:
        os.environ["ONNX_POOLS_LIBRARY"] = os.path.abspath(path)
    try:
        yield
    finally:
        if path is not None:
            if saved is None:
                del os.environ["ONNX_POOLS_LIBRARY"]
            else:
                os.environ["ONNX_POOLS_LIBRARY"] = saved


# How long the benchmark's ORT sessions' pool threads spin waiting for work before they block. ORT's default spins
# tens of milliseconds after a run (80-90 ms on a 2-vCPU host), and the next engine timed would wait that long or
# share its cores with them; the runs of a turn and the parallel sections of a run are microseconds apart, so they
# spin as by default. Every session gets it: stock's, the library's, the EP's.
SPIN_US = 1000


def short_spin(so: Any) -> Any:
    """`so` with its intra-op pool threads spinning at most SPIN_US before they block (onnxruntime >= 1.27 reads
    the key; older ones ignore it, and the benchmark waits for their spinning to end)."""
    so.add_session_config_entry("session.intra_op.spin_duration_us", str(SPIN_US))
    return so


def ort_session(model: bytes, library: bool, threads: int, library_path: str | None = None) -> Any:
    """A sequential CPU session of the model at `threads` intra-op threads: with the library (or the build at
    `library_path`) registered for the model (onnx_pools.session_options(model=...)), or stock."""
    import onnxruntime as ort

    if library:
        with library_at(library_path):
            so = onnx_pools.session_options(model=model)
    else:
        so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(model, short_spin(so), providers=["CPUExecutionProvider"])


def bound_runner(sess: Any, x: np.ndarray) -> tuple[Callable[[], Any], np.ndarray]:
    """IOBinding with pre-created input and output OrtValues (ORT's per-call overhead is then small; bfloat16
    through onnx_pools.ortvalues): (a function running the session once, its output after a first run)."""
    xin = to_ortvalue(x)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("X", xin)
    binding.bind_output("Y")
    sess.run_with_iobinding(binding)
    yv = binding.get_outputs()[0]
    binding.bind_ortvalue_output("Y", yv)  # the first run's output, reused by every later run
    keep = (sess, xin, yv, binding)  # the OrtValues and the session live as long as the function

    def run() -> Any:
        sess.run_with_iobinding(binding)
        return keep

    run()
    return run, from_ortvalue(yv)


def openvino_runner(model: bytes, x: np.ndarray, threads: int) -> tuple[Callable[[], Any], np.ndarray]:
    """The one-node model compiled for OpenVINO's CPU plugin at `threads` inference threads with the latency hint:
    (a function running one inference on x, its output). Raises when OpenVINO cannot read or compile the model."""
    ov = openvino_module()
    core = _openvino_core()
    compiled = core.compile_model(
        core.read_model(model=model),
        "CPU",
        {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"},
    )
    request = compiled.create_infer_request()
    tensor = ov.Tensor(x, shared_memory=True)  # reads x in place: x lives as long as the function
    request.set_input_tensor(tensor)
    request.infer()
    y = np.array(request.get_output_tensor().data, copy=True)
    keep = (compiled, request, tensor, x)

    def run() -> Any:
        request.infer()
        return keep

    return run, y


def python_path_env(env: dict[str, str]) -> dict[str, str]:
    """env for a child `python -m onnx_pools...` that imports the package this process imported and loads the
    library this process loaded: PYTHONPATH = the package's parent folder, then this process's sys.path;
    ONNX_POOLS_LIBRARY = this process's library unless env names another build already."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(onnx_pools.__file__)))
    paths = [package_root] + [os.path.abspath(p) for p in sys.path if p]
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("ONNX_POOLS_LIBRARY", onnx_pools.get_library_path())
    return env


def json_from_child(module: str, argument: Any, isa: str, what: str, timeout: float) -> Any:
    """What `python -m module <argument as JSON>` prints as JSON on its last line, run with ONNX_POOLS_ISA=isa
    (python_path_env); RuntimeError naming `what`, with the end of its stderr, when it fails."""
    r = subprocess.run(
        [sys.executable, "-m", module, json.dumps(argument)],
        env=python_path_env(dict(os.environ, ONNX_POOLS_ISA=isa)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{what}:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
