"""The fuzz tests' subprocess harness: runs pickled cases (each a serialized model, its feeds and the ops to register)
in worker subprocesses and reports what each did, so that a case that crashes or hangs its process is caught instead of
killing the test run.

A worker runs a batch of cases and reports each as a JSON line (its outputs as raw bytes, or the error message, and
how the library's call counters moved). When a worker dies or stalls, the first unreported case is re-run alone to
confirm it is the culprit, and the rest of the batch goes on in a fresh worker. A worker's stderr goes to a file in
the work directory, scanned for sanitizer reports (for builds whose sanitizers report without aborting).

Cases may carry "selftest": "abort" | "hang" to make the worker fail on purpose (the harness's own test).
"""

import json
import os
import pickle
import queue
import subprocess
import sys
import threading

from helpers import option, subprocess_env

# The worker: python -c WORKER CASE_FILE START, with tests/ on PYTHONPATH; runs cases[START:].
WORKER = r"""
import base64, ctypes, json, os, pickle, sys
import numpy as np
import onnx_pools
import onnxruntime
import pytest
from helpers import make_session, to_ortvalue
onnxruntime.set_default_logger_severity(4)
NAMES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
         "tensor(bfloat16)": "bfloat16", "tensor(uint8)": "uint8", "tensor(int8)": "int8", "tensor(int32)": "int32"}


def run(sess, feeds):
    # IOBinding and raw bytes: an empty output keeps its shape even when numpy could not hold the dims
    b = sess.io_binding()
    for name, v in feeds.items():
        b.bind_ortvalue_input(name, to_ortvalue(np.ascontiguousarray(v)))
    for o in sess.get_outputs():
        b.bind_output(o.name)
    sess.run_with_iobinding(b)
    outs = []
    for ov in b.get_outputs():
        size = {'tensor(float)': 4, 'tensor(double)': 8, 'tensor(float16)': 2, 'tensor(bfloat16)': 2,
                'tensor(uint8)': 1, 'tensor(int8)': 1}[ov.data_type()]
        n = size * int(np.prod(ov.shape()))
        data = ctypes.string_at(ov.data_ptr(), n) if n else b""
        outs.append({"dtype": NAMES.get(ov.data_type(), ov.data_type()), "shape": list(ov.shape()),
                     "data": base64.b64encode(data).decode()})
    return outs


cases = pickle.load(open(sys.argv[1], "rb"))
start = int(sys.argv[2])
out = sys.stdout
out.write(json.dumps({"ready": True}) + "\n")
out.flush()
for i in range(start, len(cases)):
    case = cases[i]
    hook = case.get("selftest")
    if hook == "abort":
        os.abort()
    if hook == "hang":
        import time
        time.sleep(3600)
    before = onnx_pools.call_counts()
    rec = {"i": i}
    try:
        sess = make_session(case["model"], ops=case.get("ops"))
        rec["outputs"] = run(sess, case["feeds"])
        rec["status"] = "ok"
    except pytest.skip.Exception as e:  # EP route: ORT's own schema refuses the model (helpers.ort_refusal)
        rec["status"] = "refused by ORT"
        rec["message"] = str(e)
    except Exception as e:
        rec["status"] = "error"
        rec["message"] = str(e)
    after = onnx_pools.call_counts()
    rec["counted"] = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    out.write(json.dumps(rec) + "\n")
    out.flush()
"""


def _start_worker(case_file, start, workdir):
    """The worker's stderr goes to a file (a pipe nobody reads would fill and block it); see _stderr_tail."""
    err = open(os.path.join(workdir, f"stderr.{start}.{os.path.basename(case_file)}.txt"), "w")
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, case_file, str(start)],
        cwd=workdir,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    proc.stderr_path = err.name
    err.close()
    return proc


def _stderr_tail(proc, n=4000):
    with open(proc.stderr_path, errors="replace") as f:
        return f.read()[-n:]


STARTUP_TIMEOUT = 300  # seconds for a worker to import onnxruntime and load the cases


def _drain(proc, timeout):
    """Yields parsed result lines; yields ("stall", None) when no line came for `timeout` seconds (after the worker
    said it is ready), ("eof", rc) at the end."""
    q = queue.Queue()

    def reader():
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    threading.Thread(target=reader, daemon=True).start()
    ready = False
    while True:
        try:
            line = q.get(timeout=timeout if ready else STARTUP_TIMEOUT)
        except queue.Empty:
            yield "stall", None
            return
        if line is None:
            yield "eof", proc.wait()
            return
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # stray output
        if rec.get("ready"):
            ready = True
        else:
            yield "line", rec


SANITIZER_MARKERS = (
    "runtime error:",
    "ERROR: AddressSanitizer",
    "AddressSanitizer: CHECK failed",
    "ERROR: LeakSanitizer",
)
SANITIZER_REPORTS = []  # (worker stderr excerpt) of every worker whose stderr holds a sanitizer report


def _scan_for_sanitizer_reports(text):
    hits = [i for i in (text.find(m) for m in SANITIZER_MARKERS) if i >= 0]
    if hits:
        SANITIZER_REPORTS.append(text[max(0, min(hits) - 200) : min(hits) + 3000])


def run_cases(cases, workdir, timeout=None, confirm=True):
    """Runs the cases in batched workers. Returns {index: record}; a crashing or hanging case gets
    {"status": "crash"|"hang", "message": ...}, confirmed by running it alone (unless confirm=False).
    A sanitizer report in a worker's stderr (a sanitizer build that does not abort) is kept in SANITIZER_REPORTS.
    timeout: seconds without a result after which a worker counts as hung (default: --fuzz-timeout)."""
    if timeout is None:
        timeout = option("fuzz_timeout")
    case_file = os.path.join(workdir, "cases.pkl")
    with open(case_file, "wb") as f:
        pickle.dump(cases, f)
    results, start = {}, 0
    while start < len(cases):
        proc = _start_worker(case_file, start, workdir)
        event = None
        for event, rec in _drain(proc, timeout):
            if event == "line":
                results[rec["i"]] = rec
        if event == "stall":
            proc.kill()
            proc.wait()
        stderr = _stderr_tail(proc)
        _scan_for_sanitizer_reports(_stderr_tail(proc, 10**7))
        done = [i for i in range(start, len(cases)) if i in results]
        nxt = max(done) + 1 if done else start
        if nxt >= len(cases):
            break
        # the worker died or stalled on case `nxt`: confirm by running it alone
        if confirm:
            results[nxt] = _run_alone(case_file, nxt, workdir, timeout, stderr, stalled=(event == "stall"))
        elif event == "stall":
            results[nxt] = {"i": nxt, "status": "hang", "message": f"no result within {timeout:.0f} s"}
        else:
            results[nxt] = {"i": nxt, "status": "crash", "message": f"worker died; stderr:\n{stderr}"}
        start = nxt + 1
    return results


def _run_alone(case_file, i, workdir, timeout, batch_stderr, stalled):
    solo_file = case_file + f".{i}"
    with open(case_file, "rb") as f:
        cases = pickle.load(f)
    with open(solo_file, "wb") as f:
        pickle.dump([cases[i]], f)
    proc = _start_worker(solo_file, 0, workdir)
    rec, event, rc = None, None, None
    for event, value in _drain(proc, timeout):
        if event == "line":
            rec = value
        elif event == "eof":
            rc = value
    if event == "stall":
        proc.kill()
        proc.wait()
        return {"i": i, "status": "hang", "message": f"no result within {timeout:.0f} s (alone, and in the batch)"}
    stderr = _stderr_tail(proc)
    if rec is not None and rc == 0:  # fine alone: the batch died here for another reason
        rec = dict(rec)
        rec["batch_failure"] = ("stalled" if stalled else "died") + " at this case in a batch; stderr:\n" + batch_stderr
        return rec
    return {"i": i, "status": "crash", "message": f"worker exit code {rc}; stderr:\n{stderr}"}
