#!/usr/bin/env bash
# Fetches ONNX Runtime's C/C++ headers (Debian's libonnxruntime-dev, a pinned version) into DEST without installing
# anything, and verifies them.
#
#   fetch_ort_headers.sh DEST [1.21|1.23|1.27]  (DEST/usr/include/onnxruntime/ holds the headers afterwards)
#
#   1.21 (default): 1.21.0+dfsg-1 (Debian trixie), C API 21, the API level the library needs.
#   1.23:           1.23.2+dfsg-6.1 (Debian forky/sid), C API 23.
#   1.27:           1.27.1+dfsg-1 (Debian experimental), C API 27: the plugin execution provider API with kernel
#                   registries (onnxruntime_ep_c_api.h), which the library's EP sources (csrc/ort/ep/) compile against.
#
# The .deb (~100 KB) is downloaded from the package pool of the apt mirror(s) this machine's apt sources name
# (deb822 *.sources stanzas of type deb that are not disabled, and one-line `deb` entries of sources.list{,.d/*.list};
# Debian or Ubuntu URIs, pool/main and pool/universe; http_proxy/https_proxy are honoured), not through
# `apt-get update`; then, as Ubuntu's archives do not carry these Debian versions, from Debian's archive
# (ONNX_POOLS_DEBIAN_MIRROR, default http://deb.debian.org/debian; empty: none). Checked after download: the .deb's
# sha256 when it is Debian's build (pinned below per architecture), and always the sha256 of the extracted headers
# (the same in every distribution's build of that source version, so a mirror's own rebuild of the same version is
# accepted too). Nothing is installed.
# Without a usable mirror or a matching package: exit 1 with a message naming ONNXRUNTIME_INCLUDE_DIR.
# Env: ONNX_POOLS_APT_ETC (default /etc/apt) where the apt sources are read; ONNX_POOLS_DEBIAN_MIRROR; PYTHON
# (default python3).
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
  1.27) version=1.27.1+dfsg-1
        headers_sha=6f275403aa2bb90dd3e0bb81fe6760e32666c9881a43d2346363d7b0385b471e
        declare -A deb_sha=([amd64]=521b439b4674dbd71da1d0bc3016f29075c6ad572f4a1c13beb011dee893f8f3
                            [arm64]=5c2c40a75b6a2a6151ddb5b3236499ac564f7114a4b26f8af2cdbfd1ee051061) ;;
  *) echo "onnx-pools: unknown ONNX Runtime header choice '$choice' (1.21, 1.23 or 1.27)" >&2; exit 1 ;;
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

# The http(s) URIs of this machine's apt sources, in order (Debian: .../debian, Ubuntu: .../ubuntu or
# .../ubuntu-ports), then Debian's archive.
etc=${ONNX_POOLS_APT_ETC:-/etc/apt}
mirrors=$(
  { for f in "$etc"/sources.list.d/*.sources; do
      # deb822: blank-line separated stanzas; field names are case-insensitive; URIs may list several
      if [ -f "$f" ]; then awk '
        function flush() { if (types ~ /(^| )deb( |$)/ && enabled != "no") printf "%s", uris; types = ""; uris = ""; enabled = "" }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        { key = tolower($1) }
        key == "types:" { for (i = 2; i <= NF; i++) types = types " " $i }
        key == "uris:" { for (i = 2; i <= NF; i++) uris = uris $i "\n" }
        key == "enabled:" { enabled = tolower($2) }
        END { flush() }' "$f"; fi
    done
    for f in "$etc"/sources.list "$etc"/sources.list.d/*.list; do
      # one-line: deb [options] URI suite components...
      if [ -f "$f" ]; then awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }' "$f"; fi
    done
    echo "${ONNX_POOLS_DEBIAN_MIRROR-http://deb.debian.org/debian}"
  } 2>/dev/null | grep -E '^https?://' | sed 's:/*$::' | awk '!seen[$0]++' || true
)
[ -n "$mirrors" ] || give_up "no http(s) apt mirror found in $etc/sources.list{,.d} (and ONNX_POOLS_DEBIAN_MIRROR is empty)"

work=$(mktemp -d "${TMPDIR:-/tmp}/onnx-pools-ort-headers.XXXXXX")
trap 'rm -rf "$work"' EXIT
deb="$work/libonnxruntime-dev.deb"
file="libonnxruntime-dev_${version}_${arch}.deb"
urls=()
for mirror in $mirrors; do
  for component in main universe; do urls+=("$mirror/pool/$component/o/onnxruntime/$file"); done  # Ubuntu: universe
done
# one interpreter for every URL (each start costs ~0.1 s): the first that answers is saved, its URL printed
got=$("$PY" - "$deb" "${urls[@]}" 2>/dev/null <<'EOF' || true
import sys, urllib.request
for url in sys.argv[2:]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
    except OSError:
        continue
    with open(sys.argv[1], "wb") as f:
        f.write(data)
    print(url)
    break
EOF
)
[ -n "$got" ] || give_up "$file is on none of the mirrors tried ($(echo $mirrors | tr ' ' ','))"

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
