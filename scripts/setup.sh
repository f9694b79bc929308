#!/usr/bin/env bash
# Set-up, safe to re-run: a C++ compiler if missing, then a virtual environment in .venv holding this checkout's
# package (built from source by `pip install .`) and what the tests and the demo need. One line per step.
# Env: SETUP_EXTRAS (default test): the package's extras to install, e.g. test,ray (CI: the Ray example too).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "setup: $*"; }
start=$SECONDS

if ! command -v g++ >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing g++ (apt-get)"
    # the lock file: CI's aarch64 download step (scripts/aarch64_check.sh --prepare) may run apt-get at the same time
    flock "${TMPDIR:-/tmp}/onnx-pools-apt.lock" sh -c 'apt-get update -qq && apt-get install -y -qq g++ >/dev/null'
  else
    echo "setup: a C++17 compiler (g++) is needed; install it and re-run" >&2
    exit 1
  fi
fi
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  step "creating .venv ($("$PYTHON" --version 2>&1))"
  "$PYTHON" -m venv .venv
fi
step "upgrading pip in .venv"
.venv/bin/python -m pip install -q --upgrade pip
extras=${SETUP_EXTRAS:-test}
step "building the library and installing onnx-pools with its test dependencies (pip install '.[$extras]'; the build"
step "  downloads ONNX Runtime's headers, ~100 KB, unless ONNXRUNTIME_INCLUDE_DIR is set; about a minute)"
.venv/bin/python -m pip install -q ".[$extras]"
step "done in $((SECONDS - start)) s: $(cd / && "$OLDPWD/.venv/bin/python" -c 'import onnx_pools, onnxruntime as o; print(f"onnx-pools {onnx_pools.__version__} (isa {onnx_pools.active_isa()}), onnxruntime {o.__version__}")')"
