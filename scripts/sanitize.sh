#!/usr/bin/env bash
# The test suite against an AddressSanitizer + UndefinedBehaviorSanitizer build of the library.
#
#   bash scripts/sanitize.sh                 # the whole suite (tests/)
#   bash scripts/sanitize.sh tests/test_fuzz_invalid.py -k combinations   # any pytest arguments instead
#   ONNX_POOLS_ISA=portable bash scripts/sanitize.sh   # another kernel path (portable | avx2 | avx512)
#   bash scripts/sanitize.sh --build-only    # only the sanitizer build (CI makes it beside other steps; a later run
#                                            # of the script finds it built)
#
# Builds with -DONNX_POOLS_SANITIZE=ON into build/sanitize (the package's own library is not touched), points the
# loader at that build (ONNX_POOLS_LIBRARY, inherited by the subprocesses tests start) and runs pytest with the ASan
# runtime preloaded (python itself is not instrumented). Python-level leaks are not the library's: detect_leaks=0
# (valgrind.sh checks the library for leaks). Any report fails the run: ASan and UBSan (built with
# -fno-sanitize-recover) abort the process on the first error; ASan reports (from pytest or any subprocess) are
# written under build/sanitize/reports, UBSan's go to stderr, which is logged to build/sanitize/pytest.log; both are
# printed at the end and the script exits non-zero when there is one.
# Works from a dev checkout (python3) and after scripts/setup.sh (.venv/bin/python); PYTHON=... overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_ONLY=0
if [ "${1:-}" = --build-only ]; then BUILD_ONLY=1; shift; fi
ROOT=$PWD
BUILD=${ONNX_POOLS_SANITIZE_BUILD:-$ROOT/build/sanitize}
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=$ROOT/.venv/bin/python
else PY=python3; fi
CXX=${CXX:-g++}
# cmake: on PATH, else next to the python (a venv), else installed into that venv (pip's build used an isolated one)
CMAKE=${CMAKE:-cmake}
if ! command -v "$CMAKE" >/dev/null; then
  CMAKE=$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")/cmake
  if [ ! -x "$CMAKE" ]; then "$PY" -m pip install -q cmake >/dev/null; fi
fi

echo "== building the sanitizer library in $BUILD"
mkdir -p "$BUILD"
# -O0 -g1 (line tables for the reports): the kernels compile in about 40% of -O1's time under both sanitizers, and
# the suite (small tensors: Python and ORT dominate) runs about as fast as at -O1. A CPU without AVX-512 cannot run
# the avx512 set, so it is not built here (it compiles slowest under the sanitizers).
ISA_OPTION=()
if [ "$(uname -m)" = x86_64 ] && ! grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  ISA_OPTION=(-DONNX_POOLS_WITHOUT_AVX512=ON)
  echo "   (this CPU has no AVX-512: the avx512 kernel set is left out of the sanitizer build)"
fi
"$CMAKE" -S . -B "$BUILD" -DONNX_POOLS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG" "${ISA_OPTION[@]}" -DCMAKE_CXX_COMPILER="$CXX" \
  -DONNX_POOLS_OUTPUT_DIR="$BUILD/lib" >"$BUILD/cmake.log" 2>&1 || { cat "$BUILD/cmake.log"; exit 1; }
"$CMAKE" --build "$BUILD" -j"$(nproc)" >"$BUILD/build.log" 2>&1 || { cat "$BUILD/build.log"; exit 1; }
LIB=$BUILD/lib/libonnx_pools.so
ASAN_RT=$("$CXX" -print-file-name=libasan.so)
# libstdc++ preloaded too: python does not link it, and ASan's __cxa_throw interceptor must find it at start-up
STDCXX=$("$CXX" -print-file-name=libstdc++.so.6)
if ! ldd "$LIB" | grep libasan >/dev/null; then echo "sanitize: $LIB is not linked against libasan" >&2; exit 1; fi
if [ ! -e "$ASAN_RT" ]; then echo "sanitize: ASan runtime not found ($ASAN_RT)" >&2; exit 1; fi
if [ "$BUILD_ONLY" = 1 ]; then echo "== sanitizer library built: $LIB"; exit 0; fi

REPORTS=$BUILD/reports
rm -rf "$REPORTS"
mkdir -p "$REPORTS"
export ONNX_POOLS_LIBRARY=$LIB
export LD_PRELOAD=$ASAN_RT:$STDCXX${LD_PRELOAD:+:$LD_PRELOAD}
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1:log_path=$REPORTS/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1"  # (UBSan ignores log_path in this combined build: its reports go to stderr, see below)

if [ $# -eq 0 ]; then set -- tests; fi
LOG=$BUILD/pytest.log
echo "== pytest $* (library: $LIB, isa: ${ONNX_POOLS_ISA:-auto}); full output in $LOG"
start=$(date +%s)
# --capture=sys: pytest captures python-level output only, so a sanitizer report written to fd 2 by a dying
# process reaches the log instead of vanishing with pytest's capture file. ORT's own error log lines (expected
# errors of the error tests) are left out of the console.
set +e
"$PY" -m pytest -q -p no:cacheprovider --capture=sys "$@" 2>&1 | tee "$LOG" | grep -a -v -E '^\S*\[[EW]:onnxruntime:'
status=${PIPESTATUS[0]}
set -e
elapsed=$(( $(date +%s) - start ))

shopt -s nullglob
reports=("$REPORTS"/*)
if [ ${#reports[@]} -gt 0 ]; then
  echo "== ${#reports[@]} sanitizer report file(s):"
  for f in "${reports[@]}"; do echo "--- $f"; cat "$f"; done
fi
in_log=$(grep -a -c -E 'runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer|AddressSanitizer: CHECK failed|SUMMARY: (Address|UndefinedBehavior)Sanitizer' "$LOG" || true)
if [ "$in_log" -gt 0 ]; then
  echo "== sanitizer reports in the output:"
  grep -a -n -A30 -E 'runtime error:|ERROR: AddressSanitizer|AddressSanitizer: CHECK failed' "$LOG" | head -200
fi
echo "== sanitize: pytest exit status $status, $(( ${#reports[@]} + in_log )) sanitizer report(s), ${elapsed} s"
if [ ${#reports[@]} -gt 0 ] || [ "$in_log" -gt 0 ]; then exit 1; fi
exit $status
