"""`python -m onnx_pools` subcommands: demo, inspect, run (the bench subcommand: tests/test_bench.py)."""

import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from helpers import graph_model, subprocess_env
from onnx_pools import cli

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"


def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _table_rows(out):
    rows = []
    for line in out.splitlines():
        if line.startswith("|") and ".onnx" in line:
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


@pytest.fixture
def no_pool_model(tmp_path):
    relu = helper.make_node("Relu", ["X"], ["Y"])
    m = graph_model([relu], [("X", TensorProto.FLOAT, [2, 3])], [("Y", TensorProto.FLOAT, [2, 3])], opsets={"": 18})
    p = tmp_path / "relu.onnx"
    onnx.save(m, str(p))
    return p


# ------------------------------------------------------------------------------------------------ demo
def _expanded(cell):
    """'a x3, b' (a run of equal entries, as the demo prints them) as [a, a, a, b]."""
    items = []
    for entry in cell.split(", "):
        item, _, count = entry.rpartition(" x")
        items += [item] * int(count) if item and count.isdigit() else [entry]
    return items


def test_demo_subprocess(tmp_path):
    """python -m onnx_pools demo, from another folder: finds the checkout's models, one row per model."""
    r = subprocess.run(
        [sys.executable, "-m", "onnx_pools", "demo", "--models", str(REPO / "models")],
        cwd=tmp_path,
        env=subprocess_env(),  # the onnx_pools under test, never an unbuilt source tree
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    rows = {row[0]: row for row in _table_rows(r.stdout)}
    assert set(rows) == {p.name for p in MODELS.glob("*.onnx")}
    for name, (_, nodes, kernel, diff, speedup, note) in rows.items():
        assert "FAILED" not in note, name
        if nodes == "none":
            continue
        # conv-fed float32 global pools go to ORT's NCHWc layout on x86 (session_options(model=...) default); every
        # float / float16 GlobalAveragePool and GlobalMaxPool of the bundled models is fed by a Conv chain
        x86 = platform.machine() in ("x86_64", "AMD64")
        conv_fed = {f"{op}({t})" for op in ("GlobalAveragePool", "GlobalMaxPool") for t in ("float", "float16")}
        expected = ["ORT" if x86 and node in conv_fed else "library" for node in _expanded(nodes)]
        assert _expanded(kernel) == expected, (name, nodes, kernel)
        stock_fails = name.endswith(("_f64.onnx", "_bf16.onnx")) or "opset22" in name
        if stock_fails:
            assert note.startswith("stock ORT cannot run: "), (name, note)
            assert len(note) < 140
        else:
            assert note == "", (name, note)
            assert float(diff) >= 0 and speedup.endswith("x")
            if name.endswith("_f32.onnx"):
                assert float(diff) < 1e-5, (name, diff)
    assert "GlobalAveragePool(float16)" in rows["cnn_gap_f16.onnx"][1]
    assert "LpPool(bfloat16)" in rows["cnn_lppool2d_bf16.onnx"][1]
    assert "no kernel for GlobalLpPool-22" in rows["globallppool_opset22_f32.onnx"][5]
    assert rows["inception_qop_uint8.onnx"][1] == "QLinearAveragePool(uint8) x9"  # nine nodes, one entry


def test_demo_models_option(tmp_path, capsys):
    (tmp_path / "m.onnx").write_bytes((MODELS / "cnn_gmp_f64.onnx").read_bytes())
    code, out, err = run_cli(capsys, "demo", "--models", tmp_path)
    assert code == 0, err
    (row,) = _table_rows(out)
    assert row[:3] == ["m.onnx", "GlobalMaxPool(double)", "library"]
    assert "stock ORT cannot run: no kernel for GlobalMaxPool-1" in row[5]


def test_demo_missing_models_dir(tmp_path, capsys):
    code, out, err = run_cli(capsys, "demo", "--models", tmp_path / "nope")
    assert code == 2 and err.startswith("error: ") and "no such directory" in err
    assert len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------------ inspect
def test_inspect_lists_nodes(capsys):
    code, out, err = run_cli(capsys, "inspect", MODELS / "cnn_lppool2d_f32.onnx")
    assert code == 0, err
    assert "pooling nodes: 1" in out
    assert "LpPool  domain=ai.onnx  opset=18  type=float  input=1x16x16x16" in out
    assert "kernel_shape=[3, 3]" in out and "strides=[2, 2]" in out and "p=2" in out
    assert "stock ORT: yes" in out and "library:   yes" in out


def test_inspect_stock_cannot(capsys):
    code, out, err = run_cli(capsys, "inspect", MODELS / "globallppool_opset22_f32.onnx")
    assert code == 0, err
    assert "GlobalLpPool  domain=ai.onnx  opset=22  type=float" in out
    assert "stock ORT: no (no kernel for GlobalLpPool-22)" in out
    assert "library:   yes" in out
    code, out, err = run_cli(capsys, "inspect", MODELS / "cnn_gap_bf16.onnx")
    assert code == 0 and "type=bfloat16" in out and "stock ORT: no (" in out


@pytest.mark.skipif(not (MODELS / "avgpool_qop_uint8.onnx").exists(), reason="quantized models not built")
def test_inspect_qlinear(capsys):
    code, out, err = run_cli(capsys, "inspect", MODELS / "avgpool_qop_uint8.onnx")
    assert code == 0, err
    assert "pooling nodes: 2" in out
    assert out.count("QLinearAveragePool  domain=com.microsoft  opset=1  type=uint8") == 2


# ------------------------------------------------------------------------------------------------ run
def test_run_random_inputs(tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", MODELS / "cnn_lppool1d_f32.onnx", "--out", tmp_path)
    assert code == 0, err
    y = np.load(tmp_path / "Y.npy")
    assert y.shape == (1, 16, 8) and y.dtype == np.float32
    assert "input X: random float32 [1, 8, 16]" in out
    assert "LpPool +1" in out and "GlobalAveragePool +0" in out


def test_run_given_input(tmp_path, capsys):
    x = np.random.default_rng(5).standard_normal((1, 8, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out, err = run_cli(
        capsys, "run", MODELS / "cnn_lppool2d_f32.onnx", "--input", f"X={tmp_path / 'x.npy'}", "--out", tmp_path / "o"
    )
    assert code == 0, err
    assert "random" not in out and "LpPool +1" in out
    y = np.load(tmp_path / "o" / "Y.npy")
    import onnxruntime as ort

    ref = ort.InferenceSession(str(MODELS / "cnn_lppool2d_f32.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"X": x}
    )[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_run_bfloat16_saves_float32(tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", MODELS / "cnn_gmp_bf16.onnx", "--out", tmp_path)
    assert code == 0, err
    y = np.load(tmp_path / "Y.npy")
    assert y.dtype == np.float32 and y.shape == (1, 16, 1, 1)
    assert "bfloat16 saved as float32" in out and "GlobalMaxPool +1" in out


def test_run_no_pooling_nodes_still_runs(tmp_path, capsys, no_pool_model):
    code, out, err = run_cli(capsys, "run", no_pool_model, "--out", tmp_path / "o")
    assert code == 3
    assert err.strip().splitlines() == [f"error: {no_pool_model}: no pooling nodes (ran it with ORT's kernels only)"]
    assert (tmp_path / "o" / "Y.npy").exists()


def test_run_bad_input_name(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 16, 16), np.float32))
    code, out, err = run_cli(capsys, "run", MODELS / "cnn_gap_f32.onnx", "--input", f"Z={tmp_path / 'x.npy'}")
    assert code == 2 and "has no input 'Z'" in err


# ------------------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("cmd", ["inspect", "run"])
def test_missing_file(tmp_path, capsys, cmd):
    code, out, err = run_cli(capsys, cmd, tmp_path / "nope.onnx")
    assert code == 2
    assert err.strip().splitlines() == [f"error: {tmp_path / 'nope.onnx'}: no such file"]


@pytest.mark.parametrize(
    "content", [b"hello, this is not a model\n", b"", bytes(range(256)) * 4], ids=["text", "empty", "binary"]
)
@pytest.mark.parametrize("cmd", ["inspect", "run"])
def test_not_onnx(tmp_path, capsys, cmd, content):
    p = tmp_path / "bad.onnx"
    p.write_bytes(content)
    code, out, err = run_cli(capsys, cmd, p)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {p}: not an ONNX model"), err


def test_inspect_no_pooling_nodes(capsys, no_pool_model):
    code, out, err = run_cli(capsys, "inspect", no_pool_model)
    assert code == 3
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {no_pool_model}: no pooling nodes")


def test_errors_subprocess(tmp_path, no_pool_model):
    """Through `python -m onnx_pools`: one line on stderr, non-zero exit, no traceback."""
    bad = tmp_path / "bad.onnx"
    bad.write_text("not onnx")
    for argv, code in [
        (["inspect", str(tmp_path / "x.onnx")], 2),
        (["run", str(bad)], 2),
        (["inspect", str(no_pool_model)], 3),
    ]:
        r = subprocess.run(
            [sys.executable, "-m", "onnx_pools", *argv],
            cwd=tmp_path,
            env=subprocess_env(),  # the onnx_pools under test, never an unbuilt source tree
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == code, (argv, r.stderr)
        assert "Traceback" not in r.stderr
        assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_no_subcommand(capsys):
    code, out, err = run_cli(capsys)
    assert code == 2 and "demo" in out and "inspect" in out
