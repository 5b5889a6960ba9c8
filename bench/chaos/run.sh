#!/usr/bin/env bash
# bench/chaos — goodput under a seeded random fault schedule (`xdc launch --chaos`, docs/runtime.md "Chaos").
# Two runs of bench/e2e/gpt1m.yaml over bench/e2e/three-region.yaml's emulated WAN (3 regions, 10 and 5 Mbit/s
# links), elastic (min_regions 1, grace 30 s: a region behind a cut link is waited for, not dropped, and the members
# train while they wait: a window longer than the longest stall (2-30 s) costs them nothing, a drop costs the
# stalled region its round, its restart and its return; 20 s with CHAOS_TRAIN_WAITING=0; grace_min
# CHAOS_GRACE_MIN, unset: a stopped worker is waited for up to the grace; e.g. 3s: dropped at 4x the rounds'
# arrival spread and rejoins, which costs it more than the wait saves at this pace; --max-restarts 1000), int8
# pseudo-gradients:
#   diloco     DiLoCo, H = CHAOS_H, the built-in store
#   streaming  streaming DiLoCo, 4 fragments, with --rdzv etcd:// on a 3-member etcd cluster started here
#              (each member under a loop that starts it again when it dies; the run talks to member 0, the
#              faults may kill member 1 or 2); its chaos run has a standby `xdc coordinator --standby` beside it
#              (under such a loop too, leases of CHAOS_DECIDER_TTL s): kill-decider takes out whichever decides
#   Both train while they wait (diloco.train_while_waiting; CHAOS_TRAIN_WAITING=0: off): a member whose round waits
#   for a late region (stopped, restarting) runs inner steps meanwhile.
# Each runs first without faults (its reference: a short probe times a step, then CHAOS_MINUTES of steps),
# then with --chaos CHAOS_SEED:RATE[:CHAOS_KINDS], RATE set so each region gets one fault per
# CHAOS_FAULT_EVERY_S seconds of the reference's pace. A chaos run not finished within 2x its reference's wall time is a hang.
# A chaos run that fails (too few regions left, a member's error) is counted in failed=, its goodput 0.
# Per run and as one summary line (the worse of the two runs; faults summed; rejoin_s over both):
#   goodput   useful tokens per second over the reference's. Useful: the region-steps whose work reached the
#             final model. A region out of the run from step a to step b (the story's steps_out, read from
#             heartbeats: 10-step resolution; b already less the steps a DiLoCo joiner ran from its snapshot that
#             the round taking it back counted, "early=") loses b - (a rounded down to its outer round); every region-step
#             carries the same tokens, so goodput = (1 - lost / (3 x steps)) x reference wall / chaos wall; training
#             while waiting, the inner steps the regions ran while rounds (or, in streaming, a fragment's exchange
#             held up by a stopped member) waited count too, in the chaos run
#             and in the reference (waiting_steps=chaos/reference), each round's at most what its wait holds at the
#             reference's pace (its wall per step): on these 2 shared cores a region steps faster while another is
#             stopped or gone, which a region on its own hardware would not (waiting_steps_raw: as the decider
#             counted them for the rounds' weights): goodput = (3 x steps - lost + chaos's) / (3 x steps +
#             reference's) x reference wall / chaos wall
#   loss_gap  final validation loss minus the reference's
#   faults, max_recovery_s, rejoin_s_p50   from the story lines (recovery_s: from the end of a fault's cause, a
#             kill's moment, a stall's SIGCONT, a link's restore, to the run whole again; rejoin_s)
#   max_outage_s  the longest fault_s + recovery_s: a fault's start to the run whole again
# The timeline plot of each chaos run (regions in and out, validation loss against the reference's, each
# link's rate) goes to CHAOS_PLOTS (docs/bench-chaos) as timeline-<run>.png (gnuplot).
# CHAOS_RUNS (default diloco,streaming): a comma list of the runs to do, e.g. CHAOS_RUNS=streaming; the summary
# line is over those.
# CHAOS_STEPS and CHAOS_RATE pin the steps (no probe) and the fault rate instead of the probe's pace and the
# reference's wall: with the seed, the same schedule at the same steps run after run (two builds compared; with
# CHAOS_RUNS, one mode at a time).
# Smoke run: CHAOS_MINUTES=1 CHAOS_FAULT_EVERY_S=20 CHAOS_PLOTS=/tmp/chaos-plots make bench-chaos
set -euo pipefail
cd "$(dirname "$0")/../.."
xdc=${XDC_BIN:-build/xdc}
seed=${CHAOS_SEED:-1}
minutes=${CHAOS_MINUTES:-8}
every=${CHAOS_FAULT_EVERY_S:-120}
decider_ttl=${CHAOS_DECIDER_TTL:-3}
kinds=${CHAOS_KINDS:+:$CHAOS_KINDS} # a comma list narrows the kinds (orch_chaos.h); default every kind a run allows
H=${CHAOS_H:-30}
train_waiting=${CHAOS_TRAIN_WAITING:-1}
grace_min=${CHAOS_GRACE_MIN:-} # elastic.grace_min; default off (docs/benchmarks.md "A stalled region costs its own time")
probe_steps=${CHAOS_PROBE_STEPS:-60}
runs=${CHAOS_RUNS:-diloco,streaming}
plots=${CHAOS_PLOTS:-docs/bench-chaos}
topo=bench/e2e/three-region.yaml
work=$(mktemp -d /tmp/xdc-bench-chaos-XXXXXX)
t_start=$(date +%s)
etcd_pids=()

cleanup() {
  touch "$work/etcd.stop" "$work/standby.stop"
  [ -f "$work/standby.pid" ] && kill "$(cat "$work/standby.pid")" 2>/dev/null || true
  for f in "$work"/etcd/m*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  for p in "${etcd_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${CHAOS_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Member i of the etcd cluster, started again whenever it dies (its pid in etcd/m<i>.pid) until etcd.stop.
etcd_member() {
  local i=$1
  while [ ! -e "$work/etcd.stop" ]; do
    etcd --name "m$i" --data-dir "$work/etcd/m$i" --initial-cluster-token xdc-bench-chaos \
      --listen-client-urls "http://127.0.0.1:${cport[$i]}" --advertise-client-urls "http://127.0.0.1:${cport[$i]}" \
      --listen-peer-urls "http://127.0.0.1:${pport[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${pport[$i]}" \
      --initial-cluster "$cluster" >> "$work/etcd/m$i.log" 2>&1 &
    echo $! > "$work/etcd/m$i.pid"
    wait $! || true
    sleep 0.5
  done
}

start_etcd() {
  command -v etcd > /dev/null || { echo "bench-chaos: no etcd binary (Debian etcd-server; make deps)"; exit 1; }
  mkdir -p "$work/etcd"
  cport=() pport=() cluster=
  for i in 0 1 2; do
    cport[$i]=$(free_port) pport[$i]=$(free_port)
    cluster+="${cluster:+,}m$i=http://127.0.0.1:${pport[$i]}"
  done
  for i in 0 1 2; do etcd_member "$i" 2> /dev/null & etcd_pids+=($!); done # (the shell's "Killed" notes)
  for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:${cport[0]}/health" | grep -q '"health":"true"' && return
    sleep 0.1
  done
  echo "bench-chaos: the etcd cluster did not come up; see $work/etcd/"; exit 1
}

# A standby coordinator of run <name> on store <url>, started once the run trains and again whenever it dies (its
# pid in standby.pid, which XDC_CHAOS_DECIDER_PIDS names) until standby.stop: kill-decider's target when it decides.
standby() { # name url
  until grep -q ' step ' "$work/$1.out" 2> /dev/null || [ -e "$work/standby.stop" ]; do sleep 0.2; done
  while [ ! -e "$work/standby.stop" ]; do
    "$xdc" coordinator -t "$topo" -c "$work/$1.yaml" --run-dir "$work/$1" --run-id "$1" --rdzv "$2" --standby \
      --decider-ttl "$decider_ttl" >> "$work/$1-standby.log" 2>&1 &
    echo $! > "$work/standby.pid"
    wait $! || true
    sleep 0.5
  done
}

write_run() { # name mode steps
  cat > "$work/$1.yaml" <<EOT
model: $PWD/bench/e2e/gpt1m.yaml
data: /usr/share/games/fortunes
mode: $2
pipeline_stages: 1
microbatches: 1
steps: $3
eval_interval: 10
codec: int8
bucket_mb: 0.25
threads: 1
diloco: {inner_steps: $H$([ "$train_waiting" != 0 ] && echo ", train_while_waiting: true")}
streaming: {fragments: 4}
elastic: {min_regions: 1, grace: $([ "$train_waiting" != 0 ] && echo 30s || echo 20s)${grace_min:+, grace_min: $grace_min}}
EOT
}

# One launch (name, mode, steps, wall limit in s, extra flags...): its output, each line stamped with the
# seconds since it started, into work/<name>.out; returns its exit status (124: the limit).
launch() {
  local name=$1 mode=$2 steps=$3 limit=$4
  shift 4
  write_run "$name" "$mode" "$steps"
  echo "running $name ($mode, $steps steps${*:+, $*})..." >&2
  set +e
  timeout "$limit" "$xdc" launch -t "$topo" -c "$work/$name.yaml" --run-dir "$work/$name" --max-restarts 1000 "$@" 2>&1 |
    perl -MTime::HiRes=time -ne 'BEGIN { $| = 1; $t0 = time } printf "%.2f %s", time - $t0, $_' > "$work/$name.out"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

wall_of() { sed -n 's/.* finished in \([0-9.]*\) s.*/\1/p' "$work/$1.out" | tail -1; }
loss_of() { sed -n 's/.*final val_loss=\([0-9.]*\) .*/\1/p' "$work/$1.out" | tail -1; }
# The inner steps run <name>'s regions ran while rounds waited (train_while_waiting), as the decider counted them
# ("raw"), or each region's in a round at most the round's wait over `per` seconds a step (the reference's pace).
# The decider is the launch, or under etcd the standby coordinator while it holds the role (its own log); the steps
# run while an exchange waited for a member (streaming) each member logs itself (the workers' logs).
waited_of() { # name per|raw
  cat "$work/$1.out" "$work/$1-standby.log" "$work/$1"/logs/*.log 2> /dev/null | sed -n 's/.* waited \([0-9.]*\) s: inner steps run while it waited: /\1 /p' | tr -d ',' |
    awk -v per="$2" '{ for (i = 3; i <= NF; i += 2) s += per == "raw" ? $i : ($i < $1 / per ? $i : int($1 / per)) } END { print s + 0 }'
}

# mode, extra flags (the store): probe, reference, chaos run; prints its row and leaves row_<mode> set.
bench_mode() {
  local mode=$1
  shift
  local steps=${CHAOS_STEPS:-}
  if [ -z "$steps" ]; then
    launch "$mode-probe" "$mode" "$probe_steps" 600 "$@" || { echo "bench-chaos: $mode probe failed:"; tail -20 "$work/$mode-probe.out"; exit 1; }
    # Steps for CHAOS_MINUTES at the probe's pace (its last logged step's elapsed time), whole outer rounds.
    local per=$(for f in "$work/$mode-probe/steps/"*.tsv; do awk -F'\t' 'NR > 1 { e = $2; n = $1 } END { print e / n }' "$f"; done | sort -n | tail -1)
    steps=$(awk -v m="$minutes" -v p="$per" -v h="$H" 'BEGIN { s = int(m * 60 / p / h + 0.5) * h; print s < 2 * h ? 2 * h : s }')
  fi
  launch "$mode-ref" "$mode" "$steps" 3600 "$@" || { echo "bench-chaos: $mode reference failed:"; tail -20 "$work/$mode-ref.out"; exit 1; }
  local ref_wall=$(wall_of "$mode-ref") ref_loss=$(loss_of "$mode-ref")
  # One fault per region per `every` seconds at the reference's pace: faults per region per 100 steps.
  local rate=${CHAOS_RATE:-$(awk -v w="$ref_wall" -v s="$steps" -v e="$every" 'BEGIN { printf "%.4f", 100 * (w / s) / e }')}
  local limit=$(awk -v w="$ref_wall" 'BEGIN { printf "%d", 2 * w + 0.5 }') hang=0 failed=0 rc=0
  if [ -n "${rdzv_url:-}" ]; then # etcd: a standby coordinator beside the chaos run, the launch's role lease as short
    rm -f "$work/standby.stop"
    standby "$mode-chaos" "$rdzv_url" 2> /dev/null &
    local standby_loop=$!
    XDC_CHAOS_DECIDER_PIDS="$work/standby.pid" launch "$mode-chaos" "$mode" "$steps" "$limit" "$@" --chaos "$seed:$rate$kinds" \
      --run-id "$mode-chaos" --decider-ttl "$decider_ttl" || rc=$?
    touch "$work/standby.stop"
    kill "$(cat "$work/standby.pid")" 2> /dev/null || true
    wait "$standby_loop" || true
  else
    launch "$mode-chaos" "$mode" "$steps" "$limit" "$@" --chaos "$seed:$rate$kinds" || rc=$?
  fi
  [ "$rc" = 124 ] && hang=1
  if [ "$rc" != 0 ] && [ "$hang" = 0 ]; then # counted (goodput 0: nothing reached a final model), not fatal
    failed=1
    echo "bench-chaos: $mode chaos run failed (exit $rc):" >&2
    grep -E 'run failed' "$work/$mode-chaos.out" | tail -3 >&2
  fi
  local wall=$(wall_of "$mode-chaos") loss=$(loss_of "$mode-chaos") per=$(awk -v w="$ref_wall" -v s="$steps" 'BEGIN { print w / s }')
  awk -v S="$steps" -v H="$H" -v rw="$ref_wall" -v w="${wall:-0}" -v rl="$ref_loss" -v l="${loss:-0}" -v hang="$hang" \
      -v failed="$failed" -v mode="$mode" -v rate="$rate" -v xc="$(waited_of "$mode-chaos" "$per")" \
      -v xr="$(waited_of "$mode-ref" "$per")" -v rc="$(waited_of "$mode-chaos" raw)" -v rr="$(waited_of "$mode-ref" raw)" '
    / chaos: fault / { faults++ }
    / chaos: not recovered / { unrec++ }
    /steps_out=/ { # each region out: steps_out=REGION:FROM-TO (TO "end": never back)
      line = $0
      while ((i = index(line, "steps_out=")) > 0) {
        line = substr(line, i + 10); v = line; sub(/[) ].*/, "", v); split(v, ab, ":"); split(ab[2], ft, "-")
        lost += (ft[2] == "end" ? S : ft[2]) - int(ft[1] / H) * H
      }
    }
    /recovery_s=/ {
      v = substr($0, index($0, "recovery_s=") + 11) + 0; if (v > maxrec) maxrec = v
      f = index($0, "fault_s=") ? substr($0, index($0, "fault_s=") + 8) + 0 : 0; if (f + v > maxout) maxout = f + v
    }
    /rejoin_s=/ { rj[++nr] = substr($0, index($0, "rejoin_s=") + 9) + 0 }
    END {
      for (i = 1; i <= nr; i++) for (j = i + 1; j <= nr; j++) if (rj[j] < rj[i]) { t = rj[i]; rj[i] = rj[j]; rj[j] = t }
      p50 = nr ? (nr % 2 ? rj[(nr + 1) / 2] : (rj[nr / 2] + rj[nr / 2 + 1]) / 2) : 0
      good = hang || failed || w <= 0 ? 0 : (3 * S - lost + xc) / (3 * S + xr) * rw / w
      gap = hang || failed ? "na" : sprintf("%.4f", l - rl) # no final model to compare
      printf "%-10s steps=%d rate=%s ref_wall_s=%.1f wall_s=%.1f lost_region_steps=%d waiting_steps=%d/%d waiting_steps_raw=%d/%d goodput=%.3f loss_gap=%s faults=%d unrecovered=%d max_recovery_s=%.1f max_outage_s=%.1f rejoin_s_p50=%.1f rejoins=%d hangs=%d failed=%d\n",
        mode, S, rate, rw, w, lost, xc, xr, rc, rr, good, gap, faults, unrec, maxrec, maxout, p50, nr, hang, failed
      for (i = 1; i <= nr; i++) printf "%s ", rj[i] > "/dev/stderr"
    }' "$work/$mode-chaos.out" 2> "$work/$mode.rejoins" | tee -a "$work/rows"
  plot "$mode"
}

# The timeline of run <mode>-chaos: regions in/out, validation loss (and the reference's), each link's rate.
plot() {
  local mode=$1 out=$work/$1-chaos.out
  command -v gnuplot > /dev/null || { echo "bench-chaos: no gnuplot; no plot" >&2; return; }
  mkdir -p "$plots"
  grep -h ' val_loss ' "$work/$mode-ref.out" | awk '{ print $1, $5 }' > "$work/$mode.refloss"
  grep -h ' val_loss ' "$out" | awk '{ print $1, $5 }' > "$work/$mode.loss"
  local names=$(awk '/^  - name:/ { print $3 }' "$topo")
  # regions: one row per change, y = region index + 0.8 while in the run
  awk -v names="$names" '
    BEGIN { n = split(names, r, " "); for (i = 1; i <= n; i++) { idx[r[i]] = i - 1; in_[i - 1] = 1 }; emit(0) }
    function emit(t,   i, s) { s = t; for (i = 0; i < n; i++) s = s " " (i + 0.8 * in_[i]); print s }
    / region [^ ]+ dropped from the run/ { for (k = 1; k <= NF; k++) if ($k == "region") { in_[idx[$(k + 1)]] = 0; emit($1); break } }
    / region [^ ]+ rejoins the run/ { for (k = 1; k <= NF; k++) if ($k == "region") { in_[idx[$(k + 1)]] = 1; emit($1); break } }
    END { emit(last) } { last = $1 }' "$out" > "$work/$mode.regions"
  # links: the rate of each link as a share of its own (1, 0.1 while slowed, 0 while cut), from the fault lines
  awk -v names="$names" '
    BEGIN { n = split(names, r, " "); L = 0; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) { key[r[i] "<->" r[j]] = L; rate[L++] = 1 } }
    / chaos: fault [0-9]+ link-(slow|down) / {
      for (k = 1; k <= NF; k++) if ($k == "link" && ($(k + 1) in key)) l = key[$(k + 1)]
      d = $0; sub(/.* for /, "", d); d += 0
      ev[++ne] = $1 " " l " " ($0 ~ /link-slow/ ? 0.1 : 0); ev[++ne] = ($1 + d) " " l " 1"
    }
    END {
      for (i = 1; i <= ne; i++) for (j = i + 1; j <= ne; j++) { split(ev[i], a, " "); split(ev[j], b, " "); if (b[1] + 0 < a[1] + 0) { t = ev[i]; ev[i] = ev[j]; ev[j] = t } }
      s = 0; for (l = 0; l < L; l++) s = s " " rate[l]; print s
      for (i = 1; i <= ne; i++) { split(ev[i], a, " "); rate[a[2]] = a[3]; s = a[1]; for (l = 0; l < L; l++) s = s " " rate[l]; print s }
    }' "$out" > "$work/$mode.links"
  local end=$(tail -1 "$out" | awk '{ print $1 }')
  echo "$end $(tail -1 "$work/$mode.links" | cut -d' ' -f2-)" >> "$work/$mode.links"
  gnuplot <<EOT
set terminal pngcairo size 1000,800 font ",10"
set output "$plots/timeline-$mode.png"
set multiplot layout 3,1 title "bench-chaos $mode, seed $seed: regions, validation loss, WAN links"
set xrange [0:$end]
set ylabel "region"
set ytics ("east" 0.4, "west" 1.4, "asia" 2.4)
set yrange [-0.2:3]
plot for [i=2:4] "$work/$mode.regions" using 1:i with steps lw 3 notitle
set ytics auto
set autoscale y
set ylabel "val loss"
plot "$work/$mode.loss" using 1:2 with linespoints pt 7 ps 0.4 title "chaos", "$work/$mode.refloss" using 1:2 with lines dt 2 title "fault-free"
set ylabel "link rate (share)"
set xlabel "seconds since launch"
set yrange [-0.05:1.1]
set key bottom right
plot for [i=2:4] "$work/$mode.links" using 1:i with steps lw 2 title word("east-west east-asia west-asia", i - 1)
unset multiplot
EOT
  echo "  plot: $plots/timeline-$mode.png" >&2
}

case ",$runs," in *,diloco,*) bench_mode diloco ;; esac
case ",$runs," in
  *,streaming,*)
    start_etcd
    rdzv_url="etcd://127.0.0.1:${cport[0]}/bench-chaos"
    XDC_CHAOS_ETCD_PIDS="$work/etcd/m1.pid,$work/etcd/m2.pid" bench_mode streaming --rdzv "$rdzv_url"
    ;;
esac
touch "$work/diloco.rejoins" "$work/streaming.rejoins" # a run left out (CHAOS_RUNS) has none
cat "$work/diloco.rejoins" "$work/streaming.rejoins" | tr ' ' '\n' | awk 'NF' | sort -n > "$work/rejoins"
awk -v n="$(wc -l < "$work/rejoins")" -v secs=$(($(date +%s) - t_start)) '
  FNR == NR { rj[++k] = $1; next }
  { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    if (!rows++ || v["goodput"] < good) good = v["goodput"]
    if (v["loss_gap"] != "na" && (!ngap++ || v["loss_gap"] > gap)) gap = v["loss_gap"]
    faults += v["faults"]; hangs += v["hangs"]; failed += v["failed"]; if (v["max_recovery_s"] > rec) rec = v["max_recovery_s"]
    if (v["max_outage_s"] > out) out = v["max_outage_s"] }
  END {
    p50 = n ? (n % 2 ? rj[(n + 1) / 2] : (rj[n / 2] + rj[n / 2 + 1]) / 2) : 0
    printf "bench-chaos: %d s in all\n", secs
    printf "goodput=%.3f loss_gap=%s faults=%d max_recovery_s=%.1f rejoin_s_p50=%.1f hangs=%d failed=%d max_outage_s=%.1f\n", good, ngap ? sprintf("%.4f", gap) : "na", faults, rec, p50, hangs, failed, out
  }' "$work/rejoins" "$work/rows"
