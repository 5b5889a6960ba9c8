#!/usr/bin/env bash
# lint.sh — what `make lint` checks (and .ci/run runs): every C/CUDA file formatted by .clang-format
# (clang-format 14), the layer rule of docs/design.md (tests/check_layers.sh), no cycle among the
# orchestrator's object files (tests/check_symbol_cycles.sh, on the objects `make lint` builds first, under
# XDC_LINT_OBJ), and no positional `*_INIT` initializer macro: each one must name its fields
# (`.field = value`) so a struct change cannot shift values into the wrong members silently. Prints every
# finding; exits 1 if any.
set -u
cd "$(dirname "$0")/.."
bad=0
files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null || find . -name '*.[ch]' -o -name '*.cu')
if ! command -v clang-format >/dev/null; then
  echo "lint: clang-format not found (Debian package clang-format; \`make deps\` installs it)"; exit 69
fi
if ! out=$(clang-format --dry-run -Werror $files 2>&1); then
  echo "$out" | grep -E '^[^ ].*: (error|warning):' | sed 's/ \[-Wclang-format-violations\]//' | head -40
  echo "lint: files not formatted by .clang-format (run \`make format\`): $(echo "$out" | grep -c 'error:') places"
  bad=1
fi
bash tests/check_layers.sh || bad=1
bash tests/check_symbol_cycles.sh "${XDC_LINT_OBJ:-build/obj}/orchestrator" || bad=1
# An *_INIT macro's body (with its continuation lines) must contain designators and no bare leading value.
inits=$(for f in $files; do
  # One line per *_INIT macro: "file:line:body" with continuation lines joined.
  awk -v f="$f" '/^#define [A-Z0-9_]+_INIT([ \t]|\\|$)/ { on = 1; body = ""; line = NR }
    on { body = body " " $0; if ($0 !~ /\\[ \t]*$/) { on = 0; gsub(/\\/, " ", body); print f ":" line ":" body } }' "$f"
done)
while IFS= read -r def; do
  [ -n "$def" ] || continue
  body=${def#*#define }
  name=${body%%[ (]*}
  rest=${body#"$name"}
  # Designated: contains ".field =" and no value right after an opening brace.
  if ! grep -qE '\.[a-z_]+[[:space:]]*=' <<<"$rest" || grep -qE '\{[[:space:]]*\{?[[:space:]]*[-0-9"]' <<<"$rest"; then
    echo "${def%%:*}:$(cut -d: -f2 <<<"$def"): $name is a positional initializer; name its fields (.field = value)"
    bad=1
  fi
done <<<"$inits"
exit $bad
