#!/usr/bin/env bash
# ssh.sh — start one agent per node over ssh for a topology whose regions list real host names (or
# addresses): every node of every region, each started separately on its own host, as an operator would.
#
#   examples/launch/ssh.sh TOPOLOGY RUN.yaml RUN_DIR RENDEZVOUS RUN_ID [REGION...]
#
# RENDEZVOUS is the coordinator's HOST:PORT, or etcd://HOST:PORT/PREFIX when etcd is the rendezvous (the
# agents get --rdzv instead of --coordinator; `xdc coordinator --rdzv` the same URL first, without --host).
# With REGIONs, only their nodes (the other regions started some other way, e.g. slurm.sbatch).
# Keys: every node makes its own (examples/launch/enroll.sh; docs/security.md). On the CA host, once:
#   enroll.sh init CA_DIR RUN_ID COORD_DIR     (CA_DIR/ca.key stays there; COORD_DIR: the coordinator's)
# then start `xdc coordinator -t TOPOLOGY -c RUN.yaml --run-dir RUN_DIR --run-id RUN_ID --host ADDR
# --cert-dir COORD_DIR`. For each host this script has the host make a key and request per worker rank
# (`enroll.sh request`, over $XDC_SSH), has the requests signed on the CA host ($XDC_SIGN), sends the host
# its certificates, ca.pem and crl.pem (`enroll.sh install`) and starts its agent with --cert-dir: no
# host sees another's key or the CA's.
# TOPOLOGY, RUN.yaml, RUN_DIR and this folder (enroll.sh) must be at the same paths on every node.
# Environment:
#   XDC_SIGN  required: the command that signs request lines on stdin on the CA host, called as
#             `$XDC_SIGN <requests >certificates`, e.g.
#             `ssh ca.example.net /opt/xdc/examples/launch/enroll.sh sign /etc/xdc/ca-RUN_ID`
#   XDC_NODE_CERTS  the folder on each node under which its keys go, RUN_ID/REGION below it (default
#             /var/tmp/xdc-certs); it must be local to the node (not a shared file system)
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
rdzv_flag=--coordinator
[[ $coord == etcd://* ]] && rdzv_flag=--rdzv
shift 5
only=" $* "
remote=${XDC_SSH:-ssh -n}
xdc=${XDC:-xdc}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# ---- certificates: the only place this script handles them --------------------------------------------
# Per-node keys: HOST makes a key and request per worker rank of node NODE of REGION in its own folder, the
# CA host signs them, HOST gets its certificates, ca.pem and crl.pem back; prints the agent's flags.
# stdin is /dev/null for $remote: the loop below reads the node list from stdin.
enroll="$here/enroll.sh"
agent_cert_flags() {
    local region=$1 node=$2 host=$3 req signed
    local certs=${XDC_NODE_CERTS:-/var/tmp/xdc-certs}/$id/$region
    # $remote and $XDC_SIGN are command prefixes (word lists) on purpose; base64 words survive ssh's re-parsing.
    # shellcheck disable=SC2086
    req=$($remote "$host" env XDC="$xdc" bash "$enroll" request "$topo" "$certs" "$id" "$region" "$node" "$host" \
        </dev/null) || { echo "ssh.sh: $host could not make its keys (enroll.sh request)" >&2; return 65; }
    # shellcheck disable=SC2086
    signed=$($XDC_SIGN <<<"$req") || { echo "ssh.sh: the CA host did not sign $host's requests (XDC_SIGN)" >&2; return 65; }
    # shellcheck disable=SC2086
    $remote "$host" env XDC="$xdc" bash "$enroll" install "$certs" $signed </dev/null >&2 ||
        { echo "ssh.sh: $host could not install its certificates (enroll.sh install)" >&2; return 65; }
    echo "--cert-dir $certs"
}
if [ -z "${XDC_SIGN:-}" ]; then
    echo "ssh.sh: XDC_SIGN is not set: the command that signs key requests on the CA host, e.g." \
        "XDC_SIGN='ssh CA_HOST $here/enroll.sh sign CA_DIR' (see the header)" >&2
    exit 64
fi
# ---------------------------------------------------------------------------------------------------------

# "REGION NODE HOST" per node, from the topology (exit 78 with file:line:col when it does not load).
nodes=$("$xdc" topo check --hosts "$topo")
for r in $only; do
    if ! grep -q "^$r " <<<"$nodes"; then
        echo "ssh.sh: $topo has no region '$r'" >&2
        exit 64
    fi
done
# Every host enrolled before any agent starts: a host that cannot get its keys stops the script with
# nothing started.
starts=() flags=()
while read -r region node host; do
    [ "$only" != "  " ] && [[ $only != *" $region "* ]] && continue
    flags+=("$(agent_cert_flags "$region" "$node" "$host")")
    starts+=("$region $node $host")
done <<<"$nodes"
pids=() names=()
for i in "${!starts[@]}"; do
    read -r region node host <<<"${starts[$i]}"
    # $remote and the flags are word lists on purpose: a command prefix and zero or more flags.
    # shellcheck disable=SC2086
    $remote "$host" "$xdc" agent --topology "$topo" --config "$run" --run-dir "$dir" --region "$region" \
        --node "$node" --host "$host" "$rdzv_flag" "$coord" --run-id "$id" ${flags[$i]} &
    pids+=($!)
    names+=("$region/$host")
done
rc=0
for i in "${!pids[@]}"; do
    st=0
    wait "${pids[$i]}" || st=$?
    [ $st -eq 0 ] && continue
    echo "ssh.sh: agent ${names[$i]} exited with status $st" >&2
    [ $rc -eq 0 ] && rc=$st
done
exit $rc
