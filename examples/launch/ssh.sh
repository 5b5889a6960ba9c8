#!/usr/bin/env bash
# ssh.sh — start one agent per node over ssh for a topology whose regions list real host names (or
# addresses): every node of every region, each started separately on its own host, as an operator would.
#
#   examples/launch/ssh.sh TOPOLOGY RUN.yaml RUN_DIR COORDINATOR_HOST:PORT RUN_ID [REGION...]
#
# With REGIONs, only their nodes (the other regions started some other way, e.g. slurm.sbatch).
# Start `xdc coordinator -t TOPOLOGY -c RUN.yaml --run-dir RUN_DIR --run-id RUN_ID --host ADDR` first.
# RUN_DIR, TOPOLOGY and RUN.yaml must be at the same paths on every node (a shared file system).
# Environment:
#   XDC_SSH   how to run a command on a host, called as `$XDC_SSH HOST COMMAND...` (default `ssh -n`);
#             examples/launch/netns.sh sets `netns.sh exec PREFIX` to start each agent in its host's
#             network namespace instead (test multihost_netns_agents_match_launch)
#   XDC       the xdc binary, here and on the nodes (default: xdc on the PATH)
# Waits for every agent; exits 0 when all succeeded, else with the first failed agent's status.
set -euo pipefail
if [ $# -lt 5 ]; then
    echo "usage: $0 TOPOLOGY RUN.yaml RUN_DIR COORDINATOR_HOST:PORT RUN_ID [REGION...]" >&2
    exit 64
fi
topo=$1 run=$2 dir=$3 coord=$4 id=$5
shift 5
only=" $* "
remote=${XDC_SSH:-ssh -n}
xdc=${XDC:-xdc}

# ---- certificates: the only place this script handles them --------------------------------------------
# Today every node reads the run's CA, certificates and keys from RUN_DIR/certs/, made by the coordinator
# in the shared run folder (so every node holds every key). With per-node keys this function is what
# changes: have HOST make its key, sign it, and print the agent's flags for its own certificate, key and CA.
agent_cert_flags() {
    local host=$1
    if [ ! -r "$dir/certs/ca.pem" ]; then
        echo "ssh.sh: $dir/certs/ca.pem is not readable: start the coordinator first with --run-dir $dir" \
            "(for $host)" >&2
        return 66
    fi
}
# ---------------------------------------------------------------------------------------------------------

# "REGION NODE HOST" per node, from the topology (exit 78 with file:line:col when it does not load).
nodes=$("$xdc" topo check --hosts "$topo")
for r in $only; do
    if ! grep -q "^$r " <<<"$nodes"; then
        echo "ssh.sh: $topo has no region '$r'" >&2
        exit 64
    fi
done
pids=() names=()
while read -r region node host; do
    [ "$only" != "  " ] && [[ $only != *" $region "* ]] && continue
    flags=$(agent_cert_flags "$host")
    # $remote and $flags are word lists on purpose: a command prefix and zero or more flags.
    # shellcheck disable=SC2086
    $remote "$host" "$xdc" agent --topology "$topo" --config "$run" --run-dir "$dir" --region "$region" \
        --node "$node" --host "$host" --coordinator "$coord" --run-id "$id" $flags &
    pids+=($!)
    names+=("$region/$host")
done <<<"$nodes"
rc=0
for i in "${!pids[@]}"; do
    st=0
    wait "${pids[$i]}" || st=$?
    [ $st -eq 0 ] && continue
    echo "ssh.sh: agent ${names[$i]} exited with status $st" >&2
    [ $rc -eq 0 ] && rc=$st
done
exit $rc
