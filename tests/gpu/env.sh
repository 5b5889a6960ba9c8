# tests/gpu/env.sh — sourced on the GPU machine from the bundle's folder (bundle.sh copies it there as
# env.sh): `. build/gpu-bundle/env.sh`. It
#   1. unpacks the libraries stored gzipped (lib/NAME.gz) into XDC_BUNDLE_UNPACKED (default
#      /tmp/xdc-gpu-bundle-<MANIFEST's cksum>/lib, outside the folder: unpacked, the folder would pass
#      the 64 MiB a device call carries), once, and puts that folder first on LD_LIBRARY_PATH;
#   2. says what the loader finds for bin/xdc as the machine is, before anything is put on LD_LIBRARY_PATH;
#   3. finds each library left to the machine (MANIFEST's system_libs: NCCL, cuBLAS, cuBLASLt, cudart):
#      the Python wheels first (python3 -c 'import nvidia.nccl' etc.: the image's NCCL and cuBLAS are
#      pip's nvidia-nccl-cu13 / nvidia-cublas, whose libraries carry no rpath and are on no loader path),
#      then ldconfig's cache, then /usr/local/cuda; libcuda.so.1 from the cache or /usr/local/nvidia/lib64;
#   4. exports LD_LIBRARY_PATH with the folders it chose (and XDC_BIN, XDC_BUNDLE, XDC_DATA);
#   5. prints the closure as now resolved (closure.sh) and the wheels' versions.
# Each line it prints starts with "env: "; XDC_ENV_OK=1 when nothing is missing or outside the bundle.
# Written on a machine without a GPU; the wheel layout (nvidia/nccl/lib, nvidia/cu13/lib) is pip's for
# CUDA 13 and is looked up, not assumed.
XDC_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
export XDC_BUNDLE XDC_BIN=$XDC_BUNDLE/bin/xdc XDC_DATA=$XDC_BUNDLE/data/fortunes
export XDC_BUNDLE_UNPACKED=${XDC_BUNDLE_UNPACKED:-${TMPDIR:-/tmp}/xdc-gpu-bundle-$(cksum <"$XDC_BUNDLE/MANIFEST" | cut -d' ' -f1)/lib}
XDC_ENV_OK=0

_xdc_env() {
  local b=$XDC_BUNDLE gz so dir found wheel_dirs="" add="" line u=$XDC_BUNDLE_UNPACKED
  mkdir -p "$u" || return 1
  for gz in "$b"/lib/*.gz; do
    [ -e "$gz" ] || continue
    so=$(basename "${gz%.gz}")
    [ -s "$u/$so" ] && [ "$u/$so" -nt "$gz" ] && continue
    gzip -dc "$gz" >"$u/$so.tmp" && mv "$u/$so.tmp" "$u/$so" || { echo "env: cannot unpack $gz into $u"; return 1; }
  done
  add=$u
  echo "env: bundle $b ($(sed -n 's/^cuda=/cuda=/p' "$b/MANIFEST"), built on $(sed -n 's/^built_on=//p' "$b/MANIFEST"))"
  echo "env: glibc here $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2), the bundle needs >= $(sed -n 's/^glibc_needed=//p' "$b/MANIFEST")"
  echo "env: before: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-(unset)}; bin/xdc unresolved: $(ldd "$b/bin/xdc" 2>&1 | awk '/not found/ && !seen[$1]++ {printf "%s ", $1}')"

  # The wheels: every nvidia/*/lib folder of the python3 that holds torch, and the named modules' folders.
  if command -v python3 >/dev/null; then
    wheel_dirs=$(python3 - <<'EOF' 2>/dev/null
import glob, importlib, importlib.metadata as md, os
for name in ("nvidia.nccl", "nvidia.cublas", "nvidia.cu13", "nvidia.cuda_runtime"):
    try:
        m = importlib.import_module(name)
        print("import", name, "ok", ";".join(getattr(m, "__path__", [])))
    except Exception as e:
        print("import", name, "failed", type(e).__name__)
try:
    import nvidia
    for p in nvidia.__path__:
        for d in sorted(glob.glob(os.path.join(p, "*", "lib"))):
            print("dir", d)
except Exception:
    pass
for d in md.distributions():
    n = (d.metadata["Name"] or "").lower()
    if n.startswith("nvidia-") and any(k in n for k in ("nccl", "cublas", "cuda-runtime")) or n == "torch":
        print("version", n, d.version)
EOF
    )
    while read -r line; do
      case $line in import* | version*) echo "env: python3 $line" ;; esac
    done <<<"$wheel_dirs"
  else
    echo "env: no python3: no wheels to look in"
  fi
  for so in $(sed -n 's/^system_libs=//p' "$b/MANIFEST") libcuda.so.1; do
    case $so in libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libresolv.so* | ld-linux* | linux-vdso* | libstdc++* | libgcc_s*) continue ;; esac
    found=""
    if [ "$so" != libcuda.so.1 ]; then
      for dir in $(awk '$1 == "dir" { print $2 }' <<<"$wheel_dirs"); do
        [ -e "$dir/$so" ] && { found="$dir (wheel)"; break; }
      done
    fi
    if [ -z "$found" ] && ldconfig -p 2>/dev/null | grep -q "^[[:space:]]$so "; then
      found="$(dirname "$(ldconfig -p | awk -v s="$so" '$1 == s { print $NF; exit }')") (ldconfig)"
    fi
    if [ -z "$found" ]; then
      for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
        [ -e "$dir/$so" ] && { found="$dir (path)"; break; }
      done
    fi
    echo "env: $so: ${found:-NOT FOUND}"
    case $found in *"(wheel)" | *"(path)") dir=${found% (*}; case ":$add:" in *":$dir:"*) ;; *) add=${add:+$add:}$dir ;; esac ;; esac
  done
  [ -n "$add" ] && export LD_LIBRARY_PATH=$add${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "env: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-(unset)}"
  local out
  out=$(bash "$b/closure.sh" "$b")
  local rc=$?
  sed 's/^/env: /' <<<"$out" | grep -v '^env: bundle ' # the bundled ones: MANIFEST lists them
  return $rc
}
if _xdc_env; then XDC_ENV_OK=1; fi
unset -f _xdc_env
