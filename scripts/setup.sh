#!/usr/bin/env bash
# Set-up, safe to re-run: a C++ compiler if missing, then a virtual environment in .venv holding this checkout's
# package (built from source by `pip install .`) and what the tests and the demo need.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v g++ >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq g++ >/dev/null
  else
    echo "setup: a C++17 compiler (g++) is needed; install it and re-run" >&2
    exit 1
  fi
fi
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q ".[test]"
