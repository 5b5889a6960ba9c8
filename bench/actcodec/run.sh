#!/usr/bin/env bash
# bench/actcodec — activations across the WAN: the tiny model's pipeline split over two regions
# (examples/topology/span-2region.yaml, stage 0 in us-east, stage 1 in eu-west), ACT_STEPS steps with
# ACT_MB microbatches, once per activation codec (ACT_CODECS). Per row: the final validation loss, its gap
# to the uncompressed row, and the WAN bytes against what bf16 sends (half the uncompressed row's). The
# last line is the activation part of issue 28's summary line, for ACT_MAIN (default lowrank:16:int4).
# docs/compression.md ("Activations across the WAN") has the table.
set -euo pipefail
cd "$(dirname "$0")/../.."
xdc=${XDC_BIN:-build/xdc}
steps=${ACT_STEPS:-60}
mb=${ACT_MB:-2}
codecs=${ACT_CODECS:-"none bf16 int8 lowrank:16:int8 lowrank:16:int4 lowrank:32:int4"}
main=${ACT_MAIN:-lowrank:16:int4}
tmp=$(mktemp -d /tmp/xdc-bench-actcodec.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
declare -A val bytes
for c in $codecs; do
    n=${c//:/_}
    cat >"$tmp/$n.yaml" <<EOF
model: $PWD/examples/models/tiny.yaml
data: /usr/share/games/fortunes
mode: sync
span_regions: true
pipeline_stages: 2
activation_codec: $c
microbatches: $mb
steps: $steps
codec: none
threads: 1
EOF
    out=$("$xdc" launch -t examples/topology/span-2region.yaml -c "$tmp/$n.yaml" --run-dir "$tmp/run-$n" 2>&1) || {
        echo "$c: launch failed:" >&2
        echo "$out" | tail -20 >&2
        exit 1
    }
    final=$(echo "$out" | grep '^final val_loss=')
    val[$c]=$(echo "$final" | sed 's/.*val_loss=\([^ ]*\).*/\1/')
    bytes[$c]=$(echo "$final" | sed 's/.*wan_bytes=\([^ ]*\).*/\1/')
done
ref=${val[none]:?the codec list needs none}
bf16=$(awk -v b="${bytes[none]}" 'BEGIN { print b / 2 }')
printf '| activation codec | val_loss at step %d | gap to none | WAN bytes | x fewer than bf16 |\n|---|---|---|---|---|\n' \
    "$steps"
for c in $codecs; do
    awk -v c="$c" -v v="${val[$c]}" -v r="$ref" -v b="${bytes[$c]}" -v f="$bf16" \
        'BEGIN { printf "| %s | %.4f | %+.2f %% | %d | %.2f |\n", c, v, 100 * (v - r) / r, b, f / b }'
done
awk -v v="${val[$main]}" -v r="$ref" -v b="${bytes[$main]}" -v f="$bf16" -v c="$main" \
    'BEGIN { printf "act_codec=%s act_ratio_vs_bf16=%.2f act_loss_gap_pct=%.2f\n", c, f / b, 100 * (v - r) / r }'
