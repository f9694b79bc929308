#!/usr/bin/env bash
# Set-up, then the whole test suite against the installed package (not the source folder).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/pytest -q tests "$@"
