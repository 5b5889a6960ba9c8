#!/usr/bin/env bash
# bench/sim/run.sh — the simulator against measured runs. For each demo configuration (the demo run file,
# and variants with codec none and with mode diloco) it trains on the emulated WAN of
# examples/topology/demo-2region.yaml, takes the mean measured step time over the steady steps, then runs
# `xdc simulate -c RUN` calibrated with three measurements of that run: each stage's compute time per step
# (every worker's step log; per stage the slowest region's, which the sync and the outer rounds wait
# for); the wire ratio its codec reached on its gradients (the launch summary's "WAN X MB sent for
# Y MB of fp32": X/Y; how far zstd shrinks them depends on the model's gradients); and the time of one
# stage-to-stage hand-off in a region (p2p: from the Chrome traces, the last stage's wait between its
# backward of microbatch 0 and its forward of microbatch 1, whose input arrived long before: the receive
# is posted after that backward; on one host it is thread wake-ups). Every other term — the pipeline's shape, intra collectives, WAN rate, RTT, codec time — is predicted. Prints the error. A fourth row, wanbound, does the same in bench-e2e's WAN-bound regime
# (bench/e2e/two-region.yaml, bench/e2e/gpt1m.yaml, sync int8). A fifth, fourreg, runs bench-e2e's
# 4-region row as the planner chooses it: bench/e2e/four-region.yaml (north slowed 2x by the run file's
# diloco.slowdown, asia reachable only through west over a 10x slower link), `plan: auto` (DiLoCo, nobody
# waits: north runs half the inner steps of a round), 3H steps of the planned period H: the first round is
# left out (warm-up) and the last (the run's final round, in the final codec over asia's thin link, which
# the planner counts once per run, not per step), so measured and simulated cover one whole round; each
# region's compute is divided by its slowdown (the simulator slows north itself) before the largest is taken. Then it times `xdc simulate` on the 8-region x 1,024-GPU topology.
# Each row is also simulated without the run's own compute (probe_sim_s, its error): with the compute probe
# `plan: auto` calibrates with (docs/planner.md, "Compute speed"), taken just before the row's run (`xdc plan -c`)
# and given to it (fourreg's launch plans with it); probe_gf is the probe's GFLOP/s of one worker alone, load the
# load average before and after the run.
# Last line: sim_error_pct_max=<x> sim_error_probe_pct_max=<x> sim_8x1024_seconds=<x>
# Env: XDC_BIN (make sets it), SIM_BENCH_STEPS (60), SIM_BENCH_SKIP (10 warm-up steps left out),
# SIM_BENCH_WAN_STEPS (30 steps of the wanbound row, 5 left out), SIM_BENCH_FOUR_TOPO (the fourreg row's topology,
# bench/e2e/four-region.yaml; the row is skipped, said so, where the file is missing), SIM_BENCH_ROWS (the rows
# to run, "demo none diloco wanbound fourreg").
set -euo pipefail
XDC=${XDC_BIN:-build/xdc}
here=$(cd "$(dirname "$0")/../.." && pwd)
steps=${SIM_BENCH_STEPS:-60}
skip=${SIM_BENCH_SKIP:-10}
tmp=$(mktemp -d /tmp/xdc-bench-sim.XXXXXX)
trap '[ -n "${SIM_BENCH_KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$here"

# The tiny model with a progress line every step (the run's own model file is left alone).
sed -e 's/^\(  log_interval:\).*/\1 1/' -e 's/^\(  eval_interval:\).*/\1 0/' examples/models/tiny.yaml >"$tmp/tiny.yaml"
make_run() { # name, extra yaml lines
    sed -e "s#^model:.*#model: $tmp/tiny.yaml#" -e "s/^steps:.*/steps: $steps/" examples/train/demo.yaml >"$tmp/$1.yaml"
    [ -n "${2:-}" ] && printf '%s\n' "$2" >>"$tmp/$1.yaml"
    return 0
}
make_run demo
make_run none ""
sed -i 's/^codec:.*/codec: none/' "$tmp/none.yaml"
make_run diloco "diloco: {inner_steps: 10}"
sed -i 's/^mode:.*/mode: diloco/' "$tmp/diloco.yaml"
# The WAN-bound regime of bench-e2e: its 0.87M-parameter GPT, one worker per region on its 10 Mbit/s,
# 4 ms link, sync int8 (the WAN ~10x the compute per step).
sed -e 's/^\(  log_interval:\).*/\1 1/' -e 's/^\(  eval_interval:\).*/\1 100000/' bench/e2e/gpt1m.yaml >"$tmp/gpt1m.yaml"
cat >"$tmp/wanbound.yaml" <<EOT
model: $tmp/gpt1m.yaml
data: /usr/share/games/fortunes
mode: sync
pipeline_stages: 1
microbatches: 1
steps: ${SIM_BENCH_WAN_STEPS:-30}
codec: int8
bucket_mb: 0.25
threads: 1
EOT

four=${SIM_BENCH_FOUR_TOPO:-bench/e2e/four-region.yaml}
four_slow="1, 1, 2, 1"
cat >"$tmp/fourreg.yaml" <<EOT
model: $tmp/gpt1m.yaml
data: /usr/share/games/fortunes
plan: auto
steps: 1
threads: 1
diloco: {slowdown: [$four_slow]}
EOT

printf '%-8s %10s %15s %6s %8s %10s %10s %8s %9s %9s %9s %10s %8s  %s\n' config measured_s compute_s wire p2p_ms sim_s \
    planner_s error% busiest_s sim_bus_s probe_gf probe_sim_s error%  load
worst=0 worst_probe=0
for cfg in ${SIM_BENCH_ROWS:-demo none diloco wanbound fourreg}; do
    topo=examples/topology/demo-2region.yaml n=$steps sk=$skip simn=$((steps - skip))
    [ "$cfg" = wanbound ] && topo=bench/e2e/two-region.yaml n=${SIM_BENCH_WAN_STEPS:-30} sk=5 simn=$((n - 5))
    # fourreg: the slowed region's compute holds its sleep; the others' is the model's (the simulator slows north
    # by the run file's factor). Whole rounds simulated: nobody waits' regions meet only at a round's end.
    slow="" # region=factor ... : each region's compute over its slowdown
    if [ "$cfg" = fourreg ]; then
        if [ ! -f "$four" ]; then
            echo "$cfg: $four missing, row skipped"
            continue
        fi
        topo=$four
    fi
    # The compute probe `plan: auto` calibrates with (docs/planner.md, "Compute speed"), taken on this machine just
    # before the run and given to it (fourreg's launch plans with it) and to the probe's simulation below.
    probe=$(env -u XDC_PLAN_PROBE "$XDC" plan -t "$topo" -c "$tmp/$cfg.yaml" --json 2>&1 >/dev/null |
        sed -n 's/.*XDC_PLAN_PROBE="\([^"]*\)".*/\1/p')
    [ -n "$probe" ] || { echo "bench-sim: no compute probe for the $cfg run" >&2; exit 70; }
    if [ "$cfg" = fourreg ]; then
        H=$(XDC_PLAN_PROBE="$probe" "$XDC" simulate -t "$four" -c "$tmp/fourreg.yaml" --steps 1 --json | awk -F': ' '/"inner_steps"/ {
                gsub(/,/, "", $2); print $2 }')
        topo=$four n=$((3 * H)) sk=$H simn=$H
        sed -i "s/^steps:.*/steps: $n/" "$tmp/fourreg.yaml"
        slow=$(awk -v f="$four_slow" 'BEGIN { split(f, v, /, */) } /^  - name:/ { printf "%s=%s ", $3, v[++i] }' "$four")
    fi
    l0=$(cut -d' ' -f1-3 /proc/loadavg)
    XDC_PLAN_PROBE="$probe" "$XDC" launch -t "$topo" -c "$tmp/$cfg.yaml" --run-dir "$tmp/run-$cfg" >"$tmp/$cfg.log" 2>&1 || {
        echo "bench-sim: the $cfg run failed:" >&2; tail -20 "$tmp/$cfg.log" >&2; exit 70; }
    # "step    12/60  loss ... step 0.110s = compute 0.041 + intra ..." -> mean step time
    read -r meas k < <(awk -v skip="$sk" -v last=$((sk + simn)) '$1 == "step" && $2 ~ /\// {
            split($2, a, "/"); if (a[1] + 0 <= skip || a[1] + 0 > last) next
            for (i = 1; i <= NF; i++) if ($i == "step" && $(i+1) ~ /s$/) st = $(i+1)
            sub(/s$/, "", st); s += st; k++ }
        END { if (k) printf "%.6f %d\n", s / k, k; else print "0 0" }' "$tmp/$cfg.log")
    [ "$k" -gt 0 ] || { echo "bench-sim: no progress lines in the $cfg run" >&2; exit 70; }
    # Each stage's compute per step: every worker's steps/<region>-<rank>.tsv (column 4; stage = rank mod P),
    # the mean over the steady steps, per stage the largest over the regions (the sync and the outer rounds
    # wait for the slowest); "c0,c1,..." stage 0 first. Stage 1 runs the LM head: its measured time is not
    # stage 0's times the FLOP ratio (docs/benchmarks.md, sim: the quiet DiLoCo rows).
    P=$(awk '/^pipeline_stages:/ { print $2 }' "$tmp/$cfg.yaml")
    comp=$(awk -v skip="$sk" -v last=$((sk + simn)) -v P="${P:-1}" -v slow="$slow" '
        BEGIN { n = split(slow, kv, " "); for (j = 1; j <= n; j++) { split(kv[j], x, "="); by[x[1]] = x[2] } }
        FNR > 1 && $1 > skip && $1 <= last && $4 > 0 {
            f = FILENAME; sub(/.*\//, "", f); r = f; sub(/-[0-9]+\.tsv$/, "", r); sub(/.*-/, "", f); sub(/\.tsv$/, "", f)
            s[FILENAME] += $4 / (r in by ? by[r] : 1); k[FILENAME]++; st[FILENAME] = f % P }
        END { for (f in s) if (s[f] / k[f] > m[st[f]]) m[st[f]] = s[f] / k[f]
              for (i = 0; i < P; i++) printf "%s%.6f", i ? "," : "", m[i] }' "$tmp/run-$cfg"/steps/*.tsv)
    # "... WAN 14.96 MB sent for 65.74 MB of fp32 (x4.4) ..." -> wire bytes per fp32 byte, every worker
    wire=$(awk '/^run .* finished in/ { for (i = 1; i < NF; i++) if ($i == "sent" && $(i-1) == "MB") {
            printf "%.4f", $(i-2) / $(i+2); exit } }' "$tmp/$cfg.log")
    [ -n "$wire" ] || { echo "bench-sim: no WAN total in the $cfg run's summary" >&2; exit 70; }
    # fourreg: the summary's total holds the final round in another codec (int4): the table's sparse ratio.
    [ "$cfg" = fourreg ] && wire=0
    # Per-rank traces, one event a line: the last stage's gap from "backward" of microbatch 0 ending to
    # "forward" of microbatch 1 starting, the median over the steady steps (0 with one stage). Not the
    # mean: on 2 shared cores a few gaps are a thread waiting for a core (tens of ms), which the
    # simulator would charge to every hand-off of every step.
    p2p=$(awk -v skip="$sk" '/"cat":"compute"/ {
            line = $0; gsub(/[{}"]/, "", line); n = split(line, f, /[,:]/); ts = dur = 0; name = ""; mb = -1
            for (i = 1; i < n; i++) {
                if (f[i] == "ts") ts = f[i+1]; else if (f[i] == "dur") dur = f[i+1]
                else if (f[i] == "name") name = f[i+1]; else if (f[i] == "microbatch") mb = f[i+1] }
            if (name == "forward" && mb == 1 && prev[FILENAME] == "backward0" && ++seen[FILENAME] > skip)
                printf "%.9f\n", (ts - end[FILENAME]) / 1e6
            prev[FILENAME] = name mb; end[FILENAME] = ts + dur }' "$tmp/run-$cfg"/traces/*.json |
        sort -g | awk '{ v[NR] = $1 } END {
            if (!NR) print 0; else printf "%.6f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    l1=$(cut -d' ' -f1-3 /proc/loadavg)
    XDC_PLAN_PROBE="$probe" "$XDC" simulate -t "$topo" -c "$tmp/$cfg.yaml" --steps "$simn" --calibrate-compute "$comp" \
        --calibrate-ratio "$wire" --calibrate-p2p "$p2p" --json >"$tmp/$cfg.sim.json"
    # The same without the run's own compute: the probe's speed, shared among the run's workers on this host.
    XDC_PLAN_PROBE="$probe" "$XDC" simulate -t "$topo" -c "$tmp/$cfg.yaml" --steps "$simn" \
        --calibrate-ratio "$wire" --calibrate-p2p "$p2p" --json >"$tmp/$cfg.probe.json"
    psim=$(awk -F': ' '/"step_s"/ { gsub(/,/, "", $2); print $2 }' "$tmp/$cfg.probe.json")
    sim=$(awk -F': ' '/"step_s"/ { gsub(/,/, "", $2); print $2 }' "$tmp/$cfg.sim.json")
    plan=$(awk -F': ' '/"planner_step_s"/ { gsub(/,/, "", $2); print $2 }' "$tmp/$cfg.sim.json")
    # The busiest worker's measured compute per step against the simulated busiest: equal but for rounding
    # now that every stage is calibrated (before, stage 1 came from stage 0 by FLOP ratio).
    bus=$(awk -v skip="$sk" -v last=$((sk + simn)) 'FNR > 1 && $1 > skip && $1 <= last { s[FILENAME] += $4; k[FILENAME]++ }
        END { for (f in s) if (s[f] / k[f] > m) m = s[f] / k[f]; printf "%.4f", m }' "$tmp/run-$cfg"/steps/*.tsv)
    simbus=$(awk -F': ' '/"compute_s"/ { gsub(/,/, "", $2); printf "%.4f", $2 }' "$tmp/$cfg.sim.json")
    err=$(awk -v a="$sim" -v b="$meas" 'BEGIN { d = (a - b) / b * 100; printf "%.1f", d < 0 ? -d : d }')
    perr=$(awk -v a="$psim" -v b="$meas" 'BEGIN { d = (a - b) / b * 100; printf "%.1f", d < 0 ? -d : d }')
    worst=$(awk -v a="$err" -v b="$worst" 'BEGIN { print (a > b ? a : b) }')
    worst_probe=$(awk -v a="$perr" -v b="$worst_probe" 'BEGIN { print (a > b ? a : b) }')
    printf '%-8s %10.4f %15s %6.3f %8.2f %10.4f %10.4f %8s %9s %9s %9.1f %10.4f %8s  %s -> %s\n' "$cfg" "$meas" \
        "$(awk -v c="$comp" 'BEGIN { n = split(c, v, ","); for (i = 1; i <= n; i++) printf "%s%.4f", (i > 1 ? "," : ""), v[i] }')" "$wire" \
        "$(awk -v s="$p2p" 'BEGIN { print s * 1e3 }')" "$sim" "$plan" "$err" "$bus" "$simbus" \
        "$(awk -v p="$probe" 'BEGIN { split(p, v, " "); print v[1] / 1e9 }')" "$psim" "$perr" "$l0" "$l1"
done

# Scale: plan + simulate one step of a 7B-shaped model on 8 regions x 1,024 GPUs, whole command timed.
t0=$(date +%s.%N)
"$XDC" simulate -t examples/topology/large-8x1024.yaml -m examples/models/shape-7b.yaml --steps 1 >"$tmp/large.txt"
t1=$(date +%s.%N)
grep -E '^(simulate|simulated|  mode|  predicted)' "$tmp/large.txt"
large=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
echo "sim_error_pct_max=$worst sim_error_probe_pct_max=$worst_probe sim_8x1024_seconds=$large"
