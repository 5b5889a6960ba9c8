#!/usr/bin/env bash
# check_symbol_cycles.sh — no cycle among the orchestrator's object files (docs/design.md, "Layers"). The
# layer check (check_layers.sh) orders the libraries; this orders the files inside them: object A uses
# object B when A has an undefined symbol B defines (nm), and that graph must have no cycle, so each file
# of the orchestrator can be read, tested and moved knowing only the files below it.
#   usage: tests/check_symbol_cycles.sh [OBJDIR]   (default build/obj/orchestrator: every *.o under it)
#          tests/check_symbol_cycles.sh --nm FILE   (read `nm -A` output from FILE instead: the suite plants
#          a cycle that way)
# Prints each cycle as `cycle: a.o -> b.o (symbol) -> ... -> a.o`, one symbol naming each edge; exits 1 if
# a cycle is found, 2 when there is nothing to read.
set -u
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--nm" ]; then
  [ -r "${2:-}" ] || { echo "check_symbol_cycles: cannot read nm output '${2:-}'"; exit 2; }
  nm_out=$(cat "$2")
else
  dir=${1:-build/obj/orchestrator}
  # Objects of sources that still exist: a deleted file's stale object would draw edges of its own.
  objs=()
  while IFS= read -r o; do
    src=${o#*obj/}
    src=${src%.o}
    [ -e "$src.c" ] || [ -e "$src" ] && objs+=("$o")
  done < <(find "$dir" -name '*.o' 2>/dev/null | sort)
  if [ ${#objs[@]} -eq 0 ]; then
    echo "check_symbol_cycles: no object files under $dir (build first: make libs)"; exit 2
  fi
  nm_out=$(nm -A "${objs[@]}")
fi

# nm -A lines: "path.o:VALUE TYPE NAME" for a defined symbol, "path.o:    U NAME" for a used one.
awk '
function base(p) { sub(/.*\//, "", p); return p }
{
  split($0, part, ":"); obj = base(part[1]); sym = $NF; type = $(NF - 1)
  if (!(obj in seen)) { seen[obj] = 1; name[++n] = obj }
  if (type == "U") uses[obj, ++n_use[obj]] = sym
  else if (type ~ /^[TDBRVWGSCi]$/) def[sym] = obj  # global definitions (lower case: file-local)
}
END {
  # Edges: one symbol names each ordered pair of objects (the first in nm order).
  for (i = 1; i <= n; i++) for (k = 1; k <= n_use[name[i]]; k++) {
    o = name[i]; s = uses[o, k]; t = def[s]
    if (t == "" || t == o || ((o, t) in edge)) continue
    edge[o, t] = s; out[o, ++deg[o]] = t
  }
  # Depth-first search in object order; each back edge closes a cycle, printed with a symbol per edge.
  bad = 0
  for (i = 1; i <= n; i++) if (!(name[i] in color)) visit(name[i], 0)
  exit bad
}
function visit(v, depth,    k, w, j, line) {
  color[v] = 1; stack[depth] = v; at[v] = depth
  for (k = 1; k <= deg[v]; k++) {
    w = out[v, k]
    if ((w in color) && color[w] == 1) {
      line = ""
      for (j = at[w]; j <= depth; j++) line = line stack[j] " -> (" edge[stack[j], (j < depth ? stack[j + 1] : w)] ") "
      printf "cycle: %s%s\n", line, w; bad = 1
    } else if (!(w in color)) visit(w, depth + 1)
  }
  color[v] = 2
}' <<<"$nm_out"
