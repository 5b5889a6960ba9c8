#!/usr/bin/env bash
# bench/peers — xdc's Python path side by side with other frameworks that train across sites, all on the
# same PyTorch model (examples/torch/gpt.py: 136,960 parameters), data (the fortunes corpus), batches,
# optimizer and emulated link: bench/peers/two-region.yaml (10 Mbit/s, 4 ms RTT; bench-e2e's WAN-bound
# regime), one namespace per region made by `xdc wan-emu --netns` (kernel TCP over the emulated delay and
# rate), one process per region. Rows:
#   ddp       torch DistributedDataParallel over gloo: fp32 gradients all-reduced every step (flat)
#   torchft   torchft's DiLoCo (PyPI torchft): H inner AdamW steps, then the pseudo-gradient all-reduced
#             over gloo and an outer Nesterov step; lighthouse on region 0's host
#   torchft-stream  torchft's best configuration on this model: streaming DiLoCo, two fragments, each
#             applied fragment_sync_delay = 1 step after its sync, bucketized (quantized on CUDA only)
#   hivemind  hivemind.Optimizer (PyPI hivemind) with local AdamW updates and parameter averaging every
#             H steps' worth of samples, over libp2p; stopped at the target (the first repetition's ddp)
#   xdc       xdc.torch.DiLoCo (this repo's python/), members started by `xdc agent --exec` in the
#             namespaces, the coordinator in the coordinator's namespace; WAN codec int8 (the link's)
#   xdc-best  the same with the sparse codec PEERS_XDC_BEST_CODEC and DiLoCo's best options where this
#             xdc.torch has them (peer.py's BEST_XDC: keep_unsent, overlap)
# Every row runs PEERS_REPEATS (2) times, the rows in turn; the table gives each row's median.
# The target is ddp's final validation loss after PEERS_STEPS steps, with tolerance PEERS_TOL; the other
# rows train PEERS_STEP_FACTOR x as many steps and are timed to the first validation (every PEERS_EVAL
# steps, the clock stopped while validating) at or below it. Per row: seconds to the target, WAN bytes
# to it (region 0's TUN device both ways: everything between the two regions), compute utilisation
# (steps x the process's own per-step compute time, measured before the run without communication, over
# the training seconds; mean of the two processes), and whether the traffic was encrypted. A framework
# that does not install or run here is a row with the reason. The last line is the summary:
#   xdc_vs_best_peer_time=<best peer's seconds / xdc's> xdc_vs_best_peer_bytes=<best peer's bytes / xdc's>
# (medians; xdc's best row for each).
# Root (namespaces). The frameworks go into the venv PEERS_VENV (default /root/.cache/xdc/peers-venv),
# made here when missing; torch comes from PEERS_TORCH_VENV's site-packages when that has it (the PyTorch
# example's venv), else from PyPI. Smoke run: PEERS_STEPS=20 PEERS_REPEATS=1 PEERS_ROWS="ddp xdc" make bench-peers
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONDONTWRITEBYTECODE=1 # the bench leaves nothing in the tree
xdc=$(realpath "${XDC_BIN:-build/xdc}")
steps=${PEERS_STEPS:-100}
factor=${PEERS_STEP_FACTOR:-3}
H=${PEERS_H:-10}
evalint=${PEERS_EVAL:-10}
tol=${PEERS_TOL:-0.01}
rows=${PEERS_ROWS:-ddp torchft torchft-stream hivemind xdc xdc-best}
reps=${PEERS_REPEATS:-2}
best_codec=${PEERS_XDC_BEST_CODEC:-sparse:0.05:4}
row_timeout=${PEERS_ROW_TIMEOUT:-900}
venv=${PEERS_VENV:-/root/.cache/xdc/peers-venv}
torch_venv=${PEERS_TORCH_VENV:-/root/.cache/xdc/torch-venv}
# The xdc row's package and library: this repo's python/ and build's libxdc.so unless given.
xdc_python=${PEERS_XDC_PYTHON:-$PWD/python}
xdc_lib=${XDC_LIB:-$(dirname "$xdc")/libxdc.so}
topo=$PWD/bench/peers/two-region.yaml
xsteps=$(awk -v s="$steps" -v f="$factor" 'BEGIN { printf "%d", s * f + 0.5 }')
if [ "$(id -u)" != 0 ]; then
    echo "bench-peers: needs root (network namespaces)" >&2
    exit 77
fi
work=$(mktemp -d /tmp/xdc-bench-peers-XXXXXX)
prefix=xdcpeers$$
. examples/launch/netns.sh
pids=()
cleanup() {
    local st=$?
    [ ${#pids[@]} -gt 0 ] && xdc_stop_pids "${pids[@]}"
    xdc_netns_down "$prefix" || st=70
    if [ -n "${PEERS_KEEP:-}" ]; then echo "bench-peers: kept $work" >&2; else rm -rf "$work"; fi
    trap - EXIT
    exit $st
}
trap 'exit 75' INT TERM
trap cleanup EXIT

# ---- the frameworks: a venv of their own, over the example's torch when it is there --------------------
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
py=$venv/bin/python
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -x "$torch_venv/bin/python" ] && [ ! -f "$site/peers-torch.pth" ]; then
    "$torch_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/peers-torch.pth"
fi
# the package a row needs from PyPI (ddp: torch alone; the xdc rows: this repo's)
need() { case $1 in torchft*) echo torchft ;; hivemind) echo hivemind ;; xdc*) echo xdc ;; *) echo torch ;; esac; }
declare -A why
# shellcheck disable=SC2046 # the packages are a word list
for pkg in torch $(for r in $rows; do need "$r"; done | grep -vx 'torch\|xdc' | sort -u); do
    "$py" -c "import $pkg" 2>/dev/null && continue
    echo "bench-peers: pip install $pkg (into $venv)..." >&2
    if ! "$py" -m pip install -q "$pkg" >"$work/pip-$pkg.log" 2>&1; then
        why[$pkg]="pip install $pkg failed: $(grep -E '^ERROR' "$work/pip-$pkg.log" | head -1 | cut -c1-160)"
        echo "bench-peers: ${why[$pkg]}" >&2
    fi
done
[ -z "${why[torch]:-}" ] || { echo "bench-peers: no torch, nothing to compare" >&2; exit 69; }
[ -n "${XDC_LIB:-}" ] || make --no-print-directory "$xdc_lib" >/dev/null

# ---- the link -------------------------------------------------------------------------------------------
XDC=$xdc xdc_netns_up "$prefix" "$topo" "$work/wan-emu.log"
pids+=("$XDC_NETNS_PID")
ns() { echo "$prefix-$1"; } # region i's namespace; 2 is the coordinator's host (10.77.0.3)

# peer ROW RANK STEPS [ARGS]: one member in region RANK's namespace (background; its PID appended to
# pids), writing into $out (the repetition's folder).
peer() {
    local row=$1 rank=$2 n=$3
    shift 3
    ip netns exec "$(ns "$rank")" env PEERS_ADDR="10.77.0.$((rank + 1))" GLOO_SOCKET_IFNAME=xw0 \
        timeout "$row_timeout" "$py" bench/peers/peer.py "$row" --rank "$rank" --world 2 --out "$out" \
        --steps "$n" --H "$H" --eval-every "$evalint" "$@" >"$out/$row-$rank.log" 2>&1 &
    pids+=($!)
}

# run_row ROW STEPS: both members; a failed row leaves its reason in $work/ROW.why.
run_row() {
    local row=$1 n=$2 extra=() rc=0 st p
    echo "bench-peers: running $row ($n steps)..." >&2
    pids=("$XDC_NETNS_PID")
    local stop=()
    case $row in
    torchft*)
        ip netns exec "$(ns 0)" timeout "$row_timeout" "$venv/bin/torchft_lighthouse" --min_replicas 2 \
            --bind 10.77.0.1:29511 --join_timeout_ms 10000 >"$out/lighthouse.log" 2>&1 &
        extra+=($!)
        ;;
    hivemind)
        [ -n "$target" ] && stop=(--stop-at "$target")
        ;;
    xdc*)
        run_xdc "$row" "$n"
        return
        ;;
    esac
    peer "$row" 0 "$n" "${stop[@]}"
    peer "$row" 1 "$n" "${stop[@]}"
    for p in "${pids[@]:1}"; do
        st=0
        wait "$p" || st=$?
        [ $rc -eq 0 ] && rc=$st
    done
    [ ${#extra[@]} -gt 0 ] && xdc_stop_pids "${extra[@]}"
    pids=("$XDC_NETNS_PID")
    [ $rc -eq 0 ] || row_failed "$row" "$rc"
}

# row_failed ROW STATUS: the reason, from the members' error files or the last line of their logs.
row_failed() {
    local row=$1 rc=$2 reason
    reason=$(awk 'FNR == 1 {print; exit}' "$out/$row"-error-*.txt 2>/dev/null || true)
    [ -n "$reason" ] || reason=$(tail -n 1 "$out/$row"-0.log "$out/$row"-1.log 2>/dev/null | grep -v '^==>' | grep . | head -1 || true)
    [ "$rc" = 124 ] && reason="timed out after $row_timeout s: $reason"
    echo "exit $rc: $reason" | cut -c1-200 >"$out/$row.why"
    echo "bench-peers: $row failed: $(cat "$out/$row.why")" >&2
}

# region_name I: the name of the topology's region I (0-based).
region_name() { awk -v k=$(($1 + 1)) '/^  - name:/ && ++i == k {print $3}' "$topo"; }

# The xdc rows (ROW STEPS; xdc-best with the codec $best_codec, xdc the link's): per-host keys (examples/launch/enroll.sh: the CA and the coordinator's key in the
# coordinator's host, each region's key made in its own folder), the coordinator in namespace 2 and one
# `xdc agent --exec` per region namespace, its member running peer.py with this repo's python/.
run_xdc() {
    local row=$1 n=$2 id=peers-$$-$RANDOM dir=$out/$1 rc=0 st r region cpid apids=() codec=link
    [ "$row" = xdc-best ] && codec=$best_codec
    mkdir -p "$dir"
    cat >"$dir/run.yaml" <<EOT
model: $PWD/examples/models/tiny.yaml
data: /usr/share/games/fortunes
mode: sync
pipeline_stages: 1
steps: $n
threads: 1
codec: "$codec"
EOT
    XDC=$xdc examples/launch/enroll.sh init "$dir/ca" "$id" "$dir/coordinator" 2>"$dir/enroll.log"
    for r in 0 1; do
        region=$(region_name "$r")
        # shellcheck disable=SC2046 # the certificate lines are NAME BASE64 word pairs
        XDC=$xdc examples/launch/enroll.sh install "$dir/nodes/$region" $(
            XDC=$xdc examples/launch/enroll.sh request "$topo" "$dir/nodes/$region" "$id" "$region" 0 \
                "10.77.0.$((r + 1))" 2>>"$dir/enroll.log" |
                XDC=$xdc examples/launch/enroll.sh sign "$dir/ca" 2>>"$dir/enroll.log") >>"$dir/enroll.log" 2>&1
    done
    ip netns exec "$(ns 2)" timeout "$row_timeout" "$xdc" coordinator -t "$topo" -c "$dir/run.yaml" --run-dir "$dir" \
        --run-id "$id" --host 10.77.0.3 --port 29400 --cert-dir "$dir/coordinator" >"$out/$row-coordinator.log" 2>&1 &
    cpid=$!
    pids+=("$cpid")
    xdc_wait_started 30 "$cpid" "$out/$row-coordinator.log" '--coordinator ' "the xdc coordinator" || {
        row_failed "$row" $?
        return
    }
    for r in 0 1; do
        region=$(region_name "$r")
        ip netns exec "$(ns "$r")" env PYTHONPATH="$xdc_python" XDC_LIB="$xdc_lib" \
            timeout "$row_timeout" "$xdc" agent --topology "$topo" --config "$dir/run.yaml" --run-dir "$dir" \
            --region "$region" --node 0 --host "10.77.0.$((r + 1))" --coordinator 10.77.0.3:29400 --run-id "$id" \
            --cert-dir "$dir/nodes/$region" --exec -- "$py" "$PWD/bench/peers/peer.py" "$row" --rank "$r" --world 2 \
            --out "$out" --steps "$n" --H "$H" --eval-every "$evalint" >"$out/$row-$r.log" 2>&1 &
        apids+=($!)
        pids+=($!)
    done
    for p in "${apids[@]}"; do
        st=0
        wait "$p" || st=$?
        [ $rc -eq 0 ] && rc=$st
    done
    st=0
    wait "$cpid" || st=$?
    [ $rc -eq 0 ] && rc=$st
    pids=("$XDC_NETNS_PID")
    [ $rc -eq 0 ] || row_failed "$row" "$rc"
}

t_start=$(date +%s)
target=
for k in $(seq 1 "$reps"); do
    out=$work/rep$k
    mkdir -p "$out"
    for row in $rows; do
        n=$xsteps
        [ "$row" = ddp ] && n=$steps
        if [ -n "${why[$(need "$row")]:-}" ]; then
            echo "${why[$(need "$row")]}" >"$out/$row.why"
            continue
        fi
        run_row "$row" "$n"
        # the target, from the first repetition's ddp (its loss is the same every time: same seed, batches)
        [ "$row" = ddp ] && [ -z "$target" ] && [ -f "$out/ddp.json" ] &&
            target=$("$py" bench/peers/report.py --target "$out/ddp.json" "$tol")
    done
done
# shellcheck disable=SC2086 # the rows are a word list
"$py" bench/peers/report.py "$work" "$tol" "$reps" $rows
echo "bench-peers: $(($(date +%s) - t_start)) s for the rows, load average $(cut -d' ' -f1-3 /proc/loadavg)"
