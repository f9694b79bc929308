#!/usr/bin/env bash
# valgrind memcheck over a representative subset: every op, every element type, a few cases each (padding,
# ceil_mode, dilations, NaN, the Lp underflow path, 2 intra-op threads, NCHW and NHWC), the error paths (bad
# attributes at session creation, bad inputs in run()), and sessions created and destroyed.
#
#   bash scripts/valgrind.sh                       # kernel paths: the one the dispatcher picks under valgrind, portable
#   VALGRIND_ISAS="portable" bash scripts/valgrind.sh
#
# The library is built as shipped (Release, the same flags) plus -g, into build/valgrind, and loaded through
# ONNX_POOLS_LIBRARY; python runs with PYTHONMALLOC=malloc. Pass criterion: no invalid read/write, use of
# uninitialised memory or bad free with a libonnx_pools frame in its stack, and no definite leak allocated from
# libonnx_pools. Errors elsewhere (python, numpy, ORT) are counted and shown, not judged.
# valgrind has no AVX-512: under it the dispatcher finds at most AVX2. Logs: build/valgrind/memcheck.*.log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$ROOT/build/valgrind
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=$ROOT/.venv/bin/python
else PY=python3; fi
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind is not installed" >&2; exit 1; }
# the interpreter itself, not a wrapper script (pyenv shims): valgrind must run python, not a shell
PY=$("$PY" -c 'import sys; print(sys.executable)')
# cmake: on PATH, else next to the python (a venv), else installed into that venv (pip's build used an isolated one)
CMAKE=${CMAKE:-cmake}
if ! command -v "$CMAKE" >/dev/null; then
  CMAKE=$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")/cmake
  if [ ! -x "$CMAKE" ]; then "$PY" -m pip install -q cmake >/dev/null; fi
fi

mkdir -p "$BUILD"
echo "== building the library (Release + -g) in $BUILD"
"$CMAKE" -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g -DONNX_POOLS_OUTPUT_DIR="$BUILD/lib" \
  >"$BUILD/cmake.log" 2>&1 || { cat "$BUILD/cmake.log"; exit 1; }
"$CMAKE" --build "$BUILD" -j"$(nproc)" >"$BUILD/build.log" 2>&1 || { cat "$BUILD/build.log"; exit 1; }

cat >"$BUILD/subset.py" <<'EOF'
import sys
import numpy as np
import onnx_pools
import reference as R
import reference_qlinear as RQ
from helpers import ALL_DTYPES, make_session, qlinear_model, run_session
from helpers import assert_qlinear_matches as check_qlinear, pool_model as make_model

checked = 0


def run(op, opset, dtype, x, attrs, ref, threads=1):
    global checked
    before = onnx_pools.call_counts()[op]
    (y,) = run_session(make_session(make_model(op, opset, dtype, list(x.shape), attrs), threads=threads), {"X": x})
    assert onnx_pools.call_counts()[op] == before + 1, op
    if op == "GlobalMaxPool":
        np.testing.assert_array_equal(R.to_f64(y), R.to_f64(R.to_dtype(ref, dtype)))
    else:
        R.assert_close(y, ref, dtype, R.input_scale(x), f"{op} {dtype} {attrs}")
    checked += 1


rng = np.random.default_rng(0)
for dtype in ALL_DTYPES:
    for shape in ([2, 3, 7, 5], [1, 2, 1100], [1, 1, 3, 4, 5]):
        x = R.to_dtype(rng.standard_normal(shape) * 2, dtype)
        x.reshape(-1)[3] = np.nan if shape[-1] == 1100 else x.reshape(-1)[3]
        run("GlobalAveragePool", 22, dtype, x, {}, R.global_average_pool(x))
        run("GlobalMaxPool", 22, dtype, x, {}, R.global_max_pool(x), threads=2)
        run("GlobalLpPool", 22, dtype, x, {"p": 3}, R.global_lp_pool(x, 3))
        run("GlobalLpPool", 1, dtype, x, {"p": 1.5}, R.global_lp_pool(x, 1.5))
    x = R.to_dtype(rng.standard_normal([2, 3, 9, 8]), dtype)
    for attrs, kw in (({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}, dict(pads=[1, 1, 1, 1], p=2)),
                      ({"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1, "p": 3},
                       dict(strides=[2, 2], ceil_mode=1, p=3)),
                      ({"kernel_shape": [2, 2], "dilations": [2, 1], "auto_pad": "SAME_UPPER", "p": 1},
                       dict(dilations=[2, 1], auto_pad="SAME_UPPER", p=1))):
        run("LpPool", 18, dtype, x, attrs, R.lp_pool(x, attrs["kernel_shape"], **kw), threads=2)
    tiny = R.to_dtype(rng.uniform(0.5, 1, [1, 2, 5, 7]) * {"float16": 1e-3, "float64": 1e-200}.get(dtype, 1e-30), dtype)
    run("LpPool", 22, dtype, tiny, {"kernel_shape": [2, 2], "p": 2}, R.lp_pool(tiny, [2, 2], p=2))  # underflow path
    run("GlobalLpPool", 22, dtype, tiny, {"p": 4}, R.global_lp_pool(tiny, 4))

for dtype in (np.uint8, np.int8):
    lo, hi = RQ.QRANGE[np.dtype(dtype)]
    for cl in (0, 1):
        for attrs in ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
                      {"kernel_shape": [2, 3], "strides": [2, 1], "ceil_mode": 1, "auto_pad": "NOTSET"}):
            a = dict(attrs, channels_last=cl)
            shape = [2, 7, 9, 5] if cl else [2, 5, 7, 9]
            x = rng.integers(lo, hi + 1, shape).astype(dtype)
            model, _ = qlinear_model(dtype, shape, a, 0.03, lo + 100, 0.05, lo + 90)
            before = onnx_pools.call_counts()["QLinearAveragePool"]
            y = make_session(model, threads=2).run(None, {"X": x})[0]
            assert onnx_pools.call_counts()["QLinearAveragePool"] == before + 1
            ref, pre = RQ.qlinear_average_pool(x, 0.03, lo + 100, 0.05, lo + 90, attrs["kernel_shape"],
                                               attrs.get("strides"), attrs.get("pads"), "NOTSET",
                                               attrs.get("ceil_mode", 0), attrs.get("count_include_pad", 0), cl)
            check_qlinear(y, ref, pre, f"QLinearAveragePool {a}")
            checked += 1

# error paths: attribute errors at session creation, input errors in run(); the process must carry on
errors = 0
bad = [("LpPool", {"kernel_shape": [2, 2], "strides": [0, 1]}, [1, 1, 4, 4]),
       ("LpPool", {"kernel_shape": [9, 9]}, [1, 1, 4, 4]),
       ("GlobalLpPool", {"p": 0}, [1, 1, 4, 4]),
       ("GlobalAveragePool", {}, [2, 3]),
       ("GlobalMaxPool", {}, [1, 2, 0, 3])]
for op, attrs, shape in bad:
    for declared in (list(shape), None):
        try:
            run_session(make_session(make_model(op, 22, "float32", declared, attrs)), {"X": np.ones(shape, np.float32)})
        except Exception as e:
            assert op in str(e), str(e)
            errors += 1
# sessions created and dropped
for i in range(20):
    x = R.to_dtype(rng.standard_normal([1, 2, 4, 4]), "float32")
    run("LpPool", 22, "float32", x, {"kernel_shape": [2, 2]}, R.lp_pool(x, [2, 2]))
print(f"VALGRIND-SUBSET-OK isa={onnx_pools.active_isa()} checked={checked} errors={errors} counts={onnx_pools.call_counts()}")
EOF

cat >"$BUILD/summarize.py" <<'EOF'
import re, sys
# a frame of the library: its path, its namespace in a demangled name, or one of its source files (built with -g)
ours = re.compile(r"libonnx_pools|onnx_pools::|\((kernels_impl\.h|kernels_\w+\.cc|ops\.cc|pool_geometry\.cc|"
                  r"registration\.cc|attributes\.cc|dispatch\.cc|dtypes\.h|ort_api\.h):\d+\)")
kinds = re.compile(r"Invalid (read|write|free)|uninitialised|Mismatched free|Source and destination overlap|"
                   r"definitely lost|Invalid .*alignment|Syscall param")
total = {"errors": 0, "ours": 0, "definite_bytes_ours": 0}
bad_blocks = []
for path in sys.argv[1:]:
    text = open(path, errors="replace").read()
    m = re.search(r"ERROR SUMMARY: (\d+) errors", text)
    total["errors"] += int(m.group(1)) if m else 0
    lines = [re.sub(r"^==\d+== ?", "", l) for l in text.splitlines()]
    block = []
    for line in lines + [""]:
        if line.strip():
            block.append(line)
            continue
        if block and kinds.search(block[0]) and any(ours.search(b) for b in block):
            total["ours"] += 1
            bad_blocks.append("\n".join(block))
            m = re.search(r"([\d,]+) (?:\([^)]*\) )?bytes in [\d,]+ blocks are definitely lost", block[0])
            if m:
                total["definite_bytes_ours"] += int(m.group(1).replace(",", ""))
        block = []
    for tag in ("definitely lost", "indirectly lost", "possibly lost"):
        m = re.search(tag + r": ([\d,]+) bytes in ([\d,]+) blocks", text)
        if m:
            print(f"   {path.rsplit('/', 1)[-1]}: {tag} (whole process): {m.group(1)} bytes in {m.group(2)} blocks")
others = {}
for path in sys.argv[1:]:
    for m in re.finditer(r"^==\d+== ((Invalid|Use of|Conditional|Source and|Mismatched|Syscall)[^(\n]*)", open(path, errors="replace").read(), re.M):
        k = re.sub(r"\d+", "N", m.group(1)).strip()
        others[k] = others.get(k, 0) + 1
if others:
    print("   error contexts by kind (any code): " + "; ".join(f"{k}: {v}" for k, v in sorted(others.items(), key=lambda kv: -kv[1])))
print(f"   memcheck errors in the whole process: {total['errors']}; attributable to libonnx_pools: {total['ours']} "
      f"(definitely lost from libonnx_pools: {total['definite_bytes_ours']} bytes)")
for b in bad_blocks[:10]:
    print("--- " + b)
sys.exit(1 if total["ours"] else 0)
EOF

PYTHONPATH_RUN="$ROOT/tests:$("$PY" -c 'import os, onnx_pools; print(os.path.dirname(os.path.dirname(os.path.abspath(onnx_pools.__file__))))' 2>/dev/null || echo "$ROOT")"
status=0
for isa in ${VALGRIND_ISAS:-auto portable}; do
  rm -f "$BUILD"/memcheck."$isa".*.log
  echo "== memcheck, kernel path: $isa"
  start=$(date +%s)
  set +e
  env PYTHONMALLOC=malloc ONNX_POOLS_LIBRARY="$BUILD/lib/libonnx_pools.so" PYTHONPATH="$PYTHONPATH_RUN" \
    $( [ "$isa" != auto ] && echo "ONNX_POOLS_ISA=$isa" ) \
    valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
      --num-callers=40 --log-file="$BUILD/memcheck.$isa.%p.log" "$PY" "$BUILD/subset.py" >"$BUILD/subset.$isa.out" 2>&1
  rc=$?
  set -e
  echo "   $(grep -h VALGRIND-SUBSET-OK "$BUILD/subset.$isa.out" || echo "subset did not finish (exit $rc)"; true)"
  echo "   $(( $(date +%s) - start )) s under valgrind"
  if [ $rc -ne 0 ]; then tail -20 "$BUILD/subset.$isa.out"; status=1; fi
  "$PY" "$BUILD/summarize.py" "$BUILD"/memcheck."$isa".*.log || status=1
done
echo "== valgrind: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
