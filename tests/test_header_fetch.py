"""cmake/fetch_ort_headers.sh without the internet: how it finds apt mirrors (deb822 and one-line sources, Debian and
Ubuntu URIs), what it asks each mirror for (a local HTTP server records the requests and serves what a test gives
it), the fall-back to Debian's archive, and that every failure says how to point the build at headers instead
(ONNXRUNTIME_INCLUDE_DIR). The real download and its sha256 checks run in every build (and scripts/ort_matrix.py
--headers 1.21,1.23)."""

import http.server
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "cmake" / "fetch_ort_headers.sh"
PINNED_121 = "libonnxruntime-dev_1.21.0+dfsg-1"
HEADER_IN_DEB = "usr/include/onnxruntime/onnxruntime_c_api.h"
pytestmark = pytest.mark.skipif(
    not SCRIPT.exists() or shutil.which("bash") is None,
    reason="cmake/fetch_ort_headers.sh ships with the source checkout only",
)


def fetch(tmp_path, apt_etc, *args, debian_mirror=""):
    env = dict(os.environ, ONNX_POOLS_APT_ETC=str(apt_etc), ONNX_POOLS_DEBIAN_MIRROR=debian_mirror)
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(proxy, None)  # the fake mirror is local
    return subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "dest"), *args], capture_output=True, text=True, env=env, timeout=120
    )


def deb_arch():
    r = (
        subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True)
        if shutil.which("dpkg")
        else None
    )
    if r is not None and r.returncode == 0:
        return r.stdout.strip()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


@pytest.fixture
def mirror():
    """A local HTTP server: `files` maps URL paths to bytes (others are 404), `requests` lists the paths asked for."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            server.requests.append(self.path)
            body = server.files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.files, server.requests = {}, []
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def make_deb(tmp_path, headers_dir):
    """A .deb holding headers_dir as usr/include/onnxruntime (what a mirror's own build of the package holds)."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("needs dpkg-deb to build a .deb")
    pkg = tmp_path / "pkg"
    shutil.copytree(headers_dir, pkg / "usr" / "include" / "onnxruntime")
    (pkg / "DEBIAN").mkdir()
    (pkg / "DEBIAN" / "control").write_text(
        f"Package: libonnxruntime-dev\nVersion: 1.21.0+dfsg-1\nArchitecture: {deb_arch()}\n"
        "Maintainer: test <test@example.invalid>\nDescription: test package\n"
    )
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(pkg), str(tmp_path / "x.deb")],
        check=True,
        capture_output=True,
    )
    return (tmp_path / "x.deb").read_bytes()


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


def test_ubuntu_and_debian_sources_order_and_fallback(tmp_path, mirror):
    """One-line Ubuntu entries (`deb URI suite components`, with and without options) and deb822 stanzas are read
    in order; deb-src and disabled stanzas are not; every mirror is asked for the pinned file in main, then
    universe (Ubuntu's component), Debian's archive last; none has it, so the build is told to set the variable."""
    u = mirror.url
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list").write_text(
        f"deb {u}/ubuntu jammy main restricted\n"
        f"deb-src {u}/src jammy main\n"
        f"# deb {u}/commented jammy main\n"
        f"deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] {u}/ubuntu/ jammy-updates main universe\n"
    )
    (etc / "sources.list.d" / "ubuntu.sources").write_text(
        f"Types: deb\nURIs: {u}/ubuntu-ports\nSuites: noble noble-updates\nComponents: main universe\n\n"
        f"Types: deb-src\nURIs: {u}/src822\nSuites: noble\nComponents: main\n\n"
        f"types: deb\nuris: {u}/disabled\nsuites: noble\ncomponents: main\nEnabled: no\n"
    )
    r = fetch(tmp_path, etc, debian_mirror=f"{u}/debian")
    assert r.returncode == 1, r.stderr
    file = f"{PINNED_121}_{deb_arch()}.deb"
    asked = [(m, c) for m in ("/ubuntu-ports", "/ubuntu", "/debian") for c in ("main", "universe")]
    assert mirror.requests == [f"{m}/pool/{c}/o/onnxruntime/{file}" for m, c in asked], mirror.requests
    assert file in r.stderr and "ONNXRUNTIME_INCLUDE_DIR=" in r.stderr, r.stderr
    assert f"{u}/ubuntu" in r.stderr and f"{u}/debian" in r.stderr, r.stderr
    assert not (tmp_path / "dest" / "usr").exists()


def test_only_the_debian_archive(tmp_path, mirror):
    """No apt sources at all (a container without apt): Debian's archive alone is asked."""
    r = fetch(tmp_path, tmp_path / "no-apt", "1.23", debian_mirror=mirror.url + "/debian/")
    assert r.returncode == 1 and "ONNXRUNTIME_INCLUDE_DIR=" in r.stderr, r.stderr
    assert [p.rsplit("/", 1)[1] for p in mirror.requests] == [
        f"libonnxruntime-dev_1.23.2+dfsg-6.1_{deb_arch()}.deb"
    ] * 2
    assert mirror.requests[0].startswith("/debian/pool/main/"), mirror.requests


def test_package_with_other_headers_is_refused(tmp_path, mirror):
    """A mirror's package of the pinned name whose headers are not the pinned ones: refused, nothing written."""
    fake = tmp_path / "fake-headers"
    fake.mkdir()
    (fake / "onnxruntime_c_api.h").write_text("#define ORT_API_VERSION 21\n")
    mirror.files[f"/ubuntu/pool/universe/o/onnxruntime/{PINNED_121}_{deb_arch()}.deb"] = make_deb(tmp_path, fake)
    etc = tmp_path / "apt"
    etc.mkdir()
    (etc / "sources.list").write_text(f"deb {mirror.url}/ubuntu jammy main universe\n")
    r = fetch(tmp_path, etc)
    assert r.returncode == 1, r.stderr
    assert "do not match the pinned sha256" in r.stderr and "ONNXRUNTIME_INCLUDE_DIR=" in r.stderr, r.stderr
    assert not (tmp_path / "dest" / "usr").exists()


def test_ubuntu_rebuild_of_the_pinned_version_is_accepted(tmp_path, mirror):
    """An Ubuntu mirror's own build of 1.21.0+dfsg-1 (another .deb, the same headers) is accepted by the headers'
    pinned sha256. Needs the real 1.21 headers from an earlier build of this checkout (build/.../ort-headers-1.21)."""
    # where `cmake -B build[/x]` and `pip install .` (build/temp.*/cmake) put them
    found = sorted(
        p for depth in ("", "*/", "*/*/") for p in ROOT.glob(f"build/{depth}ort-headers-1.21/{HEADER_IN_DEB}")
    )
    if not found:
        pytest.skip("no fetched 1.21 headers in build/ (build the library in this checkout first)")
    mirror.files[f"/ubuntu/pool/universe/o/onnxruntime/{PINNED_121}_{deb_arch()}.deb"] = make_deb(
        tmp_path, found[0].parent
    )
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list.d" / "ubuntu.sources").write_text(
        f"Types: deb\nURIs: {mirror.url}/ubuntu\nSuites: jammy\nComponents: main universe\n"
    )
    r = fetch(tmp_path, etc, "1.21")
    assert r.returncode == 0, r.stderr
    assert "a build other than Debian's" in r.stderr, r.stderr
    header = tmp_path / "dest" / "usr" / "include" / "onnxruntime" / "onnxruntime_c_api.h"
    assert header.read_bytes() == found[0].read_bytes()
    assert mirror.requests[-1].startswith("/ubuntu/pool/universe/"), mirror.requests
