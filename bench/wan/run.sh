#!/usr/bin/env bash
# bench/wan/run.sh — WAN transport goodput against baselines measured in the same run:
#   1. emulated links, 100 Mbit/s 40 ms and 1 Gbit/s 80 ms RTT: xdc (TLS 1.3, K streams) vs `iperf3 -P K`
#      (plain TCP) over the same link — the network-namespace mode of `xdc wan-emu --netns` (kernel TCP over
#      a TUN wire + tc tbf) when root may create namespaces, else the userspace relay;
#   2. loopback: xdc TLS vs iperf3 plain TCP with K streams (the CPU ceiling), and xdc's CPU seconds per GB.
# Last line: wan_vs_iperf3=<ratio on the 100 Mbit/s link> ... (more ratios as key=value).
# Needs: $XDC_BIN (make sets it), iperf3. Env: STREAMS (4), SECONDS_PER_RUN (8).
set -euo pipefail
XDC=${XDC_BIN:-build/xdc}
K=${STREAMS:-4}
T=${SECONDS_PER_RUN:-8}
command -v iperf3 >/dev/null || { echo "bench-wan: iperf3 not installed (make deps-bench)" >&2; exit 69; }
WORK=$(mktemp -d /tmp/xdc-bench-wan.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM

"$XDC" certs init --dir "$WORK" --run bench >/dev/null
"$XDC" certs issue --dir "$WORK" --region a --rank 0 >/dev/null
"$XDC" certs issue --dir "$WORK" --region b --rank 0 >/dev/null
CRED_B=(--cert "$WORK/b-0.pem" --key "$WORK/b-0.key" --ca "$WORK/ca.pem")
CRED_A=(--cert "$WORK/a-0.pem" --key "$WORK/a-0.key" --ca "$WORK/ca.pem")

# Where the server side and the client side run: prefixes set per case ("" = this namespace).
SRV_NS=() CLI_NS=() DST=127.0.0.1
wait_port() { # wait until something listens on port $1 on the server side
    for _ in $(seq 200); do "${SRV_NS[@]}" ss -ltn "sport = :$1" | grep -q LISTEN && return 0; sleep 0.05; done
    echo "bench-wan: nothing listens on port $1" >&2; return 1
}

# iperf3 -P K for T seconds to port $2 (server on $1); prints receiver-side Gbit/s.
iperf_gbps() {
    "${SRV_NS[@]}" iperf3 -s -p "$1" -1 >/dev/null 2>&1 & PIDS+=($!)
    wait_port "$1"
    "${CLI_NS[@]}" iperf3 -c "$DST" -p "$2" -P "$K" -t "$T" -J > "$WORK/iperf.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.4f" % (d["end"]["sum_received"]["bits_per_second"]/1e9))' "$WORK/iperf.json"
}

# xdc wan send of $3 bytes to port $2 (listener on $1); prints the send line.
xdc_line() {
    "${SRV_NS[@]}" "$XDC" wan listen --port "$1" "${CRED_B[@]}" --once >/dev/null 2>&1 & PIDS+=($!)
    wait_port "$1"
    "${CLI_NS[@]}" "$XDC" wan send --to "$DST:$2" --bytes "$3" --streams "$K" --expect b/0 "${CRED_A[@]}" 2>/dev/null
}
field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

emu_link() { # $1 Gbit/s, $2 rtt ms -> prints "xdc_gbps iperf_gbps"
    local base=$((20000 + RANDOM % 20000)) off=1000
    cat > "$WORK/topo.yaml" <<YAML
name: bench
regions:
  - {name: a, nodes: n1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05, memory_gib: 4},
     intra: {bandwidth_gbps: 40, latency_us: 10}, wan_endpoint: 127.0.0.1:$((base + 500))}
  - {name: b, nodes: n2, gpus_per_node: 0, workers_per_node: 2, gpu: {model: cpu, bf16_tflops: 0.05, memory_gib: 4},
     intra: {bandwidth_gbps: 40, latency_us: 10}, wan_endpoint: 127.0.0.1:$base}
links:
  - {from: a, to: b, bandwidth_gbps: $1, rtt_ms: $2, streams: $K}
YAML
    local ip bytes line dport=$((base + off)) emu
    if [ "$MODE" = netns ]; then
        "$XDC" wan-emu --topology "$WORK/topo.yaml" --netns "$NSP" >/dev/null & emu=$!; PIDS+=($emu)
        for _ in $(seq 200); do ip netns list | grep -q "^$NSP-1" && ip -n "$NSP-1" addr show xw0 2>/dev/null | grep -q 10.77 && break; sleep 0.05; done
        SRV_NS=(ip netns exec "$NSP-1") CLI_NS=(ip netns exec "$NSP-0") DST=10.77.0.2 dport=$base
    else
        "$XDC" wan-emu --topology "$WORK/topo.yaml" --port-offset $off >/dev/null & emu=$!; PIDS+=($emu)
        SRV_NS=() CLI_NS=() DST=127.0.0.1
        wait_port "$dport"
    fi
    ip=$(iperf_gbps "$base" "$dport")
    bytes=$(python3 -c "print(int($1*1e9/8*$T))")
    line=$(xdc_line $((base + 1)) $((dport + 1)) "$bytes") # rank 1's port: iperf3 may still hold rank 0's
    kill "$emu"; wait "$emu" 2>/dev/null || true
    SRV_NS=() CLI_NS=() DST=127.0.0.1
    echo "$(field goodput_gbps "$line") $ip"
}

MODE=relay NSP=xb$$
if [ "$(id -u)" = 0 ] && ip netns add "$NSP-probe" 2>/dev/null; then ip netns del "$NSP-probe"; MODE=netns; fi
[ "${WAN_BENCH_MODE:-}" = relay ] && MODE=relay
echo "emulated links: $MODE mode"
printf '%-28s %12s %12s %8s\n' "case" "xdc_gbps" "iperf3_gbps" "ratio"
read -r x100 i100 < <(emu_link 0.1 40)
r100=$(python3 -c "print('%.3f' % ($x100/$i100))")
printf '%-28s %12s %12s %8s\n' "$MODE 100Mbit/s 40ms K=$K" "$x100" "$i100" "$r100"
read -r x1g i1g < <(emu_link 1 80)
r1g=$(python3 -c "print('%.3f' % ($x1g/$i1g))")
printf '%-28s %12s %12s %8s\n' "$MODE 1Gbit/s 80ms K=$K" "$x1g" "$i1g" "$r1g"

lp=$((20000 + RANDOM % 20000))
ilo=$(iperf_gbps "$lp" "$lp")
line=$(xdc_line $((lp + 1)) $((lp + 1)) 4G)
xlo=$(field goodput_gbps "$line")
cpu=$(field cpu_s "$line")
cpu_per_gb=$(python3 -c "print('%.3f' % ($cpu/4.294967296))")
rlo=$(python3 -c "print('%.3f' % ($xlo/$ilo))")
printf '%-28s %12s %12s %8s\n' "loopback K=$K (TLS vs TCP)" "$xlo" "$ilo" "$rlo"
echo "xdc sender CPU: ${cpu}s for 4 GiB -> ${cpu_per_gb} CPU-s/GB (TLS + framing, sender side)"
echo "wan_vs_iperf3=$r100 wan_vs_iperf3_1g80ms=$r1g loopback_tls_vs_tcp=$rlo cpu_s_per_gb=$cpu_per_gb streams=$K mode=$MODE"
