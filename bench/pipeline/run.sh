#!/usr/bin/env bash
# bench/pipeline — issue 28's pipeline figures, each from real `xdc launch` runs on this machine:
#   1. Bubble. A pipeline of p = 2 stages (one region, two CPU workers, no WAN) running m microbatches
#      (PIPE_MB) of a 4-layer tiny GPT whose layers take a fixed time (run file `emulate_layer_ms`:
#      PIPE_LAYER_MS per layer forward, twice that backward; the rest of the real compute hides under
#      it), once per v in PIPE_CHUNKS. Per steady step (the first PIPE_SKIP left out; steps/*.tsv), summed
#      over the stages, the bubble is (step − compute) / compute: idle time over compute time, as
#      Megatron-LM defines (p−1)/(m·v); the median over the steps against (p−1)/(m·v). Beside it the idle
#      share of the wall, (step − compute) / step.
#      v = 1 is Megatron's 1F1B, v = 2 its interleaved schedule (`pipeline_chunks: 2`: one layer per chunk).
#   2. Activation codec: bench/actcodec/run.sh as it is (its table, then its summary line, whose
#      act_ratio_vs_bf16 and act_loss_gap_pct this bench's summary repeats). PIPE_ACT=0 leaves it out.
#   3. Unequal replicas. Two regions of one CPU worker each, sync mode, codec none over an emulated
#      1 Gbit/s, 2 ms link; region slow's GPU is half as fast (topology bf16_tflops) and its layers take
#      twice as long (emulate_layer_ms PIPE_REP_LAYER_MS and twice that). The split is the planner's
#      (`xdc plan --json`: microbatches_per_replica for PIPE_REP_MB microbatches per step), run as the run
#      file's microbatches_per_replica; then the equal split of the same global batch for contrast. Per
#      replica the compute utilisation, compute / step over the steady steps (median).
# Last line: bubble_err_pct=<max over the bubble rows of |measured − theory| / theory · 100>
#   act_ratio_vs_bf16=<x> act_loss_gap_pct=<x> util_min=<the planner's split: the least utilised replica>
# Env: XDC_BIN (make sets it), PIPE_CHUNKS ("1 2"), PIPE_MB ("4 8"), PIPE_STEPS (16), PIPE_SKIP (3),
#   PIPE_LAYER_MS (60), PIPE_REP_MB (6), PIPE_REP_LAYER_MS (10), PIPE_ACT (1), ACT_* (bench/actcodec).
# docs/benchmarks.md, "pipeline", has the table and what each figure means.
set -euo pipefail
cd "$(dirname "$0")/../.."
xdc=${XDC_BIN:-build/xdc}
p=2 # stages of the bubble rows
chunks=${PIPE_CHUNKS:-"1 2"}
mbs=${PIPE_MB:-"4 8"}
steps=${PIPE_STEPS:-16}
skip=${PIPE_SKIP:-3}
layer_ms=${PIPE_LAYER_MS:-60}
rep_mb=${PIPE_REP_MB:-6}
rep_ms=${PIPE_REP_LAYER_MS:-10}
t_start=$(date +%s.%N)
tmp=$(mktemp -d /tmp/xdc-bench-pipeline.XXXXXX)
trap '[ -n "${PIPE_KEEP:-}" ] || rm -rf "$tmp"' EXIT
port=$((20000 + RANDOM % 20000)) # the regions' WAN endpoints (no two benches on one port)

# The tiny GPT with 4 layers (2 per stage; 1 per chunk at v = 2), small microbatches (4 x 32 tokens: their
# real compute, a few ms, stays under the emulated layer time) and a progress line every step.
sed -e 's/^\(  layers:\).*/\1 4/' -e 's/^\(  batch_size:\).*/\1 4/' -e 's/^\(  seq_len:\).*/\1 32/' \
    -e 's/^\(  log_interval:\).*/\1 1/' -e 's/^\(  eval_interval:\).*/\1 100000/' examples/models/tiny.yaml >"$tmp/model.yaml"
region() { # name, bf16 TFLOP/s, workers, port
    printf '  - {name: %s, nodes: %s-node1, gpus_per_node: 0, workers_per_node: %s, intra: {bandwidth_gbps: 40, latency_us: 10},\n     gpu: {model: cpu, bf16_tflops: %s, memory_gib: 4}, wan_endpoint: 127.0.0.1:%s}\n' \
        "$1" "$1" "$3" "$2" "$4"
}
{ echo "name: pipe-one"; echo "regions:"; region one 0.002 2 "$port"; } >"$tmp/one.yaml"
{
    echo "name: pipe-two"
    echo "regions:"
    region fast 0.002 1 $((port + 100))
    region slow 0.001 1 $((port + 200))
    echo "links:"
    echo "  - {from: fast, to: slow, bandwidth_gbps: 1, rtt_ms: 2, streams: 2}"
} >"$tmp/two.yaml"

launch() { # name, topology, run-file lines: runs it, leaves its steps in $tmp/run-<name>/steps
    printf 'model: %s\ndata: /usr/share/games/fortunes\nmode: sync\nsteps: %s\ncodec: none\nthreads: 1\n%s\n' \
        "$tmp/model.yaml" "$steps" "$3" >"$tmp/$1.yaml"
    "$xdc" launch -t "$2" -c "$tmp/$1.yaml" --run-dir "$tmp/run-$1" >"$tmp/$1.log" 2>&1 || {
        echo "bench-pipeline: the $1 run failed:" >&2
        tail -20 "$tmp/$1.log" >&2
        exit 70
    }
}
# The median of column $1 of stdin's numbers.
median() {
    sort -g -k"$1","$1" | awk -v k="$1" '{ v[NR] = $k } END {
        printf "%.4f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# Per worker of run $1 (steps/<region>-<rank>.tsv: step, elapsed_s, step_s, compute_s, ...), the median over
# the steady steps of awk expression $2 of s (step_s) and c (compute_s): "<region>-<rank> <value>" a line.
per_worker() {
    for f in "$tmp/run-$1"/steps/*.tsv; do
        printf '%s %s\n' "$(basename "$f" .tsv)" \
            "$(awk -v skip="$skip" 'FNR > 1 && $1 > skip { s = $3; c = $4; print '"$2"' }' "$f" | median 1)"
    done
}
# Per steady step of run $1, over all its workers (the stages): idle / compute and idle / wall, pooled
# (summed over the stages before the ratio: a step where load stretched one stage's compute counts once).
per_step() {
    awk -v skip="$skip" 'FNR > 1 && $1 > skip { i[$1] += $3 - $4; c[$1] += $4; w[$1] += $3 }
        END { for (k in i) print i[k] / c[k], i[k] / w[k] }' "$tmp/run-$1"/steps/*.tsv
}
mean() { awk '{ s += $2; n++ } END { printf "%.4f", s / n }'; }

echo "== bubble: p = $p stages, ${layer_ms} ms per layer forward (x2 backward), steps $((skip + 1))-$steps"
printf '| v | m | theory (p-1)/(m*v) | measured idle/compute | error | idle/wall |\n|---|---|---|---|---|---|\n'
bubble_err=0
for v in $chunks; do
    for m in $mbs; do
        extra=""
        [ "$v" -gt 1 ] && extra=$'\n'"pipeline_chunks: $v"
        launch "bubble-v$v-m$m" "$tmp/one.yaml" "pipeline_stages: $p
microbatches: $m
emulate_layer_ms: [$layer_ms]$extra"
        per_step "bubble-v$v-m$m" >"$tmp/bubble-v$v-m$m"
        meas=$(median 1 <"$tmp/bubble-v$v-m$m")
        wall=$(median 2 <"$tmp/bubble-v$v-m$m")
        read -r theory err < <(awk -v p="$p" -v m="$m" -v v="$v" -v x="$meas" 'BEGIN {
            t = (p - 1) / (m * v); e = (x - t) / t * 100; printf "%.4f %.1f\n", t, e < 0 ? -e : e }')
        bubble_err=$(awk -v a="$err" -v b="$bubble_err" 'BEGIN { print (a > b ? a : b) }')
        printf '| %s | %s | %s | %s | %s %% | %s |\n' "$v" "$m" "$theory" "$meas" "$err" "$wall"
    done
done

act_ratio=- act_gap=-
if [ "${PIPE_ACT:-1}" != 0 ]; then
    echo "== activation codec: bench/actcodec"
    XDC_BIN="$xdc" bash bench/actcodec/run.sh | tee "$tmp/act.txt"
    line=$(grep '^act_codec=' "$tmp/act.txt")
    act_ratio=$(sed 's/.*act_ratio_vs_bf16=\([^ ]*\).*/\1/' <<<"$line")
    act_gap=$(sed 's/.*act_loss_gap_pct=\([^ ]*\).*/\1/' <<<"$line")
fi

# The planner's split of PIPE_REP_MB microbatches of 4 x 32 tokens over the two regions' replicas.
"$xdc" plan -t "$tmp/two.yaml" -m "$tmp/model.yaml" --mode sync --stages 1 --micro-batch 4 --codec none \
    --global-batch $((rep_mb * 4 * 32)) --json >"$tmp/plan.json"
split=$(awk '/"microbatches_per_replica"/ { on = 1; next } on && /}/ { exit }
    on { gsub(/[",]/, ""); printf "%s%s", n++ ? ", " : "", $2 }' "$tmp/plan.json")
[ -n "$split" ] || { echo "bench-pipeline: the planner gave no unequal split:" >&2; cat "$tmp/plan.json" >&2; exit 70; }
equal=$((rep_mb / 2))
echo "== unequal replicas: regions fast (${rep_ms} ms per layer) and slow ($((2 * rep_ms)) ms), $rep_mb microbatches per step"
printf '| split (fast, slow) | chosen by | util fast | util slow | util min | step s |\n|---|---|---|---|---|---|\n'
util_min=-
for row in "planner:$split" "equal:$equal, $equal"; do
    name=${row%%:*} mb=${row#*:}
    launch "replicas-$name" "$tmp/two.yaml" "microbatches_per_replica: [$mb]
emulate_layer_ms: [$rep_ms, $((2 * rep_ms))]"
    per_worker "replicas-$name" 'c / s' >"$tmp/util-$name"
    fast=$(awk '/^fast/ { print $2 }' "$tmp/util-$name")
    slow=$(awk '/^slow/ { print $2 }' "$tmp/util-$name")
    least=$(awk '{ if (NR == 1 || $2 < m) m = $2 } END { printf "%.4f", m }' "$tmp/util-$name")
    step_s=$(per_worker "replicas-$name" 's' | mean)
    [ "$name" = planner ] && util_min=$least
    printf '| %s | %s | %s | %s | %s | %s |\n' "$mb" "$name" "$fast" "$slow" "$least" "$step_s"
done

awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "bench wall time %.0f s; ", b - a }'
uptime
echo "bubble_err_pct=$bubble_err act_ratio_vs_bf16=$act_ratio act_loss_gap_pct=$act_gap util_min=$util_min"
