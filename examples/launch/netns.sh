#!/usr/bin/env bash
# netns.sh — a multi-host run rehearsed on one machine (root): each region's node on a network host of
# its own (a namespace with its own address), the coordinator on another, the WAN between them the
# topology's links through `xdc wan-emu --netns` (kernel TCP over emulated delay, rate and loss; no
# loopback relays), and each region's agent started separately through examples/launch/ssh.sh, with
# this script standing in for ssh, each host with keys of its own (RUN_DIR/nodes/ID/REGION, signed on the
# coordinator's host, which keeps the CA in RUN_DIR/ca: examples/launch/enroll.sh). What
# `make demo-multihost` runs; test multihost_netns_agents_match_launch.
#
#   examples/launch/netns.sh run TOPOLOGY RUN.yaml RUN_DIR    the whole run; the coordinator's final line
#   examples/launch/netns.sh exec PREFIX HOST COMMAND...      run COMMAND on emulated host HOST (10.77.0.K
#                                                             is namespace PREFIX-(K-1)): ssh.sh's XDC_SSH
#
# The topology's node names must be the namespaces' addresses: region i's node is 10.77.0.(i+1), one node
# per region (examples/topology/multihost-2region.yaml); the coordinator is 10.77.0.(N+1) for N regions.
# XDC is the xdc binary (default build/xdc). Sourced, this file only defines the xdc_netns_* functions
# (for other scripts that need the same hosts). Namespaces are removed at the end, also on failure.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"

XDC_NETNS_PID=
# What netns_run started, for its EXIT trap (globals: the trap runs after the function has returned).
netns_dir= netns_prefix= netns_coord_pid= netns_agents_pid=

# xdc_netns_up PREFIX TOPOLOGY LOG: start `xdc wan-emu --netns PREFIX --coordinator` in the background
# (its PID in XDC_NETNS_PID, its output in LOG) and wait until its namespaces are up.
xdc_netns_up() {
    local prefix=$1 topo=$2 log=$3
    "${XDC:-build/xdc}" wan-emu --topology "$topo" --netns "$prefix" --coordinator >"$log" 2>&1 &
    XDC_NETNS_PID=$!
    local rc=0
    xdc_wait_started 30 "$XDC_NETNS_PID" "$log" 'namespaces up' "xdc wan-emu --netns $prefix" || rc=$?
    [ $rc -eq 0 ] || cat "$log" >&2
    return $rc
}

# xdc_netns_down PREFIX: stop the emulator (it removes its namespaces); a namespace still there is removed
# here and reported (return 70).
xdc_netns_down() {
    local prefix=$1 left
    [ -n "$XDC_NETNS_PID" ] && xdc_stop_pids "$XDC_NETNS_PID"
    XDC_NETNS_PID=
    left=$(ip netns list | awk -v p="$prefix-" 'index($1, p) == 1 {print $1}')
    [ -z "$left" ] && return 0
    echo "netns.sh: namespaces left behind by the emulator, removing: $left" >&2
    for ns in $left; do ip netns del "$ns" || true; done
    return 70
}

# xdc_netns_exec PREFIX HOST COMMAND...: COMMAND in the namespace whose address is HOST.
xdc_netns_exec() {
    local prefix=$1 host=$2
    shift 2
    if [[ ! $host =~ ^10\.77\.0\.([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -lt 1 ]; then
        echo "netns.sh: host '$host' is not an emulated host address (10.77.0.K)" >&2
        return 64
    fi
    exec ip netns exec "$prefix-$((BASH_REMATCH[1] - 1))" "$@"
}

# Stop what netns_run started (the agents, the coordinator, the namespaces); show the logs on failure.
netns_cleanup() {
    local st=$? p=()
    [ -n "$netns_agents_pid" ] && p+=("-$netns_agents_pid") # ssh.sh's process group: it and its agents
    [ -n "$netns_coord_pid" ] && p+=("$netns_coord_pid")
    [ ${#p[@]} -gt 0 ] && xdc_stop_pids "${p[@]}"
    xdc_netns_down "$netns_prefix" || st=70
    if [ $st -ne 0 ]; then
        for f in "$netns_dir"/wan-emu.log "$netns_dir"/coordinator.log "$netns_dir"/agents.log; do
            [ -f "$f" ] && { echo "---- $f" >&2; tail -n 30 "$f" >&2; }
        done
    fi
    trap - EXIT
    exit $st
}

# The whole run: namespaces, coordinator, agents through ssh.sh, cleanup.
netns_run() {
    local topo=$1 run=$2 dir=$3 prefix=xdcmh$$ id=netns-$$ xdc
    xdc=$(realpath "${XDC:-build/xdc}")
    mkdir -p "$dir"
    dir=$(realpath "$dir")
    local nodes n_regions coord_host
    nodes=$("$xdc" topo check --hosts "$topo") || return 78
    n_regions=$(awk '{print $1}' <<<"$nodes" | sort -u | wc -l)
    local i=0 region node host last=
    while read -r region node host; do
        [ "$region" != "$last" ] && i=$((i + 1)) && last=$region
        if [ "$node" != 0 ] || [ "$host" != "10.77.0.$i" ]; then
            echo "netns.sh: $topo: region $region node $node is '$host'; here each region has one node named" \
                "10.77.0.(region index + 1): 10.77.0.$i" >&2
            return 78
        fi
    done <<<"$nodes"
    coord_host=10.77.0.$((n_regions + 1))
    if [ "$(id -u)" != 0 ]; then
        echo "skip: network namespaces need root (CAP_NET_ADMIN)" >&2
        return 77
    fi

    local rc=0 crc=0
    netns_dir=$dir netns_prefix=$prefix
    trap 'exit 75' INT TERM
    trap netns_cleanup EXIT
    XDC=$xdc xdc_netns_up "$prefix" "$topo" "$dir/wan-emu.log" || return $?
    echo "netns.sh: hosts up: $(grep -c 'ip netns exec' "$dir/wan-emu.log") namespaces $prefix-*," \
        "coordinator at $coord_host" >&2
    # Per-node keys: the coordinator's host is the CA host (DIR/ca: ca.key; DIR/coordinator: its own key);
    # each agent's host makes its keys under DIR/nodes/ID/REGION when ssh.sh enrols it, and has them signed
    # on the coordinator's host (XDC_SIGN below). No host's folder holds another's key.
    rm -rf "$dir/ca" "$dir/coordinator" "$dir/nodes"
    XDC=$xdc "$here/enroll.sh" init "$dir/ca" "$id" "$dir/coordinator" 2>"$dir/enroll.log" ||
        { cat "$dir/enroll.log" >&2; return 78; }
    # The coordinator on its own host, listening on that host's address.
    (xdc_netns_exec "$prefix" "$coord_host" timeout 600 "$xdc" coordinator -t "$topo" -c "$run" --run-dir "$dir" \
        --run-id "$id" --host "$coord_host" --port 29400 --cert-dir "$dir/coordinator") >"$dir/coordinator.log" 2>&1 &
    netns_coord_pid=$!
    xdc_wait_started 30 "$netns_coord_pid" "$dir/coordinator.log" '--coordinator ' "the coordinator at $coord_host" ||
        return $?
    # One agent per host, each started separately in its own namespace: ssh.sh with this script as ssh.
    # setsid: ssh.sh and every agent it starts form one process group, stopped together on failure.
    XDC=$xdc XDC_SSH="$here/netns.sh exec $prefix" XDC_NODE_CERTS="$dir/nodes" \
        XDC_SIGN="$here/netns.sh exec $prefix $coord_host env XDC=$xdc $here/enroll.sh sign $dir/ca" \
        setsid "$here/ssh.sh" "$topo" "$run" "$dir" "$coord_host:29400" "$id" >"$dir/agents.log" 2>&1 &
    netns_agents_pid=$!
    # On a terminal, follow the agents (region 0's first worker prints the progress lines) while they run.
    [ -t 2 ] && tail --pid="$netns_agents_pid" -n +1 -f "$dir/agents.log" >&2 &
    wait "$netns_agents_pid" || rc=$?
    netns_agents_pid=
    wait "$netns_coord_pid" || crc=$?
    netns_coord_pid=
    if [ $rc -ne 0 ] || [ $crc -ne 0 ]; then
        echo "netns.sh: the run failed: agents exit $rc, coordinator exit $crc" >&2
        return $((crc ? crc : rc))
    fi
    grep -E '^(xdc launch: run|final )' "$dir/coordinator.log"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-}" in
    exec)
        [ $# -ge 4 ] || { echo "usage: $0 exec PREFIX HOST COMMAND..." >&2; exit 64; }
        shift
        xdc_netns_exec "$@"
        ;;
    run)
        [ $# -eq 4 ] || { echo "usage: $0 run TOPOLOGY RUN.yaml RUN_DIR" >&2; exit 64; }
        netns_run "$2" "$3" "$4"
        ;;
    *)
        echo "usage: $0 run TOPOLOGY RUN.yaml RUN_DIR | $0 exec PREFIX HOST COMMAND..." >&2
        exit 64
        ;;
    esac
fi
