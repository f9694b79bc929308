#!/usr/bin/env bash
# Fetches ONNX Runtime's C/C++ headers from Debian's libonnxruntime-dev (suite trixie) into DEST without
# installing anything: a private apt sources list naming the mirror this machine's apt already uses.
# Usage: fetch_ort_headers.sh DEST   (DEST/usr/include/onnxruntime/ holds the headers afterwards)
set -euo pipefail
dest=$1
header="$dest/usr/include/onnxruntime/onnxruntime_c_api.h"
[ -f "$header" ] && exit 0

mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  mirror=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\// && $i ~ /\/debian\/?$/) { print $i; exit } }' /etc/apt/sources.list)
fi
if [ -z "$mirror" ] || ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  echo "onnx-pools: cannot fetch ONNX Runtime headers (needs a Debian apt mirror); set ONNXRUNTIME_INCLUDE_DIR" >&2
  exit 1
fi

work="$dest/apt"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo "deb $mirror trixie main" > "$work/sources.list"
opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$work/lists"
      -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1")
apt-get -qq "${opts[@]}" update
(cd "$work" && apt-get -qq "${opts[@]}" download libonnxruntime-dev 2>/dev/null)
dpkg -x "$work"/libonnxruntime-dev_*.deb "$dest"
rm -rf "$work"
[ -f "$header" ] || { echo "onnx-pools: libonnxruntime-dev did not contain $header" >&2; exit 1; }
