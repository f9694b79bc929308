"""examples/cpp from C++: a CMake project that registers the library into Ort::SessionOptions (with the
`onnx_pools.ops` config entry), runs two bundled models, checks them against stock ORT and reads the library's call
counters. Built here against the libonnxruntime.so.* of the onnxruntime wheel this Python has, and run.
Skipped with the reason when there is no C++ compiler, no cmake, or no source checkout (examples/ is not installed)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import onnx_pools
from helpers import elf_dynamic

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cpp"
MODELS = ROOT / "models"


def _cmake():
    for candidate in (shutil.which("cmake"), Path(sys.executable).parent / "cmake"):
        if candidate and Path(candidate).exists():
            return str(candidate)
    return None


def test_cpp_example_builds_and_runs(tmp_path):
    if not (EXAMPLE / "CMakeLists.txt").exists() or not MODELS.is_dir():
        pytest.skip("examples/cpp and models/ ship with the source checkout only")
    if not (shutil.which("c++") or shutil.which("g++") or os.environ.get("CXX")):
        pytest.skip("no C++ compiler (c++/g++) on PATH")
    cmake = _cmake()
    if cmake is None:
        pytest.skip("no cmake (pip install cmake)")
    library = onnx_pools.get_library_path()
    needed, _ = elf_dynamic(library)
    if any(n.startswith(("libasan", "libubsan")) for n in needed):
        pytest.skip("sanitizer build of the library: the example is checked against the release build")
    build = tmp_path / "build"
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run(
        [cmake, "-S", str(EXAMPLE), "-B", str(build), f"-DPYTHON={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if r.returncode != 0 and "cannot fetch the ONNX Runtime headers" in r.stderr:
        pytest.skip("no ONNX Runtime headers (offline, no apt mirror): " + r.stderr.strip().splitlines()[0])
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([cmake, "--build", str(build), "-j1"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(
        [str(build / "onnx_pools_example"), library, str(MODELS)], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    import onnxruntime

    assert f"onnxruntime {onnxruntime.__version__}" in r.stdout, r.stdout  # the wheel's libonnxruntime, not another
    for model, op in (("cnn_gap_f32.onnx", "GlobalAveragePool"), ("cnn_lppool2d_f32.onnx", "LpPool")):
        line = next(text for text in r.stdout.splitlines() if text.startswith(model))
        assert f"library {op} kernel runs 1," in line and line.endswith(": ok"), r.stdout
    assert r.stdout.rstrip().endswith("all ok"), r.stdout
