#!/usr/bin/env bash
# bench/actcodec — activations across the WAN: the tiny model's pipeline split over two regions
# (examples/topology/span-2region.yaml, stage 0 in us-east, stage 1 in eu-west), ACT_STEPS steps with
# ACT_MB microbatches, once per activation codec (ACT_CODECS) and per data/init seed (ACT_SEEDS: the model
# file's `seed`, which draws the initial parameters and the data order). Per row: the final validation
# loss (mean over the seeds), its gap to the uncompressed run of the same seed (mean, lowest and highest),
# and the WAN bytes against what bf16 sends (half the uncompressed row's). Then the noise the gap is read
# against: how far the uncompressed loss moves between seeds, and bf16 against uncompressed (two references
# that differ only in rounding). The last line is the activation part of issue 28's summary line, for
# ACT_MAIN (default: lowrank, the measured pair), its gap the mean over the seeds.
# docs/compression.md ("Activations across the WAN") has the table.
set -euo pipefail
cd "$(dirname "$0")/../.."
xdc=${XDC_BIN:-build/xdc}
steps=${ACT_STEPS:-60}
mb=${ACT_MB:-2}
seeds=${ACT_SEEDS:-"1337 1 2 3 4 5"}
codecs=${ACT_CODECS:-"none bf16 int8 lowrank:16:int4:1 lowrank lowrank:16:int4:2/32:int4:2 lowrank:12:int4:2/24:int3:2"}
main=${ACT_MAIN:-lowrank}
tmp=$(mktemp -d /tmp/xdc-bench-actcodec.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
declare -A val bytes
for s in $seeds; do
    sed "s/^\(  seed: *\)[0-9]*/\1$s/" examples/models/tiny.yaml >"$tmp/model-$s.yaml"
    grep -q "^  seed: $s " "$tmp/model-$s.yaml" || { echo "could not set seed $s in the model file" >&2; exit 1; }
    for c in $codecs; do
        n=$(echo "$c" | tr ':/' '__')-$s
        cat >"$tmp/$n.yaml" <<EOT
model: $tmp/model-$s.yaml
data: /usr/share/games/fortunes
mode: sync
span_regions: true
pipeline_stages: 2
activation_codec: $c
microbatches: $mb
steps: $steps
codec: none
threads: 1
EOT
        out=$("$xdc" launch -t examples/topology/span-2region.yaml -c "$tmp/$n.yaml" --run-dir "$tmp/run-$n" 2>&1) || {
            echo "$c (seed $s): launch failed:" >&2
            echo "$out" | tail -20 >&2
            exit 1
        }
        final=$(echo "$out" | grep '^final val_loss=')
        val[$c,$s]=$(echo "$final" | sed 's/.*val_loss=\([^ ]*\).*/\1/')
        bytes[$c]=$(echo "$final" | sed 's/.*wan_bytes=\([^ ]*\).*/\1/')
    done
done
: "${val[none,${seeds%% *}]:?the codec list needs none}"
# One row per codec: "codec mean_val mean_gap min_gap max_gap bytes", the gaps in % of the same seed's none.
rows=$(for c in $codecs; do
    for s in $seeds; do echo "$c ${val[$c,$s]} ${val[none,$s]} ${bytes[$c]}"; done
done | awk '{ n[$1]++; v[$1] += $2; g = 100 * ($2 - $3) / $3; m[$1] += g; b[$1] = $4;
              if (!($1 in lo) || g < lo[$1]) lo[$1] = g; if (!($1 in hi) || g > hi[$1]) hi[$1] = g; order[$1] = NR }
            END { for (c in n) printf "%d %s %.4f %.2f %.2f %.2f %d\n", order[c], c, v[c] / n[c], m[c] / n[c], lo[c], hi[c], b[c] }' |
    sort -n | cut -d' ' -f2-)
bf16=$(awk -v b="${bytes[none]}" 'BEGIN { print b / 2 }')
nseeds=$(echo $seeds | wc -w)
printf '| activation codec | val_loss at step %d (mean of %d seeds) | gap to none: mean | lowest | highest | WAN bytes | x fewer than bf16 |\n' \
    "$steps" "$nseeds"
printf '|---|---|---|---|---|---|---|\n'
echo "$rows" | awk -v f="$bf16" '{ printf "| %s | %.4f | %+.2f %% | %+.2f %% | %+.2f %% | %d | %.2f |\n", $1, $2, $3, $4, $5, $6, f / $6 }'
for s in $seeds; do echo "${val[none,$s]}"; done |
    awk -v seeds="$seeds" '{ x[NR] = $1; m += $1 } END { m /= NR; for (i = 1; i <= NR; i++) sd += (x[i] - m) ^ 2;
        sd = NR > 1 ? sqrt(sd / (NR - 1)) : 0; printf "noise: uncompressed val_loss over seeds %s: mean %.4f, sd %.4f (%.2f %%)\n", seeds, m, sd, 100 * sd / m }'
if [[ " $codecs " == *" bf16 "* ]]; then
    echo "$rows" | awk '$1 == "bf16" { printf "noise: bf16 against uncompressed (rounding only): mean %+.2f %%, %+.2f %% to %+.2f %%\n", $3, $4, $5 }'
fi
echo "$rows" | awk -v c="$main" -v f="$bf16" '$1 == c { printf "act_codec=%s act_ratio_vs_bf16=%.2f act_loss_gap_pct=%.2f\n", c, f / $6, $3 }'
