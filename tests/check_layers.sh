#!/usr/bin/env bash
# check_layers.sh — every #include "folder/..." in a library folder must name the folder itself or one
# it may depend on (docs/design.md, "Dependency rule"). Prints each violation; exits 1 if any.
set -u
cd "$(dirname "$0")/.."
declare -A allowed=(
  [common]="common"
  [topology]="common topology"
  [kernels]="common kernels"
  [compression]="common kernels compression"
  [wan]="common wan"
  [intra]="common kernels intra"
  [orchestrator]="common topology kernels compression wan intra orchestrator"
)
bad=0
for dir in "${!allowed[@]}"; do
  for f in "$dir"/*.c "$dir"/*.h "$dir"/*.cu "$dir"/*.cuh; do
    [ -e "$f" ] || continue
    while IFS=: read -r line inc; do
      target=${inc%%/*}
      case " ${allowed[$dir]} " in
        *" $target "*) ;;
        *) echo "$f:$line: includes \"$inc\" but $dir/ may only depend on: ${allowed[$dir]}"; bad=1 ;;
      esac
    done < <(grep -n -o -E '^#include "[a-z_]+/[^"]+"' "$f" | sed -E 's/#include "([^"]+)"/\1/')
  done
done
exit $bad
