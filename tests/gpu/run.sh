#!/usr/bin/env bash
# tests/gpu/run.sh — one prepared window on the GPU machine: the checks and measurements of the CUDA/NCCL
# path, all from the bundle (`make gpu-bundle`; docs/device.md says how to send it there), no make, no
# packages, no network.
#
#   *** NOT RUN ON A GPU YET. Written and rehearsed on machines without one (tests/e2e/test_gpu_bundle.c
#   *** runs it with a stub nvidia-smi): every verdict below about CUDA is still to be earned.
#
#   usage: tests/gpu/run.sh [--only STEP,...] [--bundle DIR] [--deadline S] [--list]
#     --only      run these steps alone (a rerun skips what passed); the environment is printed always
#     --bundle    the bundle folder (default build/gpu-bundle)
#     --deadline  seconds of work in all (default XDC_GPU_DEADLINE or 330; at most 330): each step gets
#                 min(its own budget, what is left); a step with under 5 s left is "NOT RUN (deadline)"
#     --list      print the steps with their budgets and exit
#   env: OUT (default build/gpu-out): summary.txt, env.txt, run.log, logs.tgz (every step's log and the
#        launches' worker logs) come back from there — 4 files, under the device tool's 8
#
# Verdicts, one line per step in OUT/summary.txt: PASS / FAIL (a check with its figures), MEASURED
# (figures only: a measurement passes nothing), NOT TESTED (why: no GPU, 1 GPU, gVisor, CPU-only bundle),
# NOT AVAILABLE (no binary in the bundle offers the check yet), NOT RUN (deadline). A failed step never
# stops the window. Without a GPU each CUDA step says NOT TESTED and, where it is cheap, runs its own
# command lines on the CPU backend ("cpu rehearsal") so a wrong path or flag shows here, not in the window;
# a rehearsal that fails is "REHEARSAL FAILED" and makes the exit status 1.
# Exit: 0 when no step failed, 1 otherwise, 64 usage, 69 no bundle.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 70
REPO=$PWD

# ---- the steps, in the order they run (the cheap correctness checks first, the sanitizer last) --------
STEPS=(cuda-tests model-step determinism sync-cuda codec-wire launch-sync launch-diloco launch-streaming
  launch-span torch-cuda nccl gemm-peak gpt2-step codec-speed sanitizer)
declare -A BUDGET=([cuda-tests]=60 [model-step]=30 [determinism]=30 [sync-cuda]=30 [codec-wire]=30
  [launch-sync]=30 [launch-diloco]=30 [launch-streaming]=30 [launch-span]=30 [torch-cuda]=60 [nccl]=30
  [gemm-peak]=20 [gpt2-step]=60 [codec-speed]=20 [sanitizer]=120)

BUNDLE=build/gpu-bundle ONLY="" DEADLINE=${XDC_GPU_DEADLINE:-330}
while [ $# -gt 0 ]; do
  case $1 in
  --only) ONLY=,${2:-},; shift 2 ;;
  --bundle) BUNDLE=${2:-}; shift 2 ;;
  --deadline) DEADLINE=${2:-}; shift 2 ;;
  --list) for s in "${STEPS[@]}"; do printf '%-17s %4d s\n' "$s" "${BUDGET[$s]}"; done; exit 0 ;;
  *) sed -n '9,16p' "$0" >&2; exit 64 ;;
  esac
done
[[ $DEADLINE =~ ^[0-9]+$ ]] && [ "$DEADLINE" -le 330 ] || { echo "run.sh: --deadline takes 1..330 seconds" >&2; exit 64; }
for s in ${ONLY//,/ }; do
  [ -n "${BUDGET[$s]:-}" ] || { echo "run.sh: --only: no step '$s' (--list names them)" >&2; exit 64; }
done
[ -f "$BUNDLE/MANIFEST" ] || { echo "run.sh: no bundle at $BUNDLE (make gpu-bundle; docs/device.md)" >&2; exit 69; }

OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd -P)
L=$OUT/logs
rm -rf "$L" && mkdir -p "$L"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
status=0

# ---- environment (always; before any step) -------------------------------------------------------------
{
  echo "== run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), deadline ${DEADLINE}s, steps: ${ONLY:-all}"
  echo "== host: $(uname -srm); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); $(nproc) CPUs"
  case $(uname -r) in 4.4.0*) echo "== runtime: gVisor (kernel 4.4.0): compute-sanitizer and ncu cannot run" ;; esac
  echo "== nvidia-smi -L:"
  nvidia-smi -L 2>&1
  echo "== nvidia-smi query:"
  nvidia-smi --query-gpu=name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,mig.mode.current,memory.total,power.limit,temperature.gpu,compute_mode --format=csv 2>&1
  echo "== nvcc: $(nvcc --version 2>&1 | tail -1)"
  echo "== gcc: $(gcc --version 2>&1 | head -1)"
  echo "== python3: $(python3 --version 2>&1)"
  echo "== compute-sanitizer: $(compute-sanitizer --version 2>&1 | tail -1)"
} 2>&1 | tee "$OUT/env.txt"
# shellcheck source=tests/gpu/env.sh
. "$BUNDLE/env.sh" | tee -a "$OUT/env.txt" # in a pipe: a subshell; sourced again below for its exports
. "$BUNDLE/env.sh" >/dev/null
B=$XDC_BUNDLE/bin
X=$B/xdc
DATA=$XDC_DATA
MODELS=$XDC_BUNDLE/models
export XDC_BIN=$X
CUDA_BUNDLE=$(sed -n 's/^cuda=//p' "$XDC_BUNDLE/MANIFEST")
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)

# Is there a GPU the CUDA runtime can use? One CUDA test answers it (PASS, or SKIP with the reason), and
# the loader's record of that run says which library files were loaded (libcuda and NCCL come by dlopen).
NOGPU=""
if [ "$XDC_ENV_OK" != 1 ]; then NOGPU="the bundle's libraries do not resolve (env.txt)"
elif [ "$CUDA_BUNDLE" != 1 ]; then NOGPU="CPU-only bundle"
elif [ "$NGPU" -lt 1 ]; then NOGPU="no GPU (nvidia-smi lists none)"
else
  probe=$(LD_DEBUG=libs timeout 60 "$B/xdc_tests" device_cuda_copies_round_trip 2>"$L/ld-debug.log")
  echo "$probe" >"$L/probe.log"
  case $probe in
  *"PASS device_cuda_copies_round_trip"*) ;;
  *SKIP*) NOGPU="no GPU: $(grep '^SKIP' <<<"$probe" | sed -e 's/^SKIP *[a-z_]* *//' -e 's/^no GPU: //' | head -1)" ;;
  *) NOGPU="the CUDA probe failed: $(tail -1 <<<"$probe")" ;;
  esac
  {
    echo "== library files loaded by a CUDA test (LD_DEBUG=libs):"
    awk '/calling init:/ { print $NF }' "$L/ld-debug.log" | sort -u | while read -r f; do echo "  $(readlink -f "$f")"; done
  } | tee -a "$OUT/env.txt"
fi
echo "== GPUs: $NGPU listed; CUDA steps: $([ -n "$NOGPU" ] && echo "NOT TESTED ($NOGPU)" || echo run)" | tee -a "$OUT/env.txt"

# ---- step machinery ----------------------------------------------------------------------------------
VERDICT=""
verdict() { VERDICT=$*; } # a step's last call wins
run_step() {             # name: runs step_<name> with T = min(budget, what is left) seconds
  local name=$1 left t v0
  if [ -n "$ONLY" ] && [[ $ONLY != *",$name,"* ]]; then return; fi
  left=$((DEADLINE - $(elapsed)))
  t=$((BUDGET[$name] < left ? BUDGET[$name] : left))
  [ "$t" -lt 0 ] && t=0
  v0=$(elapsed)
  if [ "$t" -lt 5 ]; then
    VERDICT="NOT RUN (deadline: ${left}s left of ${DEADLINE}s)"
  else
    VERDICT="FAIL (the step gave no verdict)"
    echo "-- $name (budget ${t}s)"
    T=$t "step_${name//-/_}" >"$L/$name.log" 2>&1 </dev/null
    VERDICT=$(cat "$L/.verdict" 2>/dev/null || echo "$VERDICT")
    rm -f "$L/.verdict"
  fi
  case $VERDICT in FAIL* | TIMEOUT* | "REHEARSAL FAILED"*) status=1 ;; esac
  printf 'STEP %-17s %s  [%ss of %ss]\n' "$name" "$VERDICT" "$(($(elapsed) - v0))" "$t" | tee -a "$SUMMARY"
}
# Steps run with their output in their log; the verdict travels back through a file.
say() { echo "$*" >"$L/.verdict"; }
tmo() { timeout -k 5 "$T" "$@"; } # every command of a step: killed at the step's budget
last_line() { grep -o "$1" "$2" | tail -1; }
has_test() { "$B/xdc_tests" -l | awk '{print $1}' | grep -E "$1"; }

# One `xdc_tests -v` run of the tests whose names match PATTERN (an ERE), turned into a verdict: a test that
# skips for want of a second GPU is NOT TESTED (1 GPU); any other skip on a GPU machine is a failure.
tests_verdict() { # pattern label
  local names n f nt ns
  names=$(has_test "$1") || { say "NOT AVAILABLE (xdc_tests has no test matching /$1/: $2)"; return; }
  # shellcheck disable=SC2086
  tmo "$B/xdc_tests" -v -j 1 $names >"$L/tests.raw" 2>&1
  local rc=$?
  # -v prints the line after a test with no output behind "    | ": the verdict lines back to column 0
  sed -E 's/^    \| (PASS|FAIL|SKIP) /\1 /' "$L/tests.raw" >"$L/tests.out" && rm -f "$L/tests.raw"
  cat "$L/tests.out"
  n=$(grep -c '^PASS ' "$L/tests.out")
  f=$(grep -c '^FAIL ' "$L/tests.out")
  nt=$(grep '^SKIP' "$L/tests.out" | grep -E 'needs [2-9] CUDA devices' | awk '{printf "%s ", $2}')
  ns=$(grep '^SKIP' "$L/tests.out" | grep -vE 'needs [2-9] CUDA devices' | awk '{printf "%s ", $2}')
  local figs
  figs=$(grep -ohE '(max_abs|max_rel|maxabs|maxrel)[=:][^ ]+' "$L/tests.out" | head -8 | tr '\n' ' ')
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then say "TIMEOUT after ${T}s: $n passed before it"
  elif [ "$f" -gt 0 ] || [ -n "$ns" ]; then say "FAIL ($n passed, $f failed${ns:+, skipped on a GPU machine: $ns}) $figs"
  else say "PASS ($n passed: $(echo $names | tr '\n' ' ')) ${nt:+; NOT TESTED (1 GPU): $nt}$figs"; fi
}

# Training runs: `xdc train --single` of the tiny model on BACKEND, its final line.
train() { # backend steps log
  tmo "$X" train --single -c "$MODELS/tiny.yaml" --data "$DATA" --steps "$2" --backend "$1" >"$3" 2>&1
  grep '^final ' "$3" | tail -1
}

# ---- the steps ---------------------------------------------------------------------------------------
step_cuda_tests() {
  [ -n "$NOGPU" ] && { say "NOT TESTED ($NOGPU)"; return; }
  tests_verdict '^(device_cuda|kern_cuda|quant_cuda)' "the CUDA device, op and quant tables against the CPU"
}

# CUDA (TF32 GEMMs) against CPU fp32: final val_loss within MODEL_TOL (docs/device.md, "Precision").
step_model_step() {
  local tol=${MODEL_TOL:-0.02} c g
  c=$(train cpu 20 "$L/model-step-cpu.log")
  if [ -n "$NOGPU" ]; then
    [ -n "$c" ] && say "NOT TESTED ($NOGPU); cpu rehearsal ok: $c" || say "REHEARSAL FAILED: cpu train: $(tail -1 "$L/model-step-cpu.log")"
    return
  fi
  g=$(train cuda 20 "$L/model-step-cuda.log")
  local vc vg
  vc=$(grep -o 'val_loss=[0-9.]*' <<<"$c" | cut -d= -f2)
  vg=$(grep -o 'val_loss=[0-9.]*' <<<"$g" | cut -d= -f2)
  if awk -v a="$vg" -v b="$vc" -v t="$tol" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= t) }'; then
    say "PASS val_loss cuda=$vg cpu=$vc |diff|=$(awk -v a="$vg" -v b="$vc" 'BEGIN { d = a - b; print d < 0 ? -d : d }') tol=$tol"
  else say "FAIL val_loss cuda=${vg:-none} cpu=${vc:-none} tol=$tol"; fi
}

# Two CUDA runs of the same seed must end on the same params_xxh64 (the kernels are deterministic).
step_determinism() {
  local be=cuda a b
  [ -n "$NOGPU" ] && be=cpu
  a=$(train $be 10 "$L/determinism-1.log" | grep -o 'params_xxh64=[0-9a-f]*')
  b=$(train $be 10 "$L/determinism-2.log" | grep -o 'params_xxh64=[0-9a-f]*')
  if [ -n "$NOGPU" ]; then
    [ -n "$a" ] && [ "$a" = "$b" ] && say "NOT TESTED ($NOGPU); cpu rehearsal ok: $a twice" || say "REHEARSAL FAILED: cpu runs: '$a' '$b'"
  elif [ -n "$a" ] && [ "$a" = "$b" ]; then say "PASS two cuda runs: $a both"
  else say "FAIL two cuda runs: '${a:-none}' '${b:-none}'"; fi
}

# tests/sync/test_sync_device.c: two regions in one process on CUDA (a buffer with none and int8, a tiny GPT
# stage with its gradients synced); each prints both regions' hashes and the max difference from the CPU.
step_sync_cuda() {
  [ -n "$NOGPU" ] && { say "NOT TESTED ($NOGPU)"; return; }
  tests_verdict '^xdc_sync_.*_on_cuda_' "the in-process two-region sync on CUDA"
  local h
  h=$(grep -ohE '(codec=[a-z0-9]+ .*regions_identical=[a-zA-Z]+|params_xxh64=[0-9a-f]+)' "$L/tests.out" | sed -E 's/elems=[0-9]+ rounds=[0-9]+ //; s/cpu_xxh64=[0-9a-f]+ //' | tr '\n' ' ')
  sed -i "s/\$/; ${h:-no hash printed}/" "$L/.verdict"
}

# tests/gpu/test_codec_wire_cuda.c: every codec x zstd {0, 3}, wire bytes CUDA = CPU (sizes, first differing
# offset, decode max_abs/max_rel per pair in the log).
step_codec_wire() {
  [ -n "$NOGPU" ] && { say "NOT TESTED ($NOGPU)"; return; }
  tests_verdict '^codec_wire_bytes_on_cuda' "codec wire bytes CUDA = CPU"
  local w
  w=$(grep -oE 'codec_wire cuda: .*|first_diff=[0-9][^ ]* \(round [0-9]\)' "$L/tests.out" | head -3 | tr '\n' ' ')
  sed -i "s/\$/; ${w:-no codec_wire summary printed}/" "$L/.verdict"
}

# xdc launch: two emulated regions, one GPU worker each, sharing the one GPU; both regions on one hash.
launch_mode() { # mode
  local mode=$1 dev=cuda run=$L/launch-$1
  [ -n "$NOGPU" ] && dev=cpu
  mkdir -p "$run"
  {
    echo "model: $MODELS/tiny.yaml"
    echo "data: $DATA"
    echo "steps: 12"
    echo "threads: 1"
    echo "bucket_mb: 0.05"
    echo "timeouts: {rendezvous: 60s, operation: 60s}"
    case $mode in
    sync) printf 'mode: sync\npipeline_stages: 1\nmicrobatches: 2\ncodec: int8\n' ;;
    diloco) printf 'mode: diloco\npipeline_stages: 1\nmicrobatches: 2\ncodec: int8\ndiloco: {inner_steps: 4}\n' ;;
    streaming) printf 'mode: streaming\npipeline_stages: 1\nmicrobatches: 2\ncodec: int8\ndiloco: {inner_steps: 4}\nstreaming: {fragments: 2}\n' ;;
    span) printf 'mode: sync\nspan_regions: true\npipeline_stages: 2\nactivation_codec: bf16\nmicrobatches: 4\n' ;;
    esac
  } >"$run/run.yaml"
  tmo "$X" launch -t "$MODELS/two-regions-one-gpu.yaml" -c "$run/run.yaml" --run-dir "$run/dir" --device $dev >"$run/launch.log" 2>&1
  local rc=$? fin hashes devs
  cat "$run/launch.log"
  mkdir -p "$run/worker-logs" && cp "$run"/dir/logs/*.log "$run/worker-logs/" 2>/dev/null
  rm -rf "$run/dir"
  fin=$(grep '^final ' "$run/launch.log" | tail -1 | grep -o 'val_loss=[^ ]* params_xxh64=[^ ]* steps=[^ ]*')
  hashes=$(cat "$run"/worker-logs/*.log 2>/dev/null | grep -o 'final parameters of region [^:]*: params_xxh64=[0-9a-f]*' | awk '{print $NF}' | sort -u)
  devs=$(grep -o 'devices: .*' "$run/launch.log" | tail -1)
  local one=yes
  [ "$mode" != span ] && [ "$(grep -c . <<<"$hashes")" -ne 1 ] && one=no
  if [ -n "$NOGPU" ]; then
    [ $rc -eq 0 ] && [ -n "$fin" ] && [ $one = yes ] && say "NOT TESTED ($NOGPU); cpu rehearsal ok: $fin" ||
      say "REHEARSAL FAILED: exit $rc, ${fin:-no final line}, region hashes: $(echo $hashes)"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then say "TIMEOUT after ${T}s"
  elif [ $rc -eq 0 ] && [ -n "$fin" ] && [ $one = yes ] && [[ $devs == *cuda* ]]; then
    say "PASS $fin; ${mode/span/span (one pipeline across the regions)}: region hashes $(echo $hashes); $devs"
  else say "FAIL exit $rc, ${fin:-no final line}, region hashes: $(echo $hashes); ${devs:-no devices line}"; fi
}
step_launch_sync() { launch_mode sync; }
step_launch_diloco() { launch_mode diloco; }
step_launch_streaming() { launch_mode streaming; }
step_launch_span() { launch_mode span; }

# xdc.torch on CUDA tensors (the bundle's python/torch_cuda.py): DiLoCo (float32, and bfloat16 with offload) and
# the DDP hook, two processes on the one GPU (one per region, xdc launch --exec, int8 over the emulated WAN);
# every member must end on the same three hashes. Skipped when the image's torch has no CUDA.
step_torch_cuda() {
  [ -n "$NOGPU" ] && { say "NOT TESTED ($NOGPU)"; return; }
  [ -f "$B/libxdc.so" ] && [ -f "$XDC_BUNDLE/python/torch_cuda.py" ] || { say "NOT AVAILABLE (no libxdc.so or python/ in the bundle)"; return; }
  tmo python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "torch " + torch.__version__ + " sees no CUDA")' >"$L/torch-probe.log" 2>&1 ||
    { say "NOT TESTED (torch without CUDA: $(tail -1 "$L/torch-probe.log"))"; return; }
  local run=$L/torch-cuda rc lines n
  mkdir -p "$run"
  printf 'model: %s\ndata: %s\nmode: sync\npipeline_stages: 1\ncodec: int8\nbucket_mb: 0.05\ndiloco: {outer_lr: 0.7, outer_momentum: 0.9}\ntimeouts: {rendezvous: 60s, operation: 60s}\n' \
    "$MODELS/tiny.yaml" "$DATA" >"$run/run.yaml"
  tmo "$X" launch -t "$MODELS/two-regions-one-gpu.yaml" -c "$run/run.yaml" --run-dir "$run/dir" --exec -- \
    env XDC_LIB="$B/libxdc.so" PYTHONPATH="$XDC_BUNDLE/python" python3 "$XDC_BUNDLE/python/torch_cuda.py" >"$run/launch.log" 2>&1
  rc=$?
  cat "$run/launch.log"
  mkdir -p "$run/worker-logs" && cp "$run"/dir/logs/*.log "$run/worker-logs/" 2>/dev/null
  rm -rf "$run/dir"
  lines=$(cat "$run/launch.log" "$run"/worker-logs/*.log 2>/dev/null | grep -o 'torch_cuda: rank [0-9]*: .*' | sort -u)
  n=$(sed 's/^torch_cuda: rank [0-9]*: //' <<<"$lines" | sort -u | grep -c .)
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then say "TIMEOUT after ${T}s"
  elif [ $rc -eq 0 ] && [ "$(grep -c . <<<"$lines")" -eq 2 ] && [ "$n" -eq 1 ]; then
    say "PASS both members: $(head -1 <<<"$lines" | sed 's/^torch_cuda: rank 0: //')"
  else say "FAIL exit $rc, member lines: $(echo $lines)"; fi
}

# NCCL on one rank: init and split (intra_nccl_collectives_match_reference), abort (the 1F1B deadline
# test, which needs 2 GPUs: NOT TESTED on one). NCCL_DEBUG=VERSION makes NCCL print its version.
step_nccl() {
  [ -n "$NOGPU" ] && { say "NOT TESTED ($NOGPU)"; return; }
  NCCL_DEBUG=VERSION tests_verdict '^intra_nccl' "NCCL"
  local v
  v=$(grep -o 'NCCL version [^ ]*' "$L/tests.out" | head -1)
  sed -i "s/\$/; ${v:-NCCL version not printed}/" "$L/.verdict"
}

# Does bench_gpu offer mode $1? Its usage (exit 64) names every mode; read whole, as under pipefail a pipe
# from it would carry its exit status.
bench_has() { grep -q "bench_gpu $1 " <<<"$("$B/bench_gpu" 2>&1)"; }
# A bench mode's run on the CPU backend with tiny sizes (no GPU): "cpu rehearsal ok: LAST LINE" or
# "REHEARSAL FAILED: ...". bench_gpu ARGS...
bench_rehearsal() {
  local out rc
  out=$(tmo "$B/bench_gpu" "$@" --backend cpu 2>&1)
  rc=$?
  echo "$out"
  if [ $rc -eq 0 ]; then say "NOT TESTED ($NOGPU); cpu rehearsal ok: $(tail -1 <<<"$out")"
  else say "REHEARSAL FAILED: bench_gpu $* --backend cpu: exit $rc: $(tail -1 <<<"$out")"; fi
}

# The matmul peak (TF32 on CUDA; the kernels have no bf16 GEMM, the line says so): 8192^3 forward and
# backward, and GPT-2's layer shapes with 8192 rows, each in device time between timed events.
step_gemm_peak() {
  [ -x "$B/bench_gpu" ] || { say "NOT AVAILABLE (no bench_gpu in the bundle)"; return; }
  bench_has gemm || { say "NOT AVAILABLE (bench_gpu has no gemm mode)"; return; }
  [ -n "$NOGPU" ] && { bench_rehearsal gemm --size 64; return; }
  tmo "$B/bench_gpu" gemm --size 8192 >"$L/gemm.out" 2>&1
  local rc=$? fig
  cat "$L/gemm.out"
  fig=$(grep '^gpu_gemm' "$L/gemm.out" | grep -E 'forward M=K=N|peak_' | tr '\n' ' ')
  if [ -n "$fig" ]; then say "MEASURED $fig(exit $rc)"; else say "FAIL exit $rc: $(tail -1 "$L/gemm.out")"; fi
}

# One GPT-2 124M step: the whole step through the model (tokens/s, MFU), then the time per op family
# (bench_gpu ops: GEMMs, attention, layernorm, GELU, softmax + cross-entropy, embedding, residual, AdamW,
# sumsq; forward and backward), half the budget each.
step_gpt2_step() {
  [ -x "$B/bench_gpu" ] || { say "NOT AVAILABLE (no bench_gpu in the bundle)"; return; }
  if [ -n "$NOGPU" ]; then
    if bench_has ops; then bench_rehearsal ops "$MODELS/tiny.yaml" --steps 1; else say "NOT TESTED ($NOGPU)"; fi
    return
  fi
  local half=$((T / 2)) rc rc2 fig ops
  T=$half tmo "$B/bench_gpu" model "$MODELS/gpt2-124m.yaml" --steps 10 >"$L/gpt2.out" 2>&1
  rc=$?
  cat "$L/gpt2.out"
  fig=$(grep -E '^gpu_model' "$L/gpt2.out" | tail -1 | tr '\n' ' ')
  if bench_has ops; then
    T=$half tmo "$B/bench_gpu" ops "$MODELS/gpt2-124m.yaml" --steps 5 >"$L/gpt2-ops.out" 2>&1
    rc2=$?
    cat "$L/gpt2-ops.out"
    ops=$(awk '/^gpu_op / { printf "%s=%sms ", $2, $5 } /^gpu_ops ops_sum_ms/ { sub(/^gpu_ops /, ""); printf "%s ", $0 }' "$L/gpt2-ops.out")
    ops="per-op (exit $rc2): ${ops:-none printed: $(tail -1 "$L/gpt2-ops.out")}"
  else
    ops="per-op timings: NOT AVAILABLE (bench_gpu has no ops mode)"
  fi
  if [ -n "$fig" ]; then say "MEASURED $fig(exit $rc); $ops"; else say "FAIL exit $rc: $(tail -1 "$L/gpt2.out"); $ops"; fi
}

step_codec_speed() {
  [ -x "$B/bench_gpu" ] || { say "NOT AVAILABLE (no bench_gpu in the bundle)"; return; }
  [ -n "$NOGPU" ] && { bench_rehearsal codec --mib 1; return; }
  tmo "$B/bench_gpu" codec --mib 256 >"$L/codec.out" 2>&1
  local rc=$?
  cat "$L/codec.out"
  local fig
  fig=$(grep '^gpu_codec' "$L/codec.out" | tail -4 | tr '\n' ' ')
  if [ -n "$fig" ]; then say "MEASURED $fig(exit $rc)"; else say "FAIL exit $rc: $(tail -1 "$L/codec.out")"; fi
}

# compute-sanitizer memcheck and racecheck over the CUDA unit tests (built with -lineinfo), half the
# budget each. On gVisor it refuses the device (KINDS.md): NOT TESTED (gVisor).
step_sanitizer() {
  [ -n "$NOGPU" ] && { say "NOT TESTED ($NOGPU)"; return; }
  command -v compute-sanitizer >/dev/null || { say "NOT TESTED (no compute-sanitizer on PATH)"; return; }
  case $(uname -r) in 4.4.0*) say "NOT TESTED (gVisor)"; return ;; esac
  local names res="" tool half=$((T / 2)) bad=0 rc errs
  names=$(has_test '^(device_cuda|kern_cuda|quant_cuda)' | tr '\n' ' ')
  for tool in memcheck racecheck; do
    # shellcheck disable=SC2086
    T=$half tmo compute-sanitizer --tool $tool --target-processes all --error-exitcode 3 "$B/xdc_tests" -j 1 $names >"$L/san-$tool.out" 2>&1
    rc=$?
    cat "$L/san-$tool.out"
    if grep -q 'Device not supported' "$L/san-$tool.out"; then say "NOT TESTED (gVisor: compute-sanitizer: Device not supported)"; return; fi
    errs=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$L/san-$tool.out" | awk '{ s += $3 } END { print s + 0 }')
    res="$res $tool: $errs errors, exit $rc$([ $rc -eq 124 ] && echo ' (timed out)');"
    [ $rc -eq 0 ] && [ "$errs" -eq 0 ] || bad=1
  done
  if [ $bad -eq 0 ]; then say "PASS$res"; else say "FAIL$res"; fi
}

for s in "${STEPS[@]}"; do run_step "$s"; done

# ---- what comes back: summary.txt, env.txt, run.log, logs.tgz ---------------------------------------
tar -czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null && rm -rf "$L"
c() { grep -c "^STEP [^ ]* *$1" "$SUMMARY"; }
echo "run.sh: $(c PASS) passed, $(c FAIL) failed, $(c TIMEOUT) timed out, $(c MEASURED) measured, $(c 'NOT TESTED') not tested, $(c 'NOT AVAILABLE') not available, $(c 'NOT RUN') not run, $(c 'REHEARSAL FAILED') rehearsals failed; $(elapsed)s of ${DEADLINE}s; files in $OUT" | tee -a "$SUMMARY"
exit $status
