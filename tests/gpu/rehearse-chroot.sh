#!/usr/bin/env bash
# tests/gpu/rehearse-chroot.sh — rehearses the bundle's unpack on a bare root before a GPU window: a
# Debian bookworm made by debootstrap --variant=minbase (libc, libstdc++, coreutils, gzip; no -dev
# packages, no openssl, yaml, curl, openblas, no python), the bundle copied in, and there, with a clean
# environment: env.sh (unpack, probe, closure), `xdc --help`, a CPU `train --single`, and run.sh itself
# for a few steps (no GPU there: NOT TESTED, with its CPU rehearsals). For a CUDA bundle this machine's
# CUDA library folder is bind-mounted read-only at /usr/local/cuda/lib64, standing in for what the GPU
# image provides (the allowed list: cudart, cuBLAS, NCCL); nothing else of this machine is visible.
#   usage (root): tests/gpu/rehearse-chroot.sh [BUNDLE (build/gpu-bundle)] [ROOT (/var/tmp/xdc-chroot-bookworm)]
#   env: MIRROR (default http://deb.debian.org/debian), used only when ROOT has no system yet
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 70
BUNDLE=${1:-build/gpu-bundle} ROOT=${2:-/var/tmp/xdc-chroot-bookworm}
[ "$(id -u)" = 0 ] || { echo "rehearse-chroot.sh: needs root (debootstrap, chroot, mount)" >&2; exit 69; }
[ -f "$BUNDLE/MANIFEST" ] || { echo "rehearse-chroot.sh: no bundle at $BUNDLE (make gpu-bundle)" >&2; exit 69; }
if [ ! -x "$ROOT/bin/bash" ]; then
  command -v debootstrap >/dev/null || { echo "rehearse-chroot.sh: debootstrap missing (Debian package debootstrap)" >&2; exit 69; }
  echo "== debootstrap --variant=minbase bookworm $ROOT"
  debootstrap --variant=minbase bookworm "$ROOT" "${MIRROR:-http://deb.debian.org/debian}" >/tmp/xdc-debootstrap.log 2>&1 ||
    { tail -5 /tmp/xdc-debootstrap.log; echo "rehearse-chroot.sh: debootstrap failed (mirror unreachable?)" >&2; exit 69; }
fi
echo "== the root: $(cat "$ROOT/etc/debian_version"), $(chroot "$ROOT" dpkg-query -W | wc -l) packages;" \
  "libssl/libyaml/libopenblas/python3 there: $(ls "$ROOT"/usr/lib/x86_64-linux-gnu/ | grep -cE '^lib(ssl|yaml|openblas)') / $(ls "$ROOT"/usr/bin/python3* 2>/dev/null | wc -l)"

rm -rf "$ROOT/opt/xdc" "$ROOT/opt/xdc-repo" "$ROOT"/tmp/xdc-gpu-bundle-*
mkdir -p "$ROOT/opt/xdc" "$ROOT/opt/xdc-repo/tests/gpu"
cp -a "$BUNDLE/." "$ROOT/opt/xdc/"
cp tests/gpu/run.sh "$ROOT/opt/xdc-repo/tests/gpu/"
mounts=()
cleanup() { for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}"; done; }
trap cleanup EXIT
mount -t proc proc "$ROOT/proc" && mounts+=("$ROOT/proc")
if grep -q '^cuda=1' "$BUNDLE/MANIFEST"; then
  src=$(dirname "$(ldconfig -p | awk '$1 == "libcublas.so.13" { print $NF; exit }')")
  src=$(readlink -f "${src:-/usr/local/cuda/lib64}")
  mkdir -p "$ROOT/usr/local/cuda/lib64"
  mount --bind "$src" "$ROOT/usr/local/cuda/lib64" && mount -o remount,bind,ro "$ROOT/usr/local/cuda/lib64" &&
    mounts+=("$ROOT/usr/local/cuda/lib64")
  echo "== $src bind-mounted read-only at /usr/local/cuda/lib64 (stands in for the image's CUDA libraries)"
fi

chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root /bin/bash -c '
  set -o pipefail
  cd /opt/xdc || exit 70
  echo "== . env.sh"
  . ./env.sh
  echo "== XDC_ENV_OK=$XDC_ENV_OK"
  echo "== bin/xdc --help: $(bin/xdc --help 2>&1 | head -1)"
  echo "== bin/xdc train --single (cpu, 5 steps): $(bin/xdc train --single -c models/tiny.yaml --data data/fortunes --steps 5 --threads 1 --backend cpu 2>&1 | tail -1)"
  echo "== bin/xdc_tests -l: $(bin/xdc_tests -l | wc -l) tests"
  echo "== run.sh --only model-step,determinism,launch-sync,launch-span (no GPU in the chroot)"
  cd /opt/xdc-repo && OUT=/tmp/xdc-out tests/gpu/run.sh --bundle /opt/xdc --only model-step,determinism,launch-sync,launch-span | grep -E "^(STEP|run.sh|== GPUs)"
'
rc=$?
echo "rehearse-chroot.sh: exit $rc"
exit $rc
