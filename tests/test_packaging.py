"""Packaging: what the built library links against and what the distribution declares.

Fast (default suite):
* libonnx_pools.so needs only the C runtime's system libraries (no libstdc++, no libonnxruntime) and has no RPATH;
* its glibc imports are all at versions of glibc <= 2.27 (the wheel's manylinux floor), its C++ runtime private;
* the distribution requires only onnxruntime (>= the oldest tested minor) and numpy at run time, and the
  installed onnxruntime lies in that range;
* the loader registers and runs the library with onnx, ml_dtypes and the other test-only packages hidden.

Slow, opt-in (they build the wheel and create venvs; they need the source checkout):
* ONNX_POOLS_WHEEL_CHECK=1: scripts/wheel_check.sh (wheel -> fresh venv -> the suite from a copy of tests/ + models/);
* ONNX_POOLS_ORT_MATRIX=1: scripts/ort_matrix.py for the oldest and the newest supported onnxruntime minors
  (ONNX_POOLS_ORT_MATRIX=all: every minor).
"""

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import onnx_pools
from helpers import elf_dynamic, pool_model, qlinear_model, subprocess_env

DIST = "onnx-pools"
OLDEST_ORT = (1, 21)
RUNTIME_DEPS = {"onnxruntime", "numpy"}
TESTS_DIR = Path(__file__).resolve().parent
SOURCE_ROOT = TESTS_DIR.parent if (TESTS_DIR.parent / "scripts" / "wheel_check.sh").exists() else None
# glibc's own libraries and the dynamic loader; libgcc_s is as ubiquitous (ORT's wheel needs it)
SYSTEM_LIB = re.compile(r"(libc|libm|libpthread|libdl|librt|libgcc_s)\.so\.\d+|ld-linux[-\w.]*\.so\.\d+")


# ------------------------------------------------------------------------------------------------ ELF
def test_library_needs_only_system_libraries():
    needed, _ = elf_dynamic(onnx_pools.get_library_path())
    if any(n.startswith(("libasan", "libubsan", "libtsan")) for n in needed):
        pytest.skip(f"sanitizer build (links the sanitizer runtimes by design): {needed}")
    assert needed, "no DT_NEEDED at all: not a dynamically linked shared object?"
    assert not [n for n in needed if "stdc++" in n or "onnxruntime" in n], needed
    assert all(SYSTEM_LIB.fullmatch(n) for n in needed), f"non-system libraries needed: {needed}"


def test_library_has_no_rpath():
    _, paths = elf_dynamic(onnx_pools.get_library_path())
    assert paths == [], f"RPATH/RUNPATH would point at the build machine: {paths}"


GLIBC_FLOOR = (2, 27)  # the manylinux floor (csrc/platform/glibc_floor.cc; scripts/wheel_check.sh asserts the wheel's tag)


def dynamic_symbols(path):
    """[(name, version or "", defined)] of an ELF's dynamic symbol table, read with binutils' readelf."""
    try:
        out = subprocess.run(["readelf", "--dyn-syms", "-W", str(path)], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"needs binutils' readelf: {e}")
    symbols = []
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].endswith(":") and f[0][:-1].isdigit():
            name, _, version = f[7].partition("@")
            symbols.append((name, version.lstrip("@"), f[6] != "UND"))
    return symbols


def test_library_glibc_floor_and_private_runtime():
    """Every glibc symbol the library imports is at a version of glibc <= 2.27 (the manylinux_2_27 tag: a toolchain
    on a newer glibc would otherwise leave e.g. arc4random@GLIBC_2.36 in it), and the statically linked C++ runtime
    stays private: no __cxa_* / __gxx_personality_v0 exported (another libstdc++ in the process would bind to them)."""
    path = onnx_pools.get_library_path()
    needed, _ = elf_dynamic(path)
    if any(n.startswith(("libasan", "libubsan", "libtsan")) for n in needed):
        pytest.skip(f"sanitizer build (links the C++ runtime dynamically): {needed}")
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not a glibc system")
    symbols = dynamic_symbols(path)
    glibc = [(n, v) for n, v, defined in symbols if not defined and v.startswith("GLIBC_")]
    assert glibc, symbols[:20]
    too_new = sorted(f"{n}@{v}" for n, v in glibc if tuple(map(int, v[6:].split(".")))[:2] > GLIBC_FLOOR)
    assert not too_new, f"imports newer than glibc {GLIBC_FLOOR}: {too_new} (see csrc/platform/glibc_floor.cc)"
    exported = {n for n, _, defined in symbols if defined}
    assert "RegisterCustomOps" in exported, sorted(exported)[:20]
    leaked = sorted(n for n in exported if n.startswith(("__cxa_", "__gxx_", "_ZNSt6locale", "_ZSt4cout")))
    assert not leaked, f"the static C++ runtime is exported: {leaked[:10]}"


def test_elf_reader_on_a_known_library():
    """The reader itself, on Python's own ctypes extension (which needs libc at least)."""
    import _ctypes

    needed, _ = elf_dynamic(_ctypes.__file__) if _ctypes.__file__.endswith(".so") else ([], [])
    if not needed:
        pytest.skip("_ctypes is built into this interpreter")
    assert any(n.startswith("libc.so") for n in needed), needed


# ------------------------------------------------------------------------------------------------ metadata
def _installed_distribution():
    """The distribution the imported onnx_pools belongs to, or None when it is imported from a source tree."""
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.read_text("RECORD") is None:  # an .egg-info a build left in the source tree, not an installation
        return None
    init = Path(onnx_pools.__file__).resolve()
    files = [Path(dist.locate_file(f)).resolve() for f in (dist.files or [])]
    return dist if init in files else None


def _requirements():
    """[(name, specifier, marker)] the package declares: installed metadata, else the checkout's pyproject.toml."""
    dist = _installed_distribution()
    if dist is not None:
        reqs = dist.requires or []
    else:
        pyproject = Path(onnx_pools.__file__).resolve().parent.parent / "pyproject.toml"
        if not pyproject.exists():
            pytest.skip("onnx_pools is neither an installed distribution nor in a source checkout")
        tomllib = pytest.importorskip("tomllib")
        project = tomllib.loads(pyproject.read_text())["project"]
        reqs = list(project["dependencies"])
        for extra, deps in project.get("optional-dependencies", {}).items():
            reqs += [f'{d}; extra == "{extra}"' for d in deps]
    out = []
    for r in reqs:
        req, _, marker = r.partition(";")
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*\(?([^)]*)\)?\s*", req)
        assert m, r
        out.append((m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", ""), marker.strip()))
    return out


def test_runtime_requirements_are_onnxruntime_and_numpy():
    runtime = {name: spec for name, spec, marker in _requirements() if "extra" not in marker}
    assert set(runtime) == RUNTIME_DEPS, runtime
    lower = re.fullmatch(r">=(\d+)\.(\d+)(?:\.\d+)?", runtime["onnxruntime"])
    assert lower, f"onnxruntime requirement should be a lower bound, got {runtime['onnxruntime']!r}"
    assert (int(lower.group(1)), int(lower.group(2))) == OLDEST_ORT


def test_test_extra_has_the_test_dependencies():
    test = {name for name, _, marker in _requirements() if re.search(r"extra\s*==\s*['\"]test['\"]", marker)}
    assert {"pytest", "onnx", "ml-dtypes", "hypothesis", "onnxruntime-extensions"} <= test, test


def test_installed_distribution_ships_the_library():
    dist = _installed_distribution()
    if dist is None:
        pytest.skip("onnx_pools imported from a source tree, not an installed distribution")
    assert dist.version == onnx_pools.__version__
    names = [str(f) for f in dist.files or []]
    assert "onnx_pools/libonnx_pools.so" in names, names
    assert any(ep.name == "onnx-pools" for ep in dist.entry_points)


def test_installed_onnxruntime_in_supported_range():
    have = tuple(int(p) for p in re.findall(r"\d+", ort.__version__)[:2])
    assert have >= OLDEST_ORT, f"onnxruntime {ort.__version__} is older than the supported {OLDEST_ORT}"


# ------------------------------------------------------------------------------------------------ runtime deps
HIDE = ["onnx", "ml_dtypes", "onnxruntime_extensions", "hypothesis", "pytest", "torch"]
# Child processes start with these packages made unimportable, then use the loader; argv[1] is a model path.
PRELUDE = textwrap.dedent("""
    import importlib.abc, sys
    HIDE = {hide!r}

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDE:
                raise ImportError(name + " is hidden: not a runtime dependency")

    sys.meta_path.insert(0, Hide())
    import numpy as np, onnxruntime as ort, onnx_pools
""").format(hide=set(HIDE))
EPILOGUE = textwrap.dedent("""
    assert not {m.split(".")[0] for m in sys.modules} & HIDE
    print("ok")
""")
GAP_CHILD = (
    PRELUDE
    + textwrap.dedent("""
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    for kwargs in eval(sys.argv[2]):
        so = onnx_pools.session_options(**kwargs)
        before = onnx_pools.call_counts()["GlobalAveragePool"]
        y, = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"]).run(None, {"X": x})
        assert np.allclose(y, x.mean(axis=(2, 3), keepdims=True)), (kwargs, y)
        assert onnx_pools.call_counts()["GlobalAveragePool"] == before + 1, (kwargs, onnx_pools.call_counts())
    assert onnx_pools.active_isa() and onnx_pools.OPS
""")
    + EPILOGUE
)
QLINEAR_CHILD = (
    PRELUDE
    + textwrap.dedent("""
    x = np.arange(2 * 3 * 4 * 4, dtype=np.uint8).reshape(2, 3, 4, 4)
    for src in (sys.argv[1], open(sys.argv[1], "rb").read()):  # a path, then bytes
        so = onnx_pools.session_options(model=src)  # the model imports com.microsoft: QLinearAveragePool is taken
        before = onnx_pools.call_counts()["QLinearAveragePool"]
        ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"]).run(None, {"X": x})
        assert onnx_pools.call_counts()["QLinearAveragePool"] == before + 1, onnx_pools.call_counts()
""")
    + EPILOGUE
)


def _child(tmp_path, code, model, *args):
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    env = subprocess_env(drop=["ONNX_POOLS_ISA"])
    r = subprocess.run(
        [sys.executable, "-c", code, str(path), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def _gap_f64():  # double: no stock ORT kernel, so only the library can run it
    return pool_model("GlobalAveragePool", 13, "float64", [2, 3, 4, 5])


def test_loader_runs_with_only_onnxruntime_and_numpy(tmp_path):
    """The loader (get_library_path, session_options, call counters) with onnx, ml_dtypes, pytest... unimportable."""
    # ops="all" with the model (read without onnx): every op the model allows
    _child(
        tmp_path, GAP_CHILD, _gap_f64(), "[{}, {'ops': 'all', 'model': sys.argv[1]}, {'ops': ['GlobalAveragePool']}]"
    )


def _qlinear_model():
    """com.microsoft.QLinearAveragePool with all five inputs (an omitted optional input crashes ORT < 1.24: see
    test_extensions.py and the ORT compatibility notes)."""
    model, _ = qlinear_model(np.uint8, [2, 3, 4, 4], {"kernel_shape": [2, 2]}, 0.5, 2, 0.25, 1)
    return model


def test_session_options_model_argument_without_onnx(tmp_path):
    """session_options(model=path or bytes) works without onnx: a float model, and a com.microsoft model whose
    QLinearAveragePool it then takes."""
    _child(tmp_path, GAP_CHILD, _gap_f64(), "[{'model': sys.argv[1]}]")
    _child(tmp_path, QLINEAR_CHILD, _qlinear_model())


# ------------------------------------------------------------------------------------------------ slow, opt-in
def _needs_checkout(script):
    if SOURCE_ROOT is None:
        pytest.skip(f"needs the source checkout ({script})")
    return SOURCE_ROOT


def _scrubbed_env():
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("ONNX_POOLS_WHEEL_CHECK", "ONNX_POOLS_ORT_MATRIX", "PYTHONPATH", "ONNX_POOLS_LIBRARY")
    }


@pytest.mark.skipif(not os.environ.get("ONNX_POOLS_WHEEL_CHECK"), reason="slow: set ONNX_POOLS_WHEEL_CHECK=1")
def test_wheel_check_script():
    root = _needs_checkout("scripts/wheel_check.sh")
    r = subprocess.run(
        ["bash", str(root / "scripts" / "wheel_check.sh")],
        cwd=root,
        env=_scrubbed_env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    assert "wheel check: OK" in r.stdout


@pytest.mark.skipif(not os.environ.get("ONNX_POOLS_ORT_MATRIX"), reason="slow: set ONNX_POOLS_ORT_MATRIX=1 (or =all)")
def test_ort_matrix(tmp_path):
    root = _needs_checkout("scripts/ort_matrix.py")
    script = str(root / "scripts" / "ort_matrix.py")
    versions = subprocess.run(
        [sys.executable, script, "--list"], capture_output=True, text=True, check=True, timeout=300
    ).stdout.split()
    assert versions and versions[0].startswith("1.21."), versions
    if os.environ["ONNX_POOLS_ORT_MATRIX"] != "all":
        versions = sorted({versions[0], versions[-1]})
    r = subprocess.run(
        [sys.executable, script, "--out", str(tmp_path), *versions],
        cwd=root,
        env=_scrubbed_env(),
        capture_output=True,
        text=True,
        timeout=600 * len(versions),
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    for v in versions:
        assert re.search(rf"^\| {re.escape(v)} \| pass \| [1-9]\d* \| 0 \|", r.stdout, re.M), r.stdout
