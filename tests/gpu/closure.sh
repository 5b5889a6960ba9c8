#!/usr/bin/env bash
# tests/gpu/closure.sh — the bundle's closure rule in one place (bundle.sh, env.sh and the test use it).
#
#   closure.sh --allowed SONAME   exit 0 when SONAME is left to the GPU machine: glibc's libraries and
#                                 loader, libcuda, libcudart, libcublas(Lt), libnccl, libstdc++, libgcc_s
#   closure.sh BUNDLE_DIR         resolves every BUNDLE_DIR/bin/* with ldd in the caller's environment and
#                                 prints one line per library: "bundle SONAME" (in bin/../lib, or in
#                                 XDC_BUNDLE_UNPACKED where env.sh unpacked the gzipped ones), "system SONAME => PATH" (an
#                                 allowed one), or "OUTSIDE SONAME => PATH" / "MISSING SONAME" (a failure);
#                                 the last line is "closure: N bundled, N system, N outside, N missing";
#                                 exit 1 when anything is outside or missing
set -uo pipefail
allowed_re='^(libc|libm|libdl|librt|libpthread|libresolv|libutil|libanl|libmvec|ld-linux-x86-64|linux-vdso)\.so\.[0-9.]+$|^(libcuda|libcudart|libcublas|libcublasLt|libnccl|libstdc\+\+|libgcc_s)\.so\.[0-9.]+$'
if [ "${1:-}" = --allowed ]; then
  [[ ${2:-} =~ $allowed_re ]]
  exit
fi
[ $# -eq 1 ] && [ -d "$1/bin" ] || { echo "usage: closure.sh --allowed SONAME | closure.sh BUNDLE_DIR" >&2; exit 64; }
lib=$(cd "$1/lib" && pwd -P)
unpacked=$(cd "${XDC_BUNDLE_UNPACKED:-$1/lib}" 2>/dev/null && pwd -P || echo "$lib")
nb=0 ns=0 no=0 nm=0
while read -r so arrow path _; do
  [ "$arrow" = "=>" ] || continue
  if [ "$path" = not ]; then
    echo "MISSING $so"
    nm=$((nm + 1))
  elif [ "$(dirname "$(readlink -f "$path")")" = "$lib" ] || [ "$(dirname "$(readlink -f "$path")")" = "$unpacked" ]; then
    echo "bundle $so"
    nb=$((nb + 1))
  elif [[ $so =~ $allowed_re ]]; then
    echo "system $so => $(readlink -f "$path")"
    ns=$((ns + 1))
  else
    echo "OUTSIDE $so => $path"
    no=$((no + 1))
  fi
done < <(for f in "$1"/bin/*; do ldd "$f" 2>&1; done | sed 's/ *(0x[0-9a-f]*)$//' | sort -u)
echo "closure: $nb bundled, $ns system, $no outside, $nm missing"
[ $((no + nm)) -eq 0 ]
