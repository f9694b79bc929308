"""examples/ray_batch_inference.py: a bundled model over a dataset with Ray Data map_batches on a local Ray cluster
of 2 worker processes, each registering the library itself; the script checks the outputs against stock ORT and each
worker's library call counter against the rows it ran. Runs when ray is installed (`pip install 'onnx-pools[ray]'`),
skipped otherwise; needs the source checkout (examples/ is not installed)."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ray_batch_inference.py"


def test_ray_batch_inference(tmp_path):
    pytest.importorskip("ray.data", reason="ray is not installed (optional: pip install 'onnx-pools[ray]')")
    if not EXAMPLE.exists():
        pytest.skip("examples/ ships with the source checkout only")
    import onnx_pools
    from helpers import elf_dynamic

    if any(n.startswith(("libasan", "libubsan")) for n in elf_dynamic(onnx_pools.get_library_path())[0]):
        pytest.skip("sanitizer build of the library: Ray's worker processes are not run under the sanitizer runtime")
    r = subprocess.run(
        [sys.executable, str(EXAMPLE), "--rows", "32", "--workers", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    lines = r.stdout.splitlines()
    assert lines[-1] == "ok", r.stdout
    assert "32 rows, 2 worker process(es) of 2" in r.stdout, r.stdout
    workers = [line for line in lines if line.startswith("worker pid ")]
    assert len(workers) == 2, r.stdout
    for line in workers:  # "worker pid P: N rows, library GlobalAveragePool kernel runs N"
        rows = int(line.split(": ")[1].split()[0])
        assert line.endswith(f"kernel runs {rows}"), line
