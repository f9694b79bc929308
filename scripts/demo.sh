#!/usr/bin/env bash
# Set-up, then the demo: every bundled model run with the library and with stock ONNX Runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/onnx-pools demo --models models "$@"
