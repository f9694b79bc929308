"""examples/ray_batch_inference.py: a bundled classifier over a dataset with Ray Data map_batches on a local Ray
cluster of 2 worker processes, each registering the library itself; the script checks the outputs against stock ORT
and that each worker's session runs ran the library's LpPool kernel. Here: its report, and that every session run
ran that kernel once per LpPool node of the model (counted with onnx). Runs when ray is installed (`pip install
'onnx-pools[ray]'`; CI installs it), skipped otherwise; needs the source checkout (examples/ is not installed)."""

import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "ray_batch_inference.py"
MODEL = ROOT / "models" / "lpnet_lppool_f32.onnx"


def test_ray_batch_inference(tmp_path):
    pytest.importorskip("ray.data", reason="ray is not installed (optional: pip install 'onnx-pools[ray]')")
    if not EXAMPLE.exists():
        pytest.skip("examples/ ships with the source checkout only")
    import onnx_pools
    from helpers import elf_dynamic

    if any(n.startswith(("libasan", "libubsan")) for n in elf_dynamic(onnx_pools.get_library_path())[0]):
        pytest.skip("sanitizer build of the library: Ray's worker processes are not run under the sanitizer runtime")
    lppool_nodes = sum(node.op_type == "LpPool" for node in onnx.load(str(MODEL)).graph.node)
    assert lppool_nodes == 2
    r = subprocess.run(
        [sys.executable, str(EXAMPLE), "--rows", "32", "--workers", "2", "--model", str(MODEL), "--op", "LpPool"],
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
    rows = 0
    for line in workers:  # "worker pid P: R rows in S session runs, library LpPool kernel runs per session run: K"
        m = re.fullmatch(
            r"worker pid \d+: (\d+) rows in (\d+) session runs, library LpPool kernel runs per "
            r"session run: (\d+)",
            line,
        )
        assert m, line
        rows += int(m[1])
        assert 1 <= int(m[2]) <= int(m[1]), line  # whole batches per run (the model's batch dimension is N)
        assert int(m[3]) == lppool_nodes, line
    assert rows == 32, r.stdout
