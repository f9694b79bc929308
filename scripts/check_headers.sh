#!/usr/bin/env bash
# The headers of csrc/ stand alone and the layers keep their direction (CI runs this after lint; ~1 min on 2 cores):
#   1. every header compiles on its own: g++ -std=c++17 -fsyntax-only on a file that includes only it, with -Icsrc
#      (as the build). Only the headers of csrc/ort/ get ORT's include path, so any other header that reaches ORT's
#      headers fails. The per-ISA kernel headers (those including kernels/common/per_isa.h) get what a
#      kernels/isa/<isa>.cc gives them: ONNX_POOLS_ISA, once per x86-64 kernel set with its flags (as
#      CMakeLists.txt), and on aarch64 (simd_neon.h, with ONNX_POOLS_NEON_INTRINSICS) only where an
#      aarch64-linux-gnu-g++ is installed;
#   2. no #include inside a namespace, in any file of csrc/;
#   3. no file outside csrc/ort/ includes an ONNX Runtime header.
# Env: ONNXRUNTIME_INCLUDE_DIR (ORT's C API headers; default: a system install, else the pinned ones
# cmake/fetch_ort_headers.sh fetches, into build/ort-headers-1.21 as CMake does), ONNXRUNTIME_EP_INCLUDE_DIR (headers
# with the plugin-EP API for csrc/ort/ep/; default: the pinned 1.27 ones), CXX (default g++), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

# Headers that may fail check 1 or include inside a namespace (2.) without failing the check: none. Add a line
# only while a rewrite is under way, and delete it as its file passes (check 1 says when a header does).
TEMPORARY_EXCLUSIONS=()
TEMPORARY_INCLUDES_IN_NAMESPACE=()

CXX=${CXX:-g++}
JOBS=${JOBS:-2}
if [ -z "${ONNXRUNTIME_INCLUDE_DIR:-}" ]; then
  if [ -f /usr/include/onnxruntime/onnxruntime_c_api.h ]; then
    ONNXRUNTIME_INCLUDE_DIR=/usr/include/onnxruntime
  else
    bash cmake/fetch_ort_headers.sh build/ort-headers-1.21 >/dev/null
    ONNXRUNTIME_INCLUDE_DIR=$PWD/build/ort-headers-1.21/usr/include/onnxruntime
  fi
fi
[ -f "$ONNXRUNTIME_INCLUDE_DIR/onnxruntime_c_api.h" ] || { echo "check_headers: no onnxruntime_c_api.h in $ONNXRUNTIME_INCLUDE_DIR"; exit 1; }
# the plugin execution provider (csrc/ort/ep/) compiles against headers with the EP API, as in CMakeLists.txt
if [ -z "${ONNXRUNTIME_EP_INCLUDE_DIR:-}" ]; then
  bash cmake/fetch_ort_headers.sh build/ort-headers-1.27 1.27 >/dev/null
  ONNXRUNTIME_EP_INCLUDE_DIR=$PWD/build/ort-headers-1.27/usr/include/onnxruntime
fi
export CXX ONNXRUNTIME_INCLUDE_DIR ONNXRUNTIME_EP_INCLUDE_DIR

excluded() { local f; for f in "${TEMPORARY_EXCLUSIONS[@]}"; do [ "$f" = "$1" ] && return 0; done; return 1; }
include_allowed() {
  local f
  for f in "${TEMPORARY_INCLUDES_IN_NAMESPACE[@]}"; do [ "$f" = "$1" ] && return 0; done
  return 1
}

# one compilation: file, label, then the compiler flags; prints "ok file label" or "FAIL file label" and the errors
compile_alone() {
  local file=$1 label=$2 out
  shift 2
  if out=$(printf '#include "%s"\n' "${file#csrc/}" |
      nice "$CXX" -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Icsrc "$@" -x c++ - 2>&1); then
    echo "ok $file $label"
  else
    printf 'FAIL %s %s\n%s\n' "$file" "$label" "$(echo "$out" | head -12 | sed 's/^/    /')"
  fi
}
export -f compile_alone

jobs_file=$(mktemp)
trap 'rm -f "$jobs_file"' EXIT
x86_sets=("portable|" "avx2|-mavx2 -mfma -mf16c"
  "avx512|-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c -mprefer-vector-width=512")
have_arm=0
command -v aarch64-linux-gnu-g++ >/dev/null && have_arm=1
while IFS= read -r file; do
  per_isa=0
  if grep -q '^#include "kernels/common/per_isa.h"' "$file" || [ "$file" = csrc/kernels/common/per_isa.h ]; then
    per_isa=1
  fi
  if [[ $file == csrc/ort/ep/* ]]; then
    echo "$file|ort|-I$ONNXRUNTIME_EP_INCLUDE_DIR"
  elif [[ $file == csrc/ort/* ]]; then
    echo "$file|ort|-I$ONNXRUNTIME_INCLUDE_DIR"
  elif [ $per_isa = 0 ]; then
    echo "$file|plain|"
  elif [ "$file" = csrc/kernels/common/simd_neon.h ]; then
    [ $have_arm = 1 ] && echo "$file|neon|-DONNX_POOLS_ISA=neon -DONNX_POOLS_NEON_INTRINSICS=1|aarch64-linux-gnu-g++"
  else
    for set in "${x86_sets[@]}"; do echo "$file|${set%%|*}|-DONNX_POOLS_ISA=${set%%|*} ${set#*|}"; done
    [ $have_arm = 1 ] && echo "$file|neon|-DONNX_POOLS_ISA=neon -DONNX_POOLS_NEON_INTRINSICS=1|aarch64-linux-gnu-g++"
  fi
done < <(git ls-files --cached --others --exclude-standard 'csrc/*.h' | sort) > "$jobs_file"
results=$(tr '\n' '\0' < "$jobs_file" | xargs -0 -P "$JOBS" -I{} bash -c '
  IFS="|" read -r file label flags cxx <<< "$1"
  [ -n "$cxx" ] && CXX=$cxx
  compile_alone "$file" "$label" $flags' _ {})

status=0
failed=()
while IFS= read -r line; do
  case "$line" in
    "FAIL "*)
      read -r _ file label <<< "$line"
      failed+=("$file")
      if excluded "$file"; then
        echo "check_headers: $file ($label) does not compile alone (temporarily excluded)"
        show=0
      else
        echo "check_headers: $file ($label) does not compile alone:"
        status=1
        show=1
      fi
      ;;
    "ok "*) show=0 ;;
    *) [ "${show:-0}" = 1 ] && echo "$line" ;;
  esac
done <<< "$results"
for file in "${TEMPORARY_EXCLUSIONS[@]}"; do
  if [[ " ${failed[*]} " != *" $file "* ]] && grep -q "^ok $file " <<< "$results"; then
    echo "check_headers: $file now compiles alone: remove it from TEMPORARY_EXCLUSIONS"
  fi
done

# 2. no #include inside a namespace: the namespace depth at each #include, from the lines that open and close one
while IFS= read -r file; do
  inside=$(awk '/^namespace [A-Za-z_0-9 ]*\{ *$|^namespace \{ *$/ { depth++ }
                /^\} *\/\/ namespace/ { depth-- }
                /^#include/ && depth > 0 { print FILENAME ":" FNR ": " $0 }' "$file")
  [ -z "$inside" ] && continue
  if include_allowed "$file"; then
    echo "check_headers: (temporarily excluded) #include inside a namespace: $inside"
  else
    echo "check_headers: #include inside a namespace: $inside"
    status=1
  fi
done < <(git ls-files --cached --others --exclude-standard 'csrc/*.h' 'csrc/*.cc')

# 3. ONNX Runtime's headers only in csrc/ort/
outside=$(git ls-files --cached --others --exclude-standard 'csrc/*.h' 'csrc/*.cc' | grep -v '^csrc/ort/' |
  xargs grep -n '^#include [<"]onnxruntime' || true)
if [ -n "$outside" ]; then
  echo "check_headers: ONNX Runtime headers included outside csrc/ort/:"
  echo "$outside"
  status=1
fi

total=$(wc -l < "$jobs_file")
[ $have_arm = 1 ] || echo "check_headers: no aarch64-linux-gnu-g++: the neon variants not compiled"
if [ $status = 0 ]; then
  echo "check_headers: OK ($total compilations of $(cut -d'|' -f1 "$jobs_file" | sort -u | wc -l) headers)"
fi
exit $status
