#!/usr/bin/env bash
# Lint and formatting drift, failing on any finding: `ruff check` and `ruff format --check` over the Python files
# (ruff.toml), `mypy` over the onnx_pools package (pyproject.toml [tool.mypy]; numpy for its types),
# `clang-format --dry-run --Werror` over csrc/ (.clang-format). A few seconds once the tools are there.
#   bash scripts/lint.sh               # check (CI runs this first)
#   bash scripts/lint.sh --fix         # rewrite instead: ruff format, ruff check --fix, clang-format -i
#   bash scripts/lint.sh --fix --all   # also the files listed in PENDING below
# The tools are pinned here and installed from PyPI into .venv (created with $PYTHON, default python3, if missing)
# when absent or of another version.
set -euo pipefail
cd "$(dirname "$0")/.."

RUFF_VERSION=0.17.5
MYPY_VERSION=1.18.2
NUMPY_VERSION=2.4.6
CLANG_FORMAT_VERSION=23.1.3

# Files left out of every check while changes in progress on them wait to be merged (format them with
# bash scripts/lint.sh --fix --all, then delete them from this list). Empty: the whole tree is formatted.
PENDING=()

fix=0
all=0
for arg in "$@"; do
  case "$arg" in
    --fix) fix=1 ;;
    --all) all=1 ;;
    *) echo "usage: scripts/lint.sh [--fix [--all]]" >&2; exit 2 ;;
  esac
done

[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
PY=.venv/bin/python
RUFF=.venv/bin/ruff
CLANG_FORMAT=.venv/bin/clang-format
version_of() { "$1" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1 || true; }
MYPY=.venv/bin/mypy
numpy_version() { "$PY" -c 'import numpy; print(numpy.__version__)' 2>/dev/null || true; }
if [ "$(version_of "$RUFF")" != "$RUFF_VERSION" ] || [ "$(version_of "$CLANG_FORMAT")" != "$CLANG_FORMAT_VERSION" ] ||
   [ "$(version_of "$MYPY")" != "$MYPY_VERSION" ] || [ "$(numpy_version)" != "$NUMPY_VERSION" ]; then
  echo "lint: installing ruff==$RUFF_VERSION clang-format==$CLANG_FORMAT_VERSION mypy==$MYPY_VERSION" \
    "numpy==$NUMPY_VERSION into .venv"
  "$PY" -m pip install -q "ruff==$RUFF_VERSION" "clang-format==$CLANG_FORMAT_VERSION" "mypy==$MYPY_VERSION" \
    "numpy==$NUMPY_VERSION"
fi

# the repository's files (tracked and new, not ignored), less the pending ones unless --all
list() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- "$@"
  else
    for pattern in "$@"; do find . -path "./.venv" -prune -o -path "./build" -prune -o -path "./$pattern" -print; done |
      sed 's|^\./||'
  fi | sort -u | while read -r f; do
    [ -f "$f" ] || continue
    if [ "$all" = 0 ] && printf '%s\n' "${PENDING[@]}" | grep -qxF -- "$f"; then continue; fi
    echo "$f"
  done
}
mapfile -t py_files < <(list '*.py')
mapfile -t cxx_files < <(list 'csrc/*.h' 'csrc/*.cc')

if [ "$fix" = 1 ]; then
  "$RUFF" format "${py_files[@]}"
  "$RUFF" check --fix "${py_files[@]}"
  "$CLANG_FORMAT" -i "${cxx_files[@]}"
  exit 0
fi

failed=()
echo "== ruff check (${#py_files[@]} files)"
"$RUFF" check --no-fix "${py_files[@]}" || failed+=("ruff check")
echo "== ruff format --check"
"$RUFF" format --check "${py_files[@]}" || failed+=("ruff format (run: bash scripts/lint.sh --fix)")
echo "== mypy (pyproject.toml [tool.mypy])"
"$MYPY" || failed+=("mypy")
echo "== clang-format --dry-run --Werror (${#cxx_files[@]} files)"
"$CLANG_FORMAT" --dry-run --Werror "${cxx_files[@]}" || failed+=("clang-format (run: bash scripts/lint.sh --fix)")
if [ "$all" = 0 ] && [ "${#PENDING[@]}" -gt 0 ]; then
  echo "lint: not checked yet, formatting pending (scripts/lint.sh PENDING): ${PENDING[*]}"
fi
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'lint: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "lint: OK"
