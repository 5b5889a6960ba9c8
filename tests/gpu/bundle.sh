#!/usr/bin/env bash
# tests/gpu/bundle.sh — makes the GPU machine's bundle (`make gpu-bundle` calls it; docs/device.md).
#
# The GPU machine runs a bare CUDA image (nvcc, driver, Python with torch and the NCCL / cuBLAS wheels; no
# Debian -dev packages, no network), so what this tree builds here must travel with every shared library
# it loads that the image lacks. Layout of OUT_DIR:
#   bin/        xdc, xdc_tests, bench_gpu (when built), libxdc.so (XDC_LIB for xdc.torch); DT_RPATH
#               $ORIGIN/../lib, which also covers the bundled libraries' own needs (they carry no rpath of their own)
#   python/     the Python package (python/xdc: PYTHONPATH) and tests/gpu/torch_cuda.py
#   lib/        the ldd closure of bin/* minus the allowed list below, one file per soname; a library
#               over 4 MiB is stored gzipped (NAME.gz) and env.sh unpacks it on the machine (gzip is on
#               every image; xz and zstd may not be), which keeps the folder under 40 MiB
#   data/fortunes/  the corpus (Debian's fortunes texts; that machine has no /usr/share/games/fortunes)
#   models/     examples/models/*.yaml;  tests/gpu/*.yaml beside them
#   env.sh      sourced on the machine: unpacks lib/*.gz, finds NCCL / cuBLAS / cudart (the Python wheels
#               first, then ldconfig, then /usr/local/cuda), exports LD_LIBRARY_PATH and prints what it chose
#   closure.sh  the closure check (tests/e2e/test_gpu_bundle.c and env.sh run it)
#   MANIFEST    cuda=0|1, the build's gcc / nvcc / Debian versions, the newest GLIBC_ symbol version the
#               files need, each library with its origin here and its size
# Allowed (left to the machine): glibc's libraries and loader, libcuda (the driver's), libcudart, libcublas,
# libcublasLt, libnccl (the image's toolkit or wheels), libstdc++ and libgcc_s (every image has them).
#   usage: tests/gpu/bundle.sh BUILD_DIR OUT_DIR CUDA(0|1)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 3 ] || { echo "usage: tests/gpu/bundle.sh BUILD_DIR OUT_DIR CUDA(0|1)" >&2; exit 64; }
B=$1 O=$2 CUDA=$3
GZ_OVER=$((4 * 1024 * 1024))  # bytes: larger libraries are stored gzipped
MAX_BYTES=$((40 * 1024 * 1024))
command -v patchelf >/dev/null || { echo "bundle.sh: patchelf missing (Debian package patchelf)" >&2; exit 69; }

rm -rf "$O"
mkdir -p "$O/bin" "$O/lib" "$O/data/fortunes" "$O/models"
for f in xdc xdc_tests bench_gpu libxdc.so; do
  [ -x "$B/$f" ] || { [ "$f" = bench_gpu ] && continue; echo "bundle.sh: $B/$f not built" >&2; exit 70; }
  # Symbols stay (backtraces, compute-sanitizer's host frames); DWARF goes. -lineinfo lives in the fatbin.
  objcopy --strip-debug "$B/$f" "$O/bin/$f"
  patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$O/bin/$f"
done

# The closure as this machine resolves it, without LD_LIBRARY_PATH: every `soname => path` of every binary.
closure=$(for f in "$O"/bin/*; do env -u LD_LIBRARY_PATH ldd "$f"; done | awk '$2 == "=>" { print $1, $3 }' | sort -u)
if grep -q ' not$' <<<"$closure"; then
  echo "bundle.sh: unresolved here: $(grep ' not$' <<<"$closure" | cut -d' ' -f1 | tr '\n' ' ')" >&2
  exit 70
fi
allowed() { bash tests/gpu/closure.sh --allowed "$1"; }
: >"$O/MANIFEST.libs"
while read -r so path; do
  allowed "$so" && continue
  size=$(stat -Lc %s "$path")
  if [ "$size" -gt "$GZ_OVER" ]; then
    gzip -9 -c "$path" >"$O/lib/$so.gz"
  else
    cp -L "$path" "$O/lib/$so"
  fi
  printf 'lib %s %s %d\n' "$so" "$(readlink -f "$path")" "$size" >>"$O/MANIFEST.libs"
done <<<"$closure"

# The corpus: the fortunes texts (the .dat indexes and .u8 links are skipped by the loader anyway).
src=/usr/share/games/fortunes
if [ -d "$src" ]; then
  for f in "$src"/*; do
    case $f in *.dat | *.u8) continue ;; esac
    [ -f "$f" ] && [ ! -L "$f" ] && cp "$f" "$O/data/fortunes/"
  done
else # no fortunes here (a CI image without the package): the project's own prose
  cat README.md docs/*.md >"$O/data/fortunes/xdc-docs"
fi
cp examples/models/*.yaml tests/gpu/*.yaml "$O/models/"
cp tests/gpu/env.sh tests/gpu/closure.sh "$O/"
mkdir -p "$O/python" && cp -r python/xdc tests/gpu/torch_cuda.py "$O/python/"

glibc_max=$(for f in "$O"/bin/* "$O"/lib/*; do
  case $f in *.gz) gzip -dc "$f" >"$O/.probe" && f=$O/.probe ;; esac
  objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' || true
done | sort -t_ -k2 -V -u | tail -1)
rm -f "$O/.probe"
{
  echo "# the xdc GPU bundle, made by tests/gpu/bundle.sh $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "cuda=$CUDA"
  echo "built_on=$(. /etc/os-release && echo "$PRETTY_NAME") gcc=$(gcc -dumpfullversion) nvcc=$(${NVCC:-nvcc} --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)"
  echo "glibc_needed=${glibc_max#GLIBC_}"
  echo "system_libs=$(awk '{print $1}' <<<"$closure" | while read -r so; do allowed "$so" && printf '%s ' "$so"; done)"
  cat "$O/MANIFEST.libs"
} >"$O/MANIFEST"
rm -f "$O/MANIFEST.libs"

bytes=$(du -sb "$O" | cut -f1)
printf 'gpu-bundle: %s (cuda=%s): %d files, %.1f MiB; %d libraries bundled\n' "$O" "$CUDA" \
  "$(find "$O" -type f | wc -l)" "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')" "$(grep -c '^lib ' "$O/MANIFEST")"
[ "$bytes" -le "$MAX_BYTES" ] || { echo "bundle.sh: $O is over 40 MiB" >&2; exit 70; }
