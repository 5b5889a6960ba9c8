#!/usr/bin/env bash
# check_layers.sh — the dependency rule of docs/design.md ("Layers"), checked two ways:
#   1. every #include "folder/..." in a library folder names the folder itself or one the table lets it
#      depend on (subfolders such as wan/emu are libraries of their own; an include resolves to the
#      longest library folder that prefixes its path);
#   2. the Makefile's LAYERS (the link order) lists every library of the table, each to the left of
#      everything it depends on, so an upward call also fails to link.
# The table is read from docs/design.md itself, so the document and the check cannot drift.
#   usage: tests/check_layers.sh [ROOT]   (ROOT defaults to the repository; the suite points it at a
#          scratch tree to show that a violation is caught). Prints each violation; exits 1 if any.
set -u
root=${1:-"$(dirname "$0")/.."}
cd "$root" || exit 2
declare -A allowed=()
order=()
# Table rows look like: | `wan/emu/` | what it holds | common, wan |
while IFS='|' read -r _ folder _ deps _; do
  folder=$(sed -E 's/[` ]//g; s#/$##' <<<"$folder")
  deps=$(sed -E 's/[`,]/ /g; s#/ # #g; s#/$##; s/—//g; s/ +/ /g; s/^ //; s/ $//' <<<"$deps")
  allowed[$folder]="$folder $deps"
  order+=("$folder")
done < <(awk '/^## Layers/{on=1; next} /^## /{on=0} on && /^\| `[a-z_\/]+\/` \|/' docs/design.md)
if [ ${#order[@]} -eq 0 ]; then echo "check_layers: no layer table under '## Layers' in docs/design.md"; exit 1; fi

# Longest table folder that prefixes path p (p is a file path relative to the root).
owner() {
  local p=$1 best=""
  for d in "${order[@]}"; do
    case "$p" in "$d"/*) [ ${#d} -gt ${#best} ] && best=$d ;; esac
  done
  printf '%s' "$best"
}

bad=0
for dir in "${order[@]}"; do
  for f in "$dir"/*.c "$dir"/*.h "$dir"/*.cu "$dir"/*.cuh; do
    [ -e "$f" ] || continue
    while IFS=: read -r line inc; do
      target=$(owner "$inc")
      [ -n "$target" ] || { echo "$f:$line: includes \"$inc\", which is in no library folder of the table"; bad=1; continue; }
      case " ${allowed[$dir]} " in
        *" $target "*) ;;
        *) echo "$f:$line: includes \"$inc\" but $dir/ may only depend on: ${allowed[$dir]#"$dir "}"; bad=1 ;;
      esac
    done < <(grep -n -o -E '^#include "[a-z_]+/[^"]+"' "$f" | sed -E 's/#include "([^"]+)"/\1/')
  done
done

# Public headers keep the YAML library private to config/.
for h in $(for d in "${order[@]}"; do ls "$d"/xdc_*.h 2>/dev/null; done); do
  if grep -n -E '^#include <yaml\.h>' "$h" >/dev/null; then
    echo "$h: a public header includes <yaml.h> (config/ keeps libyaml behind opaque nodes)"; bad=1
  fi
done

# Link order: each library left of every library it depends on.
if [ -f Makefile ]; then
  layers=$(awk '/^LAYERS :=/{on=1; sub(/^LAYERS :=/,"")} on{cont=sub(/\\$/,""); printf "%s ", $0; if (!cont) exit}' Makefile)
  read -r -a link <<<"$layers"
  declare -A pos=()
  for i in "${!link[@]}"; do pos[${link[$i]}]=$i; done
  for d in "${order[@]}"; do
    [ -n "${pos[$d]+x}" ] || { echo "Makefile: LAYERS lacks $d"; bad=1; continue; }
    for dep in ${allowed[$d]}; do
      [ "$dep" = "$d" ] && continue
      [ -n "${pos[$dep]+x}" ] || continue
      if [ "${pos[$dep]}" -lt "${pos[$d]}" ]; then
        echo "Makefile: LAYERS puts $dep before $d, which depends on it (the link would not resolve $d -> $dep)"; bad=1
      fi
    done
  done
fi
exit $bad
