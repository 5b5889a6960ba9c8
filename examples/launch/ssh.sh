#!/usr/bin/env bash
# ssh.sh — start one agent per node over ssh for a topology whose regions list real host names.
# usage: examples/launch/ssh.sh TOPOLOGY RUN.yaml RUN_DIR COORDINATOR_HOST:PORT RUN_ID
# (RUN_DIR must be on a file system every node mounts; start `xdc coordinator` first.)
set -euo pipefail
topo=$1 run=$2 dir=$3 coord=$4 id=$5
xdc topo check --json "$topo" | python3 -c '
import json, sys
t = json.load(sys.stdin)
for r in t["regions"]:
    for i, h in enumerate(r["hosts"]):
        print(r["name"], i, h)' | while read -r region node host; do
  ssh -n "$host" xdc agent --topology "$topo" --config "$run" --run-dir "$dir" --region "$region" \
      --node "$node" --host "$host" --coordinator "$coord" --run-id "$id" &
done
wait
