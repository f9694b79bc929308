"""The benchmark (onnx_pools.bench): every mode run with --small in a subprocess from a folder outside the checkout,
as from an installed wheel; each must run the library's kernel (its call counter, the "kernel ran" column) and
print its table's columns. No timing is asserted."""

import importlib.util
import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import onnx_pools
from onnx_pools.bench.report import (
    HEADLINE_CASES,
    README_BEGIN,
    README_END,
    TABLES_BEGIN,
    TABLES_END,
    merge_cpu_sections,
    readme_summary,
    rewrite_readme,
    write_tables,
)


def _env():
    env = dict(os.environ)
    # the onnx_pools this process imported (installed package or a built checkout), never an unbuilt source tree
    root = os.path.dirname(os.path.dirname(os.path.abspath(onnx_pools.__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("ONNX_POOLS_ISA", None)
    return env


OPENVINO = importlib.util.find_spec("openvino") is not None


def bench(tmp_path, *argv, module="onnx_pools.bench", env=None):
    """(exit status, stdout, stderr) of the benchmark run with --small from tmp_path."""
    r = subprocess.run(
        [sys.executable, "-m", *module.split(), *map(str, argv), "--small"],
        cwd=tmp_path,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return r.returncode, r.stdout, r.stderr


def tables(out):
    """[(columns, rows of cells)] of the markdown tables in out."""
    found, lines = [], out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            split = [[c.strip() for c in row.strip().strip("|").split("|")] for row in lines[i:] if row.startswith("|")]
            rows = []
            for row in split[2:]:
                if len(row) != len(split[0]):
                    break
                rows.append(row)
            found.append((split[0], rows))
    return found


def kernel_ran_everywhere(columns, rows, column="kernel ran"):
    assert column in columns, columns
    assert rows, "the table has no rows"
    k = columns.index(column)
    return all(row[k] == "yes" for row in rows)


def test_table_with_baseline_json_markdown_and_readme(tmp_path):
    """The default table: every ISA the CPU runs, the library against itself as --baseline (the same bits), the
    JSON and markdown files, and the README summary rewritten between its markers."""
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{README_BEGIN}\nold summary\n{README_END}\nafter\n")
    page = tmp_path / "performance.md"
    page.write_text(f"# Performance\n\nmethod\n{TABLES_BEGIN}\nold tables\n{TABLES_END}\n")
    code, out, err = bench(
        tmp_path,
        *("--cases", "GlobalMaxPool f32 1x8,LpPool 3x3 s1", "--threads", "1"),
        *("--baseline", onnx_pools.get_library_path(), "--json", "b.json", "--markdown", page),
        *("--readme", readme),
    )
    assert code == 0, err
    ((columns, rows),) = tables(out)
    assert columns[:7] == ["case", "ISA", "threads", "lib ms", "stock ms", "torch ms", "openvino ms"]
    assert columns[-3:] == ["baseline ms", "speed-up vs baseline", "same bits as baseline"]
    assert kernel_ran_everywhere(columns, rows, "lib kernel ran")
    isas = {onnx_pools.active_isa(), "portable"}  # every ISA the CPU runs: at least the chosen one and portable
    assert {row[1] for row in rows} >= isas and len(rows) == 3 * len({row[1] for row in rows})
    assert {row[0] for row in rows} == {
        "GlobalMaxPool f32 1x8x8x8",  # --small: at most 8 in every dimension, batch 1
        "GlobalMaxPool f32 1x8x7x7",
        "LpPool 3x3 s1 pad1 p=2 f32 1x8x8x8",
    }
    assert all(row[-1] == "yes" and float(row[-3]) > 0 for row in rows)
    assert "read-bandwidth ceiling at 1 thread(s)" in out
    data = json.loads((tmp_path / "b.json").read_text())
    assert len(data["results"]) == len(rows)
    for r in data["results"]:  # a max is exact; LpPool's float32 rounding differs from ORT's in the last bits
        assert r["lib_kernel_ok"] and r["lib_ms"] > 0
        assert r["max_diff_vs_stock"] == 0.0 if r["op"] == "GlobalMaxPool" else r["max_diff_vs_stock"] < 1e-6
        # OpenVINO, where installed, timed in each ISA's worker and agreeing with the float64 reference
        assert (r["openvino_ms"] > 0 and not r.get("openvino_wrong")) if OPENVINO else r["openvino_ms"] is None
    md = page.read_text()
    assert md.startswith(f"# Performance\n\nmethod\n{TABLES_BEGIN}\n") and md.endswith(f"\n{TABLES_END}\n")
    assert "old tables" not in md
    assert "- CPU: " in md and "- date: " in md and f"onnx-pools {onnx_pools.__version__}" in md
    assert "- read-bandwidth ceiling at 1 thread(s): " in md and tables(md)[0][0] == columns
    # the kernel sets timed, and on x86-64 whether this CPU lacks AVX-512 (so the page has no figures for it)
    timed = md.split("- kernel sets timed: ", 1)[1].split("\n", 1)[0]
    assert set(timed.split(";")[0].split(", ")) == {row[1] for row in rows}
    if platform.machine() == "x86_64":
        assert ("not on this CPU: avx512" in timed) == ("avx512" not in {row[1] for row in rows})
    text = readme.read_text()
    assert text.startswith("# title\n\nbefore\n") and text.endswith(f"{README_END}\nafter\n")
    assert "old summary" not in text
    summary = text[text.index(README_BEGIN) : text.index(README_END)]
    ((summary_columns, summary_rows),) = tables(summary)
    assert summary_columns == ["case", "library ms", "vs stock ONNX Runtime", "vs PyTorch"]
    # the headline cases among those run, at 1 thread on the first path
    assert [row[0] for row in summary_rows] == ["GlobalMaxPool f32 1x8x8x8", "LpPool 3x3 s1 pad1 p=2 f32 1x8x8x8"]
    assert all(row[2].endswith("x") and float(row[1]) > 0 for row in summary_rows)


@pytest.mark.parametrize(
    "mode, columns",
    [
        ("--scaling", ["case", "ISA", "threads", "lib ms (1 thread)", "lib ms", "scaling"]),
        ("--spread", ["layout, shape", "ISA", "configuration", "lib ms", "vs the fastest"]),
        ("--memory", ["case", "ISA", "threads", "input MiB", "output MiB", "peak above input + output, MiB"]),
    ],
)
def test_worker_modes(tmp_path, mode, columns):
    """The modes whose library runs in worker processes (here one ISA: portable), from outside the checkout."""
    code, out, err = bench(tmp_path, mode, "--isa", "portable", "--threads", "2")
    assert code == 0, err
    ((got, rows),) = tables(out)
    assert got[: len(columns)] == columns
    assert kernel_ran_everywhere(got, rows)
    assert {row[1] for row in rows} == {"portable"}


def test_small_planes_sweep(tmp_path):
    """--small-planes: every op and float type of the sweep over a few plane sides, each ISA asked for in its own
    worker, with a summary line per ISA and thread count."""
    code, out, err = bench(tmp_path, "--small-planes", "--isa", "portable,avx2", "--threads", "1")
    assert code == 0, err
    ((columns, rows),) = tables(out)
    assert columns[:8] == [
        "case",
        "ISA",
        "threads",
        "lib ms",
        "stock ms",
        "torch ms",
        "speed-up vs stock",
        "speed-up vs torch",
    ]
    assert kernel_ran_everywhere(columns, rows)
    names = {row[0] for row in rows}
    ops = ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool p=2", "LpPool 3x3 s1 pad1 p=2")
    assert names == {f"{op} {t} 1x32x{s}x{s}" for op in ops for t in ("f32", "f16") for s in (1, 4, 7)}
    isas = sorted({row[1] for row in rows})
    assert "portable" in isas and set(isas) <= {"portable", "avx2"}
    assert all(sum(row[0] == name for row in rows) == len(isas) for name in names)
    for isa in isas:
        assert f"- {isa}, 1 thread(s): " in out and f"of {len(names)} cases slower than stock" in out


def test_whole_models_on_each_kernel_set(tmp_path):
    """--whole-models --isa: a row per model and kernel set, each set in its own process, the library's kernels
    run on each."""
    code, out, err = bench(
        tmp_path, "--whole-models", "--threads", "1", "--isa", "portable,avx2", "--models", "lpnet,resnet_gap"
    )
    assert code == 0, err
    columns, rows = tables(out)[0]
    assert kernel_ran_everywhere(columns, rows, "lib kernel ran")
    isas = {row[columns.index("ISA")] for row in rows}
    assert "portable" in isas and isas <= {"portable", "avx2"}
    assert sorted(row[0] for row in rows) == sorted(["lpnet_lppool_f32.onnx", "resnet_gap_f32.onnx"] * len(isas))
    # the control session holds stock's graph: never a library kernel (°)
    assert all(row[columns.index("stock-b vs stock")].endswith("°") for row in rows)
    # session_options(model=...) leaves the Conv-fed head to ORT's blocked layout: stock's graph node for node
    lib = columns.index("lib vs stock")
    assert [row[lib].endswith("°") for row in rows] == [row[0] == "resnet_gap_f32.onnx" for row in rows]
    assert f"{len(isas)} of these {len(isas)} ran stock's optimised graph node for node" in out


@pytest.mark.parametrize(
    "mode, columns, kernel_column",
    [
        ("--denormals", ["case", "type", "threads", "lib normal ms", "lib subnormal ms", "lib tiny ms"], None),
        ("--whole-models", ["model", "batch", "threads", "ISA", "stock ms", "stock-b ms", "lib ms"], "lib kernel ran"),
        ("--qlinear-times", ["configuration", "threads", "lib min ms", "lib median ms"], "kernel ran"),
        ("--in-cache", ["case", "ISA", "threads", "lib ms", "torch ms", "openvino ms"], "lib kernel ran"),
    ],
)
def test_in_process_modes(tmp_path, mode, columns, kernel_column):
    # one kernel set: the modes that run each set of --isa are checked on several in their own tests
    code, out, err = bench(tmp_path, mode, "--threads", "1", "--isa", "portable")
    assert code == 0, err
    got, rows = tables(out)[0]
    assert got[: len(columns)] == columns
    assert kernel_ran_everywhere(got, rows, kernel_column or "lib kernel ran")


def _library_mapped(pid, name):
    """Whether the process `pid` has a shared library whose path holds `name` mapped."""
    with open(f"/proc/{pid}/maps") as f:
        return any(name in line for line in f)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_openvino_timed_in_the_worker_beside_the_library():
    """OpenVINO runs in each ISA's worker process, in the same turns as the library, stock ORT and PyTorch; the
    worker imports openvino only for a case that asks for it. Without openvino installed, the worker sets up the
    other engines and OpenVINO has no output and no time."""
    from onnx_pools.bench.cases import Case, build_model, make_input
    from onnx_pools.bench.reference import agrees, reference
    from onnx_pools.bench.workers import start_workers, stop_all, time_interleaved, worker_setup

    case = Case("GlobalMaxPool f32", "GlobalMaxPool", "float32", (1, 16, 8, 8))
    model, x = build_model(case, case.shape), make_input(case, case.shape, np.random.default_rng(0))
    workers = start_workers(["portable"])
    try:
        (w,) = workers
        outputs, errors = worker_setup(w, model, x, [1, 2], stock=True)
        assert set(outputs) == {(e, t) for e in ("portable", "stock:portable") for t in (1, 2)} and not errors
        assert not _library_mapped(w.process.pid, "libopenvino")  # no case asked for it yet
        outputs, errors = worker_setup(w, model, x, [1, 2], stock=True, openvino=True)
        assert not errors
        runs = [("portable", t, w) for t in (1, 2)]
        samples, kernel_ok = time_interleaved(runs, case.op, 2, 0.002, 2, 0.0, workers)
        assert kernel_ok == {"portable": True}
        if not OPENVINO:
            assert ("openvino:portable", 1) not in outputs and ("openvino:portable", 1) not in samples
            return
        assert _library_mapped(w.process.pid, "libopenvino")
        ref = reference(case, x)
        for t in (1, 2):
            assert agrees(case, outputs[("openvino:portable", t)], ref)
            # each round's turn timed every engine of the worker, OpenVINO among them
            counts = {e: len(samples[(e, t)]) for e in ("portable", "stock:portable", "openvino:portable")}
            assert min(counts.values()) >= 2 * 2, counts
    finally:
        stop_all(workers)


def test_without_openvino_the_column_says_so(tmp_path):
    """--in-cache where openvino cannot be imported (a package on the path that raises ImportError): the column
    reads "-", the other engines are timed."""
    shim = tmp_path / "no_openvino" / "openvino"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('raise ImportError("openvino is not installed here")\n')
    env = _env()
    env["PYTHONPATH"] = str(shim.parent) + os.pathsep + env["PYTHONPATH"]
    code, out, err = bench(tmp_path, "--in-cache", "--threads", "1", "--isa", "portable", env=env)
    assert code == 0, err
    columns, rows = tables(out)[0]
    assert kernel_ran_everywhere(columns, rows, "lib kernel ran")
    assert {row[columns.index("openvino ms")] for row in rows} == {"-"}
    assert {row[columns.index("speed-up vs openvino")] for row in rows} == {"-"}
    if importlib.util.find_spec("torch") is not None:
        assert all(float(row[columns.index("torch ms")]) > 0 for row in rows if "bfloat16" not in row[0])


def test_in_cache_openvino_column(tmp_path):
    """--in-cache with openvino installed: OpenVINO's time in each ISA's rows, or why there is none ("fails",
    "wrong result"), never missing."""
    code, out, err = bench(tmp_path, "--in-cache", "--threads", "1", "--isa", "portable,avx2")
    assert code == 0, err
    columns, rows = tables(out)[0]
    assert kernel_ran_everywhere(columns, rows, "lib kernel ran")
    cells = [row[columns.index("openvino ms")] for row in rows]
    if not OPENVINO:
        assert set(cells) == {"-"}
        return
    assert all(c in ("fails", "wrong result") or float(c) > 0 for c in cells), cells
    f32 = [row for row in rows if " float32 " in row[0]]  # OpenVINO's CPU plugin runs every float32 global pool
    assert f32 and all(float(row[columns.index("openvino ms")]) > 0 for row in f32)


def test_routes_mode(tmp_path):
    """--routes: from onnxruntime 1.24 each row ran the library's kernel through both routes with the same output;
    below 1.24 the section says why it did not run."""
    from onnx_pools.ep import ep_route_available

    code, out, err = bench(tmp_path, "--routes", "--threads", "1")
    assert code == 0, err
    if not ep_route_available():
        assert "needs onnxruntime >= 1.24" in out
        return
    columns, rows = tables(out)[0]
    assert columns[:4] == ["case", "threads", "custom-op ms", "ep ms"]
    assert kernel_ran_everywhere(columns, rows, "kernel ran")
    assert rows and all(row[columns.index("same output")] == "yes" for row in rows)
    # the control: a node the EP does not take, in a session without and with the EP
    control_columns, control_rows = tables(out)[1]
    assert control_columns[:4] == ["model", "threads", "stock ms", "with the EP ms"]
    assert len(control_rows) == 1 and "not taken by the EP" in control_rows[0][0]
    assert float(control_rows[0][2]) > 0 and float(control_rows[0][3]) > 0


def test_qlinear_times_with_baseline(tmp_path):
    """--qlinear-times with --baseline: the other build's session in the same process, run alternately."""
    code, out, err = bench(tmp_path, "--qlinear-times", "--threads", "1", "--baseline", onnx_pools.get_library_path())
    assert code == 0, err
    columns, rows = tables(out)[0]
    assert columns[-3:] == ["baseline min ms", "baseline median ms", "baseline / lib, median of rounds"]
    assert kernel_ran_everywhere(columns, rows) and len(rows) == 24


def test_cli_bench_subcommand(tmp_path):
    """`python -m onnx_pools bench` is the same benchmark; bad arguments are usage errors (exit 2)."""
    code, out, err = bench(tmp_path, "bench", "--list", module="onnx_pools")
    assert code == 0, err
    assert "GlobalMaxPool f32 1x8x8x8" in out.splitlines()
    code, _, err = bench(tmp_path, "bench", "--cases", "NoSuchOp", module="onnx_pools")
    assert code == 2 and "no case matches" in err
    code, _, err = bench(tmp_path, "bench", "--baseline", "/no/such/lib.so", module="onnx_pools")
    assert code == 2 and "no such file" in err
    code, _, err = bench(tmp_path, "bench", "--memory", "--readme", tmp_path / "R.md", module="onnx_pools")
    assert code == 2 and "--readme" in err


def test_rewrite_readme_replaces_only_between_markers(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(f"a\n{README_BEGIN}\nx\ny\n{README_END}\nb\n")
    rewrite_readme(str(path), "new\n")
    assert path.read_text() == f"a\n{README_BEGIN}\nnew\n{README_END}\nb\n"
    rewrite_readme(str(path), "newer")
    assert path.read_text() == f"a\n{README_BEGIN}\nnewer\n{README_END}\nb\n"
    for broken in (f"a\n{README_BEGIN}\nx\n", f"{README_END}\n{README_BEGIN}\n", "no markers\n"):
        path.write_text(broken)
        with pytest.raises(ValueError):
            rewrite_readme(str(path), "s")
        assert path.read_text() == broken


def test_markdown_into_a_new_file(tmp_path):
    """--markdown naming a file without the perf-tables markers writes it whole, under a title."""
    path = tmp_path / "new.md"
    write_tables(str(path), "tables\n")
    assert path.read_text() == "# onnx-pools benchmark\n\ntables\n"
    write_tables(str(path), "others\n")
    assert path.read_text() == "# onnx-pools benchmark\n\nothers\n"


def _section(cpu, tables, flags="avx2"):
    return (
        f"- CPU: {cpu} (2 logical CPUs); flags: {flags}; caches: L2 1M\n- date: 2000-01-01\n\n### Table\n\n{tables}\n"
    )


def test_markdown_keeps_one_section_per_cpu(tmp_path):
    """--markdown into the page: a run replaces the section of its CPU (its header's whole "- CPU: " line) and
    keeps every other CPU's, in their order; a CPU not on the page yet is added after them."""
    amd, arm = _section("AMD EPYC", "amd tables"), _section("Arm", "a")
    intel = _section("Intel(R) Xeon(R) Processor", "x")
    assert merge_cpu_sections(amd, intel) == f"{amd}\n{intel}"
    both = merge_cpu_sections(amd, intel)
    intel_again = _section("Intel(R) Xeon(R) Processor", "newer")
    assert merge_cpu_sections(both, intel_again) == f"{amd}\n{intel_again}"
    assert merge_cpu_sections(merge_cpu_sections(both, arm), _section("AMD EPYC", "amd2")) == (
        f"{_section('AMD EPYC', 'amd2')}\n{intel}\n{arm}"
    )
    # a CPU of the same model name with other flags (virtual machines name several generations alike) is another CPU
    amd512 = _section("AMD EPYC", "avx512 tables", flags="avx2 avx512f")
    assert merge_cpu_sections(both, amd512) == f"{amd}\n{intel}\n{amd512}"
    assert (
        merge_cpu_sections(f"{amd}\n{amd512}", _section("AMD EPYC", "amd3"))
        == f"{_section('AMD EPYC', 'amd3')}\n{amd512}"
    )
    assert merge_cpu_sections("\n", amd) == amd  # an empty generated part
    assert merge_cpu_sections("tables of no CPU\n", amd) == amd
    page = tmp_path / "performance.md"
    page.write_text(f"# Performance\n\n{TABLES_BEGIN}\n{amd}{TABLES_END}\nend\n")
    write_tables(str(page), intel)
    write_tables(str(page), intel_again)
    assert page.read_text() == f"# Performance\n\n{TABLES_BEGIN}\n{amd}\n{intel_again}{TABLES_END}\nend\n"


def test_readme_summary_at_most_ten_rows():
    """One row per headline case measured, at 1 thread on the first path, however many rows the table has."""
    env = {"cpu": "CPU X", "onnx_pools": "0.1.0", "onnxruntime": "1.0", "torch": None, "date": "2000-01-01"}
    env["isa"] = "avx2"
    results = [
        {"case": f"{label} 1x2x3x4", "isa": isa, "threads": t, "lib_ms": 1.0, "speedup_vs_stock": 2.0}
        for label in [*HEADLINE_CASES, "other"]
        for isa in ("avx2", "portable")
        for t in (1, 2)
    ]
    ((columns, rows),) = tables(readme_summary(env, results))
    assert len(rows) == 10 and all(row[2] == "2.00x" and row[3] == "-" for row in rows)
    assert "CPU X" in readme_summary(env, results) and "2000-01-01" in readme_summary(env, results)


def test_time_alternating_takes_turns_with_one_burst_length():
    """Samples alternate, the first function of each sample rotating from `start` on, and every function's samples
    are bursts of the same number of runs, even when one function's timed warm-up run is slower (a shorter burst
    would pay the slow first run of each burst over fewer runs)."""
    import time

    from onnx_pools.bench.timing import time_alternating

    calls: list[str] = []

    def make(name, first_s):
        state = {"first": True}

        def fn():
            if state["first"]:
                state["first"] = False
                time.sleep(first_s)
            calls.append(name)

        return fn

    samples, counts = time_alternating([make("a", 0.004), make("b", 0.0)], runs=3, sample_s=0.001, start=1)
    assert [len(s) for s in samples] == [3, 3]
    assert counts[0] == counts[1] == 3 + 1  # a burst of one run each (the slower warm-up sizes both), + warm-up
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]  # warm-ups, then b first (start=1), rotating


def test_time_alternating_warms_each_burst_untimed():
    """With warm_each, each burst follows one untimed run of its own function (the --in-cache mode: the input read
    back into cache after another engine's run): every timed run comes right after a run of the same function, and
    the calls count the untimed ones."""
    from onnx_pools.bench.timing import time_alternating

    calls: list[str] = []

    def make(name):
        return lambda: calls.append(name)

    samples, counts = time_alternating([make("a"), make("b")], runs=4, warmup=0, warm_each=True)
    assert [len(s) for s in samples] == [4, 4] and counts == [8, 8]
    assert calls == ["a", "a", "b", "b", "b", "b", "a", "a", "a", "a", "b", "b", "b", "b", "a", "a"]
    _, plain = time_alternating([make("a"), make("b")], runs=4, warmup=0)
    assert plain == [4, 4]


def test_time_alternating_three_functions_each_follows_each_other_alike():
    """With three functions (a worker's library, stock ORT and PyTorch at 1 thread), each runs right after each of
    the others equally often within samples: a rotation alone would always run one after the same other."""
    from collections import Counter

    from onnx_pools.bench.timing import time_alternating

    calls: list[int] = []
    fns = [lambda k=k: calls.append(k) for k in range(3)]
    samples, counts = time_alternating(fns, runs=6, warmup=0)
    assert [len(s) for s in samples] == [6, 6, 6] and counts == [6, 6, 6]
    follows = Counter((b, a) for s in range(6) for a, b in zip(calls[3 * s : 3 * s + 2], calls[3 * s + 1 : 3 * s + 3]))
    assert sorted(follows) == [(a, b) for a in range(3) for b in range(3) if a != b]
    assert set(follows.values()) == {2}


def test_relu_cases_feed_relu_outputs():
    """The table's LpPool cases over ReLU outputs take max(x, 0): about half zeros, none negative, so that windows
    of zeros only (the trusted zero sums of the LpPool kernels) are timed on every CPU."""
    from onnx_pools.bench.cases import make_cases, make_input

    cases = [c for c in make_cases() if c.relu]
    assert [c.op for c in cases] == ["LpPool", "LpPool"]
    for c in cases:
        x = make_input(c, c.shape, np.random.default_rng(0))
        assert x.dtype == np.float32 and x.min() == 0 and 0.45 < np.mean(x == 0) < 0.55
