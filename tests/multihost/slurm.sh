#!/usr/bin/env bash
# slurm.sh — a real Slurm for examples/launch/slurm.sbatch: bring up a one-node cluster (munged,
# slurmctld, slurmd) as root in a folder of its own, start `xdc coordinator`, submit slurm.sbatch once per
# region exactly as its header tells a user, and print the coordinator's final line. Every daemon is
# stopped by its PID at the end, also on failure. Used by test multihost_slurm_sbatch_matches_launch.
#
#   tests/multihost/slurm.sh XDC TOPO.yaml RUN.yaml WORKDIR [etcd]
#
# With `etcd`, the layout of docs/runtime.md's 3-region example: etcd (started here on free loopback
# ports, data in WORKDIR) is the rendezvous, `xdc coordinator --rdzv` clears the run's prefix and reports,
# the first region runs under Slurm (XDC_RDZV instead of XDC_COORDINATOR) and the others through
# examples/launch/ssh.sh (its rendezvous argument the etcd URL; XDC_SSH a stand-in that runs the command
# here), each node with its own keys either way.
#
# Exit 0 with the run's `final ... params_xxh64=...` line on stdout; 77 when not root (the test skips);
# otherwise the failing step's code, with the logs that explain it on stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/examples/launch/common.sh"

if [ $# -ne 4 ] && { [ $# -ne 5 ] || [ "$5" != etcd ]; }; then
    echo "usage: $0 XDC TOPO.yaml RUN.yaml WORKDIR [etcd]" >&2
    exit 64
fi
xdc=$(realpath "$1") topo=$(realpath "$2") run=$(realpath "$3") work=$4 mode=${5:-builtin}
if [ "$(id -u)" != 0 ]; then
    echo "skip: a Slurm cluster (munged, slurmctld, slurmd) needs root" >&2
    exit 77
fi
for b in munged slurmctld slurmd sbatch scontrol sinfo squeue; do
    if ! command -v "$b" >/dev/null; then
        echo "slurm.sh: $b not found: \`make deps\` installs Slurm and munge (slurmctld slurmd slurm-client munge)" >&2
        exit 69
    fi
done

# One cluster at a time on this machine: two at once (the suite runs tests in parallel) got in each
# other's way (a node that never became idle within 30 s). The lock goes with this process.
exec 9>/tmp/xdc-slurm-test.lock
if ! flock -w 150 9; then
    echo "slurm.sh: another test's Slurm cluster held /tmp/xdc-slurm-test.lock for 150 s" >&2
    exit 75
fi

mkdir -p "$work"
s=$(cd "$work" && pwd)/slurm
rm -rf "$s"
mkdir -p "$s"/{munge,state,log}
chmod 700 "$s/munge" # munged wants its key private to its user
# ... and every folder on the way to its socket searchable by everyone, which WORKDIR's parents need not
# be; slurmd's spool holds sockets too, whose paths must fit in 108 bytes. So the sockets, the spool and
# the PID files go to a short folder of their own under /tmp, removed at the end.
sock=$(mktemp -d /tmp/xdc-slurm.XXXXXX)
chmod 711 "$sock"
mkdir "$sock/spool"

pids=() jobs=()
cleanup() {
    local rc=$?
    if [ ${#jobs[@]} -gt 0 ]; then scancel "${jobs[@]}" 2>/dev/null || true; fi
    [ ${#pids[@]} -gt 0 ] && xdc_stop_pids "${pids[@]}"
    rm -rf "$sock"
    if [ $rc -ne 0 ]; then
        for f in "$s"/coordinator.log "$s"/job-*.out "$s"/ssh.out "$s"/log/*; do
            [ -f "$f" ] && { echo "---- $f" >&2; tail -n 30 "$f" >&2; }
        done
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 75' INT TERM

# A free TCP port for a daemon, from a PID-derived start so that clusters of concurrent runs differ. Any
# socket on the port counts (not only listeners): an outgoing connection's local port blocks a bind too.
# Below Linux's ephemeral range (32768 and up), so a port-0 bind elsewhere cannot take it before the
# daemon binds it.
free_port() {
    local p=$((20000 + ($$ * 7 + $1) % 12000))
    while ss -Htan "sport = :$p" | grep -q .; do p=$((p + 1)); done
    echo $p
}
ctld_port=$(free_port 0)
slurmd_port=$(free_port 1)
[ "$slurmd_port" = "$ctld_port" ] && slurmd_port=$((ctld_port + 1))

head -c 1024 /dev/urandom >"$s/munge/munge.key"
chmod 400 "$s/munge/munge.key"
munged -F --key-file="$s/munge/munge.key" --socket="$sock/munge.sock" --pid-file="$sock/munged.pid" \
    --log-file="$s/log/munged.log" --seed-file="$s/munge/seed" >"$s/log/munged.out" 2>&1 &
pids+=($!)
xdc_wait_for 10 "munged" test -S "$sock/munge.sock"

# The smallest cluster Slurm accepts: one node (this machine, named xdcnode, addressed on loopback), no
# cgroups, no accounting, root as every user. OverSubscribe lets one job per region share the node.
export SLURM_CONF=$s/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=xdctest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock/munge.sock
StateSaveLocation=$s/state
SlurmdSpoolDir=$sock/spool
SlurmctldPidFile=$sock/slurmctld.pid
SlurmdPidFile=$sock/slurmd.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
NodeName=xdcnode NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=xdc Nodes=xdcnode Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
slurmctld -D -f "$SLURM_CONF" >"$s/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N xdcnode -f "$SLURM_CONF" >"$s/log/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { sinfo -h -n xdcnode -o %t | grep -qx idle; }
xdc_wait_for 30 "slurmctld to answer (scontrol ping)" sh -c 'scontrol ping | grep -q "is UP"'
xdc_wait_for 30 "node xdcnode to be idle (sinfo)" node_idle
echo "slurm.sh: cluster up: slurmctld :$ctld_port, slurmd :$slurmd_port, $(sinfo -h -o '%P %D %t %N')" >&2

# 0. Keys as the header of slurm.sbatch says: the CA in $s/ca (ca.key stays there), the coordinator's own
# key in $s/coordinator; each region's node keeps its keys in $s/nodes/ID/REGION (XDC_NODE_CERTS).
rundir=$s/run-dir
id=slurm-$$
XDC=$xdc bash "$here/examples/launch/enroll.sh" init "$s/ca" "$id" "$s/coordinator"
export XDC_SIGN="env XDC=$xdc bash $here/examples/launch/enroll.sh sign $s/ca" XDC_NODE_CERTS=$s/nodes

# 1. The coordinator, as the header of slurm.sbatch says (loopback: every region is on this machine); with
# etcd, etcd first and the coordinator only clearing the run's prefix and reporting.
if [ "$mode" = etcd ]; then
    command -v etcd >/dev/null || { echo "slurm.sh: no etcd: \`make deps\` installs etcd-server" >&2; exit 69; }
    etcd_healthy() { curl -s --max-time 1 "http://127.0.0.1:$e_port/health" | grep -q '"health":"true"'; }
    etcd_up() { ! kill -0 "$e_pid" 2>/dev/null || etcd_healthy; } # answered, or stopped
    # A port found free can be taken before etcd binds it (a busy machine's outgoing connections): up to
    # three tries on other ports when etcd stops at start.
    for try in 1 2 3; do
        e_port=$(free_port $((2 + try * 10)))
        e_peer=$(free_port $((3 + try * 10)))
        [ "$e_peer" = "$e_port" ] && e_peer=$((e_port + 1))
        rm -rf "$s/etcd"
        etcd --name t --data-dir "$s/etcd" --listen-client-urls "http://127.0.0.1:$e_port" \
            --advertise-client-urls "http://127.0.0.1:$e_port" --listen-peer-urls "http://127.0.0.1:$e_peer" \
            --initial-advertise-peer-urls "http://127.0.0.1:$e_peer" --initial-cluster "t=http://127.0.0.1:$e_peer" \
            >"$s/log/etcd-$try.log" 2>&1 &
        e_pid=$!
        pids+=("$e_pid")
        xdc_wait_for 30 "etcd to answer /health" etcd_up
        etcd_healthy && break
        echo "slurm.sh: etcd stopped at start (try $try; $s/log/etcd-$try.log)" >&2
        [ "$try" = 3 ] && exit 69
    done
    coord=etcd://127.0.0.1:$e_port/xdc/$id
    rdzv_args=(--rdzv "$coord")
else
    rdzv_args=(--host 127.0.0.1 --port 0)
fi
timeout 300 "$xdc" coordinator -t "$topo" -c "$run" --run-dir "$rundir" --run-id "$id" "${rdzv_args[@]}" \
    --cert-dir "$s/coordinator" >"$s/coordinator.log" 2>&1 &
coord_pid=$!
pids+=("$coord_pid")
xdc_wait_started 30 "$coord_pid" "$s/coordinator.log" '--coordinator [^ ]+:[0-9]+' "the coordinator"
[ "$mode" = etcd ] || coord=$(sed -n 's/.*--coordinator \([^ ]*:[0-9]*\).*/\1/p' "$s/coordinator.log" | head -n 1)

# 2. slurm.sbatch once per region, with the region's node count and the documented environment (XDC_SIGN
# and XDC_NODE_CERTS exported above, carried by --export=ALL). Peers reach every node on loopback here,
# not at the topology's node names: XDC_ADVERTISE_HOST.
# With etcd, only the first region goes to Slurm; the others are started through ssh.sh below.
rdzv_var=XDC_COORDINATOR
[ "$mode" = etcd ] && rdzv_var=XDC_RDZV
ssh_regions=()
while read -r region nodes; do
    if [ "$mode" = etcd ] && [ ${#jobs[@]} -gt 0 ]; then
        ssh_regions+=("$region")
        continue
    fi
    j=$(cd "$s" && sbatch --parsable --nodes="$nodes" --output="$s/job-$region.out" \
        --export=ALL,XDC_REGION="$region","$rdzv_var"="$coord",XDC_RUN_ID="$id",XDC="$xdc",XDC_ADVERTISE_HOST=127.0.0.1 \
        "$here/examples/launch/slurm.sbatch" "$topo" "$run" "$rundir")
    jobs+=("$j")
    echo "slurm.sh: region $region: job $j ($nodes node(s))" >&2
done < <("$xdc" topo check --hosts "$topo" | awk '{n[$1]++; if (!($1 in o)) o[$1] = ++k} END {for (r in o) print o[r], r, n[r]}' | sort -n | cut -d' ' -f2-)

ssh_pid=
if [ ${#ssh_regions[@]} -gt 0 ]; then
    # ssh.sh as an operator runs it, with a stand-in for ssh that runs the command on this machine.
    printf '#!/bin/sh\nshift\nexec "$@"\n' >"$s/here-ssh"
    chmod +x "$s/here-ssh"
    XDC=$xdc XDC_SSH=$s/here-ssh XDC_ADVERTISE_HOST=127.0.0.1 \
        bash "$here/examples/launch/ssh.sh" "$topo" "$run" "$rundir" "$coord" "$id" "${ssh_regions[@]}" \
        >"$s/ssh.out" 2>&1 &
    ssh_pid=$!
    pids+=("$ssh_pid")
    echo "slurm.sh: regions ${ssh_regions[*]}: ssh.sh (pid $ssh_pid)" >&2
fi

# While the run lasts, a job Slurm could not start (held after a failed launch, failed, cancelled) ends
# the test at once rather than when the coordinator gives up on its members.
job_ids=$(IFS=,; echo "${jobs[*]}")
while kill -0 "$coord_pid" 2>/dev/null; do
    stuck=$(squeue -h -j "$job_ids" -o '%i %T %r' 2>/dev/null | grep -Ei 'held|FAIL|CANCEL|TIMEOUT|NODE_FAIL' || true)
    if [ -n "$stuck" ]; then
        echo "slurm.sh: Slurm could not run a job: $stuck (see $s/log/slurmd.log)" >&2
        exit 69
    fi
    sleep 0.5
done
coord_rc=0
wait "$coord_pid" || coord_rc=$?
jobs_done() { [ -z "$(squeue -h -j "$job_ids" 2>/dev/null)" ]; }
xdc_wait_for 60 "the jobs to leave the queue" jobs_done
bad=0
for j in "${jobs[@]}"; do
    line=$(scontrol show job -o "$j")
    state=$(sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' <<<"$line")
    code=$(sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' <<<"$line")
    echo "slurm.sh: job $j: $state exit $code" >&2
    [ "$state" = COMPLETED ] && [ "$code" = 0:0 ] || bad=1
done
if [ -n "$ssh_pid" ]; then
    ssh_rc=0
    wait "$ssh_pid" || ssh_rc=$?
    echo "slurm.sh: ssh.sh exit $ssh_rc" >&2
    [ $ssh_rc -eq 0 ] || bad=1
fi
if [ $coord_rc -ne 0 ] || [ $bad -ne 0 ]; then
    echo "slurm.sh: the run failed: coordinator exit $coord_rc; jobs ${jobs[*]}" >&2
    exit $((coord_rc ? coord_rc : 70))
fi
grep '^final ' "$s/coordinator.log"
