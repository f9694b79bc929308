# Sourced by wheel_check.sh and aarch64_check.sh (which define `say` and `fail`): the linkage a wheel's
# libonnx_pools.so may have. It must load on any manylinux system, so only glibc-level libraries and no RPATH.
check_so_linkage() {  # $1: the unpacked libonnx_pools.so
  local so=$1 needed lib
  command -v readelf >/dev/null || fail "readelf (binutils) is needed"
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  say "NEEDED: $needed"
  for lib in $needed; do
    [[ $lib =~ ^(libc|libm|libpthread|libdl|librt|libgcc_s)\.so\.[0-9]+$|^ld-linux[-a-z0-9_.]*\.so\.[0-9]+$ ]] \
      || fail "libonnx_pools.so needs $lib (only glibc-level system libraries allowed)"
  done
  if readelf -d "$so" | grep -qE '\((RPATH|RUNPATH)\)'; then fail "libonnx_pools.so has an RPATH/RUNPATH"; fi
}
