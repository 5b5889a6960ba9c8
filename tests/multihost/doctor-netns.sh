#!/usr/bin/env bash
# doctor-netns.sh — `xdc doctor` on the multi-host namespace set-up (root): two regions on network hosts
# of their own behind the netns WAN emulator (examples/launch/netns.sh's xdc_netns_up), each region's
# node with its own key (examples/launch/enroll.sh) running `xdc doctor --serve` on its wan_endpoint, and
# `xdc doctor` run from us-east's host three times:
#   healthy   the network as the topology says                                   (expected: exit 0)
#   slowed    us-east's outgoing rate cut to a quarter (`tc qdisc change` on its tbf, as the emulator set it)
#   stopped   the rate restored and eu-west's doctor server stopped
# Each doctor's output follows a line `== PHASE exit RC`; the caller judges them (test
# multihost_doctor_on_namespaces_passes_then_names_the_fault).
#
#   tests/multihost/doctor-netns.sh XDC WORKDIR
#
# Exit 0 when every phase ran (whatever the doctor's verdicts), 77 when not root, else the failing step's
# code. Namespaces and servers are stopped at the end, also on failure.
set -euo pipefail
launch=$(cd "$(dirname "$0")/../../examples/launch" && pwd)
. "$launch/netns.sh"

if [ $# -ne 2 ]; then
    echo "usage: $0 XDC WORKDIR" >&2
    exit 64
fi
if [ "$(id -u)" != 0 ]; then
    echo "skip: network namespaces need root (CAP_NET_ADMIN)" >&2
    exit 77
fi
export XDC
XDC=$(realpath "$1")
mkdir -p "$2"
w=$(realpath "$2")
prefix=xdcdr$$
unset XDC_COORDINATOR XDC_RDZV XDC_REGION

# 40 Mbit/s and 10 ms each way: a 150 ms probe moves 750 kB, well within what the TUN wire carries on a
# loaded machine, and a quarter of it (10 Mbit/s) is clearly more than 2x off.
topo=$w/topo.yaml
cat >"$topo" <<'EOF'
name: doctor-netns
regions:
  - {name: us-east, nodes: 10.77.0.1, gpus_per_node: 0, workers_per_node: 1,
     gpu: {model: cpu, bf16_tflops: 0.05, memory_gib: 4}, wan_endpoint: 10.77.0.1:29400}
  - {name: eu-west, nodes: 10.77.0.2, gpus_per_node: 0, workers_per_node: 1,
     gpu: {model: cpu, bf16_tflops: 0.05, memory_gib: 4}, wan_endpoint: 10.77.0.2:29400}
links:
  - {from: us-east, to: eu-west, bandwidth_gbps: 0.04, rtt_ms: 10, streams: 2}
EOF

# Per-node keys: the CA in $w/ca; each region's host makes its key in $w/nodes/REGION.
enroll=$launch/enroll.sh
rm -rf "$w/ca" "$w/coordinator" "$w/nodes"
bash "$enroll" init "$w/ca" doctor-netns "$w/coordinator" 2>"$w/enroll.log" || { cat "$w/enroll.log" >&2; exit 78; }
for r in us-east eu-west; do
    req=$(bash "$enroll" request "$topo" "$w/nodes/$r" doctor-netns "$r" 0 2>>"$w/enroll.log")
    # shellcheck disable=SC2046 # the signed lines are NAME BASE64 word pairs
    bash "$enroll" install "$w/nodes/$r" $(bash "$enroll" sign "$w/ca" <<<"$req" 2>>"$w/enroll.log") 2>>"$w/enroll.log"
done

servers=()
cleanup() {
    local rc=$?
    [ ${#servers[@]} -gt 0 ] && xdc_stop_pids "${servers[@]}"
    xdc_netns_down "$prefix" || rc=70
    if [ $rc -ne 0 ]; then
        for f in "$w"/wan-emu.log "$w"/serve-*.log "$w"/enroll.log; do
            [ -f "$f" ] && { echo "---- $f" >&2; tail -n 20 "$f" >&2; }
        done
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 75' INT TERM

xdc_netns_up "$prefix" "$topo" "$w/wan-emu.log"
echo "doctor-netns.sh: namespaces $prefix-* up" >&2
# One probe server per region, on its host's wan_endpoint, with its own key (a bounded life: 120 s).
i=0
for r in us-east eu-west; do
    (xdc_netns_exec "$prefix" "10.77.0.$((i + 1))" "$XDC" doctor --serve -t "$topo" --certs "$w/nodes/$r" \
        --region "$r" --duration 120s) >"$w/serve-$r.log" 2>&1 &
    servers+=($!)
    xdc_wait_started 20 "$!" "$w/serve-$r.log" 'answering probes on port' "xdc doctor --serve ($r)"
    i=$((i + 1))
done

# `xdc doctor` from us-east's host; prints `== PHASE exit RC` and the doctor's output.
doctor() {
    local rc=0 out
    out=$( (xdc_netns_exec "$prefix" 10.77.0.1 "$XDC" doctor -t "$topo" --certs "$w/nodes/us-east" \
        --region us-east --probe-seconds 150ms --pings 3) 2>&1) || rc=$?
    printf '== %s exit %d\n%s\n' "$1" "$rc" "$out"
}
doctor healthy

# us-east's egress (the us-east -> eu-west link) at a quarter of its rate, the tbf as the emulator made it.
tbf() { ip netns exec "$prefix-0" tc qdisc change dev xw0 root tbf rate "$1" burst 16384 latency 100ms; }
tbf 10000kbit
doctor slowed
tbf 40000kbit

xdc_stop_pids "${servers[1]}"
doctor stopped
