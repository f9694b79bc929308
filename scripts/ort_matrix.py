#!/usr/bin/env python3
"""ONNX Runtime compatibility matrix: the test suite against each onnxruntime minor release, one built library.

Builds this checkout's wheel once (`pip wheel . --no-deps`), then for each onnxruntime minor release from 1.21 to the
newest on the package index (the latest patch of each minor): a throw-away venv with that onnxruntime, the wheel's
`test` extra and the wheel itself (the same libonnx_pools.so every time: its sha256 is checked in each venv), and
the test suite run from a copy of tests/ + models/ outside the source tree. Prints a markdown table.

    python3 scripts/ort_matrix.py                    # every minor from 1.21 to the newest
    python3 scripts/ort_matrix.py 1.21 1.31.1        # given minors (latest patch) or exact versions
    python3 scripts/ort_matrix.py --ends             # the oldest and the newest minor (the matrix test)
    python3 scripts/ort_matrix.py --oldest           # the oldest minor only (CI: its test step runs the newest)
    python3 scripts/ort_matrix.py --oldest --no-isa-reruns --no-bench-tests   # (CI) less the per-ISA kernel reruns
                                                     # and the benchmark's modes (the test step runs both)
    python3 scripts/ort_matrix.py --ends --ep-floor  # and 1.24, the first minor with the plugin EP
    python3 scripts/ort_matrix.py --wheel dist/onnx_pools-*.whl --out DIR --keep -- -x   # args after -- go to pytest
    python3 scripts/ort_matrix.py --headers 1.21,1.23 1.21 1.32   # one wheel per header version, each against
                                                                   # the oldest and the newest onnxruntime

--headers builds one wheel per Debian libonnxruntime-dev header version (ONNX_POOLS_ORT_HEADERS=1.21|1.23, see
cmake/OrtHeaders.cmake; `found`: whatever the build finds), and runs every version against each.

Logs, results.json and table.md go to --out (default build/ort-matrix). Exit status 1 when any version failed.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLDEST = (1, 21)
PACKAGE = "onnxruntime"
# variables that would point the tests at something other than the installed wheel, or re-enter slow checks
SCRUB_ENV = (
    "PYTHONPATH",
    "ONNX_POOLS_LIBRARY",
    "ONNX_POOLS_ISA",
    "ONNX_POOLS_WHEEL_CHECK",
    "ONNX_POOLS_ORT_MATRIX",
    "PYTHONHOME",
    "VIRTUAL_ENV",
)


# pytest plugin for the re-run after a crash: every test in a forked child, so a test that kills its process is
# reported as failed ("CRASHED ...") and the others still run. Written next to the suite copy, loaded with -p.
FORK_PLUGIN = """
import os, pickle, signal
import pytest
from _pytest.reports import TestReport
from _pytest.runner import runtestprotocol


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    hook, config = item.ihook, item.config
    hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: set up (every fixture, as nothing is set up in the parent), run, tear down
        os.close(rfd)
        try:
            reports = runtestprotocol(item, log=False, nextitem=None)
            blob = pickle.dumps([config.hook.pytest_report_to_serializable(config=config, report=r) for r in reports])
        except BaseException:
            blob = b""
        with os.fdopen(wfd, "wb") as f:
            f.write(blob)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        blob = f.read()
    _, status = os.waitpid(pid, 0)
    if blob and os.WIFEXITED(status):
        reports = [config.hook.pytest_report_from_serializable(config=config, data=d) for d in pickle.loads(blob)]
    else:
        how = (f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        reports = [TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed",
                              f"CRASHED: the test process died with {how}", "call")]
    for r in reports:
        hook.pytest_runtest_logreport(report=r)
    hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
"""


def log(msg):
    print(f"[ort-matrix] {msg}", flush=True)


def vtuple(v):
    return tuple(int(p) for p in v.split("."))


def available_versions(python):
    """Final releases of onnxruntime on the configured index that have a wheel for this Python, newest first."""
    r = subprocess.run([python, "-m", "pip", "index", "versions", PACKAGE], capture_output=True, text=True)
    m = re.search(r"Available versions:\s*(.+)", r.stdout)
    if not m:  # fallback: pip's "from versions: ..." in the error for a version that cannot exist
        r = subprocess.run(
            [python, "-m", "pip", "download", "--no-deps", "-d", tempfile.gettempdir(), f"{PACKAGE}==0.0.0.0"],
            capture_output=True,
            text=True,
        )
        m = re.search(r"from versions:\s*([^)]+)\)", r.stderr)
    if not m:
        sys.exit(f"ort-matrix: cannot list {PACKAGE} versions:\n{r.stdout}{r.stderr}")
    versions = [v.strip() for v in m.group(1).split(",")]
    return sorted((v for v in versions if re.fullmatch(r"\d+\.\d+\.\d+", v)), key=vtuple, reverse=True)


def select(wanted, versions):
    """Latest patch of every minor >= 1.21 (or of each minor named in `wanted`; exact versions pass through)."""
    latest = {}
    for v in versions:  # newest first
        latest.setdefault(vtuple(v)[:2], v)
    if not wanted:
        return [latest[k] for k in sorted(latest) if k >= OLDEST]
    out = []
    for w in wanted:
        if w.count(".") == 2:
            if w not in versions:
                sys.exit(f"ort-matrix: {PACKAGE} {w} is not available")
            out.append(w)
        elif vtuple(w) in latest:
            out.append(latest[vtuple(w)])
        else:
            sys.exit(f"ort-matrix: no {PACKAGE} {w}.x available")
    return out


def build_wheel(python, dest, headers="found"):
    """The wheel of this checkout, built against the headers the build finds, or the pinned Debian ones."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("onnx_pools-*.whl"):
        old.unlink()
    env = dict(os.environ)
    if headers != "found":
        env.pop("ONNXRUNTIME_INCLUDE_DIR", None)
        env["ONNX_POOLS_ORT_HEADERS"] = headers
    log(f"building the wheel of {ROOT} (ONNX Runtime headers: {headers}) ...")
    subprocess.run([python, "-m", "pip", "wheel", "-q", str(ROOT), "--no-deps", "-w", str(dest)], check=True, env=env)
    (wheel,) = dest.glob("onnx_pools-*.whl")
    return wheel


def wheel_library_sha(wheel):
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith("libonnx_pools.so")]
        return hashlib.sha256(z.read(name)).hexdigest()


def counts(junit):
    s = ET.parse(junit).getroot()
    s = s if s.tag == "testsuite" else s.find("testsuite")
    total, failures, errors, skipped = (int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    failed, crashed, skipped_tests, passed_tests = [], 0, [], []
    for c in s.iter("testcase"):
        name = f"{c.get('classname')}::{c.get('name')}"
        bad = c.find("failure") if c.find("failure") is not None else c.find("error")
        if bad is not None:
            failed.append(name)
            crashed += "CRASHED" in (bad.get("message") or "") + (bad.text or "")
        elif c.find("skipped") is not None:
            skipped_tests.append(name)
        else:
            passed_tests.append(name)
    return dict(
        passed=total - failures - errors - skipped,
        failed=failures + errors,
        skipped=skipped,
        crashed=crashed,
        failed_tests=failed,
        skipped_tests=skipped_tests,
        passed_tests=passed_tests,
    )


# The plugin-EP tests, and the one among them that checks the EP route's refusal below EP_FROM.
EP_TESTS = "test_plugin_ep"
EP_REFUSAL_TEST = "test_ep_route_refused_below_1_24"
EP_FROM = (1, 24)
# examples/cpp, built against and run with each onnxruntime
CPP_EXAMPLE_TEST = "test_cpp_example_builds_and_runs"


def ep_tests_problem(version, c):
    """Why the plugin-EP tests or the C++ example did not run as they must on this onnxruntime ("" when they did):
    the example passes; every EP test runs from EP_FROM on (none skipped), and below it the refusal test runs."""
    if not any(CPP_EXAMPLE_TEST in t for t in c["passed_tests"]):
        return f"{CPP_EXAMPLE_TEST} did not pass"
    ep_passed = [t for t in c["passed_tests"] if EP_TESTS in t]
    if vtuple(version)[:2] >= EP_FROM:
        skipped = [t for t in c["skipped_tests"] if EP_TESTS in t and EP_REFUSAL_TEST not in t]
        if skipped:
            return f"plugin-EP tests skipped on onnxruntime >= 1.24: {', '.join(skipped[:3])}"
        if not any(EP_REFUSAL_TEST not in t for t in ep_passed):
            return "no plugin-EP test ran on onnxruntime >= 1.24"
    elif not any(EP_REFUSAL_TEST in t for t in ep_passed):
        return f"{EP_REFUSAL_TEST} did not run below onnxruntime 1.24"
    return ""


def run_version(version, args, wheel, lib_sha, suite, out, headers="found"):
    row = dict(
        headers=headers, version=version, result="FAIL", passed=0, failed=0, crashed=0, skipped=0, seconds=0.0, note=""
    )
    logf = out / (f"ort-{version}.log" if headers == "found" else f"headers-{headers}-ort-{version}.log")
    env = {k: v for k, v in os.environ.items() if k not in SCRUB_ENV}
    venv = Path(tempfile.mkdtemp(prefix=f"ort-{version}-", dir=args.work))
    t0 = time.monotonic()
    with open(logf, "w") as lf:

        def sh(cmd, **kw):
            lf.write(f"$ {' '.join(map(str, cmd))}\n")
            lf.flush()
            return subprocess.run([str(c) for c in cmd], stdout=lf, stderr=subprocess.STDOUT, env=env, **kw)

        try:
            py = venv / "bin" / "python"
            if sh([args.python, "-m", "venv", venv]).returncode:
                row["note"] = "venv creation failed"
                return row
            if sh(
                [
                    py,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    f"{PACKAGE}=={version}",
                    f"{wheel}[test]",
                ]
            ).returncode:
                row["note"] = "install failed (see log)"
                return row
            probe = (
                "import hashlib, onnxruntime, onnx_pools; p = onnx_pools.get_library_path(); "
                "print(onnxruntime.__version__, hashlib.sha256(open(p, 'rb').read()).hexdigest(), p)"
            )
            r = subprocess.run([py, "-c", probe], capture_output=True, text=True, env=env, cwd=suite)
            lf.write(r.stdout + r.stderr)
            got = r.stdout.split()
            if r.returncode or got[:2] != [version, lib_sha] or not got[2].startswith(str(venv)):
                row["note"] = f"wrong onnxruntime or library in the venv: {r.stdout.strip()} {r.stderr.strip()[-300:]}"
                return row
            junit = venv / "junit.xml"
            cmd = [
                py,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={junit}",
                "tests",
                *(["-m", "not isa_rerun"] if args.no_isa_reruns else []),
                *(["-k", "not test_bench.py or test_cli_bench_subcommand"] if args.no_bench_tests else []),
                *args.pytest_args,
            ]
            r = sh(cmd, cwd=suite)
            if r.returncode < 0 or not junit.exists():  # the process died: again, one forked child per test
                lf.write(f"\n*** pytest died ({r.returncode}); re-running with every test in its own process ***\n")
                junit.unlink(missing_ok=True)
                r = sh(cmd[:3] + ["-p", "_ort_matrix_forked"] + cmd[3:], cwd=suite)
                row["note"] = "a test crashed the process: re-run with one process per test"
            if not junit.exists():
                row["note"] = f"pytest exited {r.returncode} without results (see log)"
                return row
            c = counts(junit)
            row.update({k: c[k] for k in ("passed", "failed", "skipped", "crashed")})
            row["failed_tests"] = c["failed_tests"]
            row["result"] = "pass" if r.returncode == 0 and c["failed"] == 0 else "FAIL"
            problem = ep_tests_problem(version, c) if not args.pytest_args else ""  # (-k / -x may deselect them)
            if problem:
                row["result"], row["note"] = "FAIL", problem
            return row
        finally:
            row["seconds"] = round(time.monotonic() - t0, 1)
            if not args.keep:
                shutil.rmtree(venv, ignore_errors=True)


def table(rows):
    with_headers = any(r["headers"] != "found" for r in rows)
    lines = [
        ("| headers " if with_headers else "")
        + "| onnxruntime | result | passed | failed | of which crashed | skipped / xfailed | time (s) |",
        ("|---" if with_headers else "") + "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        result = r["result"] if not r["note"] or r["crashed"] else f"{r['result']} ({r['note']})"
        lines.append(
            (f"| {r['headers']} " if with_headers else "")
            + f"| {r['version']} | {result} | {r['passed']} | {r['failed']} | {r['crashed']} | "
            f"{r['skipped']} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "versions", nargs="*", help="minors (1.21) or exact versions (1.21.1); default: every minor >= 1.21"
    )
    ap.add_argument("--wheel", type=Path, help="use this built wheel instead of building one")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "ort-matrix", help="logs, results.json, table.md")
    ap.add_argument("--python", default=os.environ.get("PYTHON", sys.executable), help="interpreter for the venvs")
    ap.add_argument("--keep", action="store_true", help="keep the venvs and the suite copy")
    ap.add_argument("--tests", type=Path, default=ROOT / "tests", help="the tests folder to copy (default: tests/)")
    ap.add_argument("--list", action="store_true", help="print the versions that would be tested and exit")
    ap.add_argument("--ends", action="store_true", help="only the oldest and the newest of those minors")
    ap.add_argument("--oldest", action="store_true", help="only the oldest of those minors")
    ap.add_argument(
        "--no-bench-tests",
        action="store_true",
        help="leave out tests/test_bench.py, the benchmark's modes, but for its command-line test (CI: its test step "
        "runs them)",
    )
    ap.add_argument(
        "--no-isa-reruns",
        action="store_true",
        help="leave out the per-ISA kernel reruns (-m 'not isa_rerun'): they do not depend on the onnxruntime release "
        "(CI: its test step runs them)",
    )
    ap.add_argument(
        "--ep-floor",
        action="store_true",
        help="with --ends: also the first minor with the plugin EP (1.24), whose EP tests must all run",
    )
    ap.add_argument(
        "--headers",
        default="found",
        help="comma-separated ONNX Runtime header versions to build against, one wheel each: 1.21, 1.23 "
        "(pinned Debian libonnxruntime-dev) or found (what the build finds; the default)",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.pytest_args = pytest_args

    versions = select(args.versions, available_versions(args.python))
    if args.ends:
        floor = [v for v in versions if vtuple(v)[:2] == EP_FROM] if args.ep_floor else []
        versions = sorted(set(versions[:1] + versions[-1:] + floor), key=vtuple)
    elif args.oldest:
        versions = [min(versions, key=vtuple)]
    if args.list:
        print("\n".join(versions))
        return 0
    t_start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = tempfile.mkdtemp(prefix="onnx-pools-ort-matrix-")
    try:
        header_choices = [h.strip() for h in args.headers.split(",") if h.strip()]
        if args.wheel and header_choices != ["found"]:
            sys.exit("ort-matrix: --wheel and --headers exclude each other")
        suite = Path(args.work) / "suite"  # tests/ + models/ only: no onnx_pools source next to them
        shutil.copytree(args.tests, suite / "tests", ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
        shutil.copytree(ROOT / "models", suite / "models")
        # examples/cpp and the cmake/ it includes: tests/test_cpp_example.py builds the example against each
        # onnxruntime's own libonnxruntime and runs it (the custom-op route everywhere, the EP route from 1.24)
        shutil.copytree(ROOT / "examples" / "cpp", suite / "examples" / "cpp")
        shutil.copytree(ROOT / "cmake", suite / "cmake")
        (suite / "_ort_matrix_forked.py").write_text(FORK_PLUGIN)
        rows, wheels = [], []
        for headers in header_choices:
            wheel = (
                args.wheel.resolve()
                if args.wheel
                else build_wheel(args.python, Path(args.work) / f"wheel-{headers}", headers)
            )
            lib_sha = wheel_library_sha(wheel)
            wheels.append(dict(headers=headers, wheel=wheel.name, library_sha256=lib_sha))
            log(
                f"headers {headers}: wheel {wheel.name}, libonnx_pools.so sha256 {lib_sha[:16]}...; "
                f"versions: {', '.join(versions)}"
            )
            for v in versions:
                log(f"headers {headers}, onnxruntime {v} ...")
                row = run_version(v, args, wheel, lib_sha, suite, args.out, headers)
                rows.append(row)
                log(
                    f"headers {headers}, onnxruntime {v}: {row['result']} "
                    f"passed={row['passed']} failed={row['failed']} "
                    f"(crashed={row['crashed']}) skipped={row['skipped']} {row['seconds']:.0f}s {row['note']}"
                )
                for t in row.get("failed_tests", [])[:20]:
                    log(f"    failed: {t}")
    finally:
        if args.keep:
            log(f"kept {args.work}")
        else:
            shutil.rmtree(args.work, ignore_errors=True)
    total = time.monotonic() - t_start
    md = table(rows)
    (args.out / "table.md").write_text(md + "\n")
    (args.out / "results.json").write_text(
        json.dumps(
            dict(wheels=wheels, python=sys.version.split()[0], total_seconds=round(total, 1), rows=rows), indent=1
        )
    )
    print(md)
    print(f"\ntotal {total:.0f} s; logs in {args.out}")
    return 0 if all(r["result"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
