"""cmake/fetch_ort_headers.sh without a network: how it finds apt mirrors (deb822 and one-line sources, Debian and
Ubuntu URIs) and that every failure says how to point the build at headers instead (ONNXRUNTIME_INCLUDE_DIR).
The real download and its sha256 checks run in every build (and scripts/ort_matrix.py --headers 1.21,1.23)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "cmake" / "fetch_ort_headers.sh"
pytestmark = pytest.mark.skipif(
    not SCRIPT.exists() or shutil.which("bash") is None,
    reason="cmake/fetch_ort_headers.sh ships with the source checkout only",
)


def fetch(tmp_path, apt_etc, *args):
    env = dict(os.environ, ONNX_POOLS_APT_ETC=str(apt_etc))
    return subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "dest"), *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_no_mirror_names_the_variable(tmp_path):
    r = fetch(tmp_path, tmp_path / "no-apt")
    assert r.returncode == 1
    assert "no http(s) apt mirror" in r.stderr and "ONNXRUNTIME_INCLUDE_DIR=" in r.stderr, r.stderr
    assert not (tmp_path / "dest" / "usr").exists()


def test_unknown_header_choice(tmp_path):
    r = fetch(tmp_path, tmp_path, "1.9")
    assert r.returncode == 1 and "unknown ONNX Runtime header choice '1.9'" in r.stderr, r.stderr


def test_mirrors_from_both_source_formats_are_tried(tmp_path):
    """Ubuntu (one-line, with options) and Debian (deb822) URIs are read; unreachable ones (a closed local port)
    fail with the package file name, the mirrors tried and the variable to set."""
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list").write_text("# comment\ndeb [arch=amd64] http://127.0.0.1:9/ubuntu noble main universe\n")
    (etc / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://127.0.0.1:9/debian\nSuites: trixie\nComponents: main\n"
    )
    r = fetch(tmp_path, etc, "1.23")
    assert r.returncode == 1, r.stderr
    assert "libonnxruntime-dev_1.23.2+dfsg-6.1_" in r.stderr, r.stderr
    assert "http://127.0.0.1:9/ubuntu" in r.stderr and "http://127.0.0.1:9/debian" in r.stderr, r.stderr
    assert "ONNXRUNTIME_INCLUDE_DIR=" in r.stderr, r.stderr
