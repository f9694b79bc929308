#!/usr/bin/env bash
# Set-up, then the whole test suite against the installed package (not the source folder), in a random order
# (pytest-randomly, from the test extra; its seed is in the summary: -p randomly --randomly-seed=N repeats an order).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/pytest -q -p randomly tests "$@"
