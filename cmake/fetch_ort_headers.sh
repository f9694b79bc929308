#!/usr/bin/env bash
# Fetches ONNX Runtime's C/C++ headers (Debian's libonnxruntime-dev, a pinned version) into DEST without installing
# anything, and verifies them.
#
#   fetch_ort_headers.sh DEST [1.21|1.23]       (DEST/usr/include/onnxruntime/ holds the headers afterwards)
#
#   1.21 (default): 1.21.0+dfsg-1 (Debian trixie), C API 21, the API level the library needs.
#   1.23:           1.23.2+dfsg-6.1 (Debian forky/sid), C API 23.
#
# The .deb (~100 KB) is downloaded from the package pool of the apt mirror(s) this machine's apt sources name
# (deb822 *.sources or one-line sources.list; Debian or Ubuntu URIs; http_proxy/https_proxy are honoured), not
# through `apt-get update`. Checked after download: the .deb's sha256 when it is Debian's build (pinned below per
# architecture), and always the sha256 of the extracted headers (the same in every distribution's build of that
# source version, so an Ubuntu mirror that carries the same version is accepted too). Nothing is installed.
# Without a usable mirror or a matching package: exit 1 with a message naming ONNXRUNTIME_INCLUDE_DIR.
# Env: ONNX_POOLS_APT_ETC (default /etc/apt) where the apt sources are read; PYTHON (default python3).
set -euo pipefail
dest=$1
choice=${2:-1.21}
header="$dest/usr/include/onnxruntime/onnxruntime_c_api.h"

case $choice in
  1.21) version=1.21.0+dfsg-1
        headers_sha=4a19a1408126c4aa31d6912612988abba045481c036312048ee06b93204755af
        declare -A deb_sha=([amd64]=14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08
                            [arm64]=d4b1967893865756c0fa8536be165259a8eb0e9068e60d322ba707ef4527e44e) ;;
  1.23) version=1.23.2+dfsg-6.1
        headers_sha=6211908ca055cd9c6f34690c074103ddb56212d6d072a52f097e6a36e6513259
        declare -A deb_sha=([amd64]=4630a94adb36dc056feb124e51c6e952e2cab5188bc093a25bee8a7e1ac5196d
                            [arm64]=bcdadd1c4d95abb0dca27bdcad3d35b93883ac6bf1d9ffe27e882d8c2c59376b) ;;
  *) echo "onnx-pools: unknown ONNX Runtime header choice '$choice' (1.21 or 1.23)" >&2; exit 1 ;;
esac

give_up() {
  echo "onnx-pools: cannot fetch the ONNX Runtime headers (libonnxruntime-dev $version): $*." >&2
  echo "onnx-pools: point the build at ONNX Runtime headers instead: ONNXRUNTIME_INCLUDE_DIR=/path/to/dir/with/onnxruntime_c_api.h" >&2
  exit 1
}

# sha256 over the sorted (sha256, relative path) list of the header tree: what "these headers" means here.
headers_digest() { (cd "$1" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-64); }

stamp="$dest/.onnx-pools-headers"
if [ -f "$header" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ] &&
   [ "$(headers_digest "$dest/usr/include/onnxruntime")" = "$headers_sha" ]; then
  exit 0
fi

command -v dpkg-deb >/dev/null || command -v ar >/dev/null || give_up "needs dpkg-deb or ar (binutils) to unpack a .deb"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || give_up "needs python3 to download"
arch=$(dpkg --print-architecture 2>/dev/null || true)
if [ -z "$arch" ]; then
  case $(uname -m) in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
fi

# The http(s) URIs of this machine's apt sources, in order (Debian: .../debian, Ubuntu: .../ubuntu or ports).
mirrors=$(
  { etc=${ONNX_POOLS_APT_ETC:-/etc/apt}
    for f in "$etc"/sources.list.d/*.sources; do
      if [ -f "$f" ]; then awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' "$f"; fi
    done
    for f in "$etc"/sources.list "$etc"/sources.list.d/*.list; do
      if [ -f "$f" ]; then awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }' "$f"; fi
    done
  } 2>/dev/null | grep -E '^https?://' | sed 's:/*$::' | awk '!seen[$0]++' || true
)
[ -n "$mirrors" ] || give_up "no http(s) apt mirror found in ${ONNX_POOLS_APT_ETC:-/etc/apt}/sources.list{,.d}"

work=$(mktemp -d "${TMPDIR:-/tmp}/onnx-pools-ort-headers.XXXXXX")
trap 'rm -rf "$work"' EXIT
deb="$work/libonnxruntime-dev.deb"
file="libonnxruntime-dev_${version}_${arch}.deb"
got=""
for mirror in $mirrors; do
  for component in main universe; do  # Debian keeps it in main, Ubuntu in universe
    url="$mirror/pool/$component/o/onnxruntime/$file"
    if "$PY" - "$url" "$deb" 2>/dev/null <<'EOF'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as r, open(sys.argv[2], "wb") as f:
    f.write(r.read())
EOF
    then got=$url; break 2; fi
  done
done
[ -n "$got" ] || give_up "$file is on none of the apt mirrors of this machine ($(echo $mirrors | tr ' ' ','))"

sha=$(sha256sum "$deb" | cut -c1-64)
if [ -n "${deb_sha[$arch]:-}" ] && [ "$sha" = "${deb_sha[$arch]}" ]; then
  verified="the pinned sha256 of Debian's .deb"
else
  verified="the pinned sha256 of the headers (a build other than Debian's $arch .deb: sha256 $sha)"
fi
mkdir -p "$work/x"
if command -v dpkg-deb >/dev/null; then
  dpkg-deb -x "$deb" "$work/x"
else  # ar + tar: the data member of a .deb
  (cd "$work" && ar x "$deb" && tar -xf data.tar.* -C "$work/x")
fi
inc="$work/x/usr/include/onnxruntime"
[ -f "$inc/onnxruntime_c_api.h" ] || give_up "$got holds no usr/include/onnxruntime/onnxruntime_c_api.h"
digest=$(headers_digest "$inc")
[ "$digest" = "$headers_sha" ] || give_up "the headers from $got do not match the pinned sha256 ($digest != $headers_sha)"
rm -rf "$dest/usr/include/onnxruntime"
mkdir -p "$dest/usr/include"
cp -r "$inc" "$dest/usr/include/onnxruntime"
echo "$version" > "$stamp"
echo "onnx-pools: ONNX Runtime headers libonnxruntime-dev $version from $got, verified by $verified" >&2
