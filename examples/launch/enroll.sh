#!/usr/bin/env bash
# enroll.sh — per-node keys for a multi-host run: each node makes its own keys, the CA host signs them,
# and nothing but public files (requests, certificates, ca.pem, crl.pem) ever leaves a host. Used by
# slurm.sbatch and ssh.sh; usable by hand. Requests and certificates travel as text lines `NAME BASE64`
# (NAME = REGION-RANK), so any channel that carries stdout and arguments carries them (ssh, srun).
#
#   enroll.sh init CA_DIR RUN_ID COORD_DIR       CA host, once per run: the CA (CA_DIR/ca.key stays there)
#                                                and the coordinator's own key and certificate in COORD_DIR
#                                                (with ca.pem and crl.pem): `xdc coordinator --cert-dir COORD_DIR`
#   enroll.sh request TOPO DIR RUN_ID REGION NODE [HOST]
#                                                on the node: a key (DIR/REGION-RANK.key, mode 0600, never
#                                                sent) and request for each worker rank of node NODE (empty:
#                                                $SLURM_NODEID) of REGION; prints the request lines
#   enroll.sh sign CA_DIR                        CA host: sign each request line on stdin; prints the
#                                                certificate lines, then ca.pem and crl.pem
#   enroll.sh install DIR [NAME BASE64]...       on the node: write the certificates whose key is in DIR,
#                                                and ca.pem and crl.pem; DIR is then the agent's --cert-dir
#
# XDC is the xdc binary (default: xdc on the PATH). Exit codes: 64 usage, 65 a request or certificate that
# does not fit (named), 66 a missing file; `xdc certs`'s own codes otherwise.
set -euo pipefail
xdc=${XDC:-xdc}
me=enroll.sh

usage() {
    sed -n '6,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 64
}

# The worker ranks of node NODE of REGION: NODE*workers_per_node ... (the topology's workers_per_node).
node_ranks() {
    local topo=$1 region=$2 node=$3 wpn
    wpn=$("$xdc" topo check --json "$topo" | awk -v r="\"name\": \"$region\"," \
        'index($0, r) {f = 1} f && /"workers_per_node":/ {gsub(/[^0-9]/, ""); print; exit}')
    if [ -z "$wpn" ]; then
        echo "$me: $topo has no region '$region'" >&2
        return 64
    fi
    seq $((node * wpn)) $((node * wpn + wpn - 1))
}

cmd_init() {
    [ $# -eq 3 ] || usage
    local ca=$1 id=$2 coord=$3
    mkdir -p "$ca" "$coord"
    chmod 700 "$ca"
    "$xdc" certs init --dir "$ca" --run "$id" >&2
    "$xdc" certs request --dir "$coord" --run "$id" --region coordinator --rank 0 >&2
    "$xdc" certs sign --dir "$ca" --csr "$coord/coordinator-0.csr" --out "$coord/coordinator-0.pem" >&2
    cp "$ca/ca.pem" "$ca/crl.pem" "$coord/"
}

cmd_request() {
    [ $# -eq 5 ] || [ $# -eq 6 ] || usage
    local topo=$1 dir=$2 id=$3 region=$4 node=${5:-${SLURM_NODEID:-}} host=${6:-$(hostname)} rank name
    if [[ ! $node =~ ^[0-9]+$ ]]; then
        echo "$me: node index '$node' is not a number (give NODE, or run under Slurm for SLURM_NODEID)" >&2
        return 64
    fi
    local ranks
    ranks=$(node_ranks "$topo" "$region" "$node")
    mkdir -p "$dir"
    chmod 700 "$dir"
    for rank in $ranks; do
        name=$region-$rank
        # `xdc certs request` never replaces a key; enrolling again (a new job of the same run) makes a new
        # key, and the old certificate goes with its key.
        rm -f "$dir/$name.key" "$dir/$name.csr" "$dir/$name.pem"
        "$xdc" certs request --dir "$dir" --run "$id" --region "$region" --rank "$rank" --host "$host" >&2
        echo "$name $(base64 -w0 <"$dir/$name.csr")"
    done
}

cmd_sign() {
    [ $# -eq 1 ] || usage
    local ca=$1 tmp name b64 out
    for f in ca.pem ca.key crl.pem; do
        [ -r "$ca/$f" ] || { echo "$me: no $ca/$f: make the CA first (enroll.sh init)" >&2; return 66; }
    done
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    while read -r name b64; do
        [ -n "$name" ] || continue
        if [[ ! $name =~ ^([A-Za-z0-9_.-]+)-([0-9]+)$ ]]; then
            echo "$me: request line '$name' does not name REGION-RANK" >&2
            return 65
        fi
        base64 -d <<<"$b64" >"$tmp/$name.csr"
        out=$("$xdc" certs sign --dir "$ca" --csr "$tmp/$name.csr" --out "$tmp/$name.pem")
        echo "$me: ${out/"$tmp/"/}" >&2
        # The request must be for the identity its line names: a node cannot ask for another rank's.
        if [[ $out != *"/${BASH_REMATCH[1]}/${BASH_REMATCH[2]} "* ]]; then
            echo "$me: the request sent as $name is for another identity: $out" >&2
            return 65
        fi
        echo "$name $(base64 -w0 <"$tmp/$name.pem")"
    done
    echo "ca.pem $(base64 -w0 <"$ca/ca.pem")"
    echo "crl.pem $(base64 -w0 <"$ca/crl.pem")"
}

cmd_install() {
    if [ $# -lt 1 ] || [ $(($# % 2)) -ne 1 ]; then usage; fi
    local dir=$1 name n=0
    shift
    [ -d "$dir" ] || { echo "$me: no folder $dir: run \`enroll.sh request\` on this node first" >&2; return 66; }
    while [ $# -gt 0 ]; do
        name=$1
        case $name in
        ca.pem | crl.pem) base64 -d <<<"$2" >"$dir/$name.tmp" && mv "$dir/$name.tmp" "$dir/$name" ;;
        *)
            # Only the certificates of this node's own keys: another node's certificate is of no use here.
            if [ -f "$dir/$name.key" ]; then
                base64 -d <<<"$2" >"$dir/$name.pem.tmp" && mv "$dir/$name.pem.tmp" "$dir/$name.pem"
                n=$((n + 1))
            fi
            ;;
        esac
        shift 2
    done
    for f in "$dir"/*.key; do
        [ -f "${f%.key}.pem" ] || { echo "$me: no certificate came back for $f" >&2; return 65; }
    done
    [ -f "$dir/ca.pem" ] || { echo "$me: ca.pem did not come back" >&2; return 65; }
    echo "$me: $dir: $n certificate(s), ca.pem, crl.pem" >&2
}

case "${1:-}" in
init | request | sign | install)
    c=$1
    shift
    "cmd_$c" "$@"
    ;;
*) usage ;;
esac
