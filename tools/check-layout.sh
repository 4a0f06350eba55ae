#!/usr/bin/env bash
# The layout rules, checked on the source tree (the `layout` test of the
# quick suite; tools/check.sh runs it too):
#   - layers: tools/layers.txt names every layer, its folders, its one door
#     and the layers it may use; outside a layer only its door may be
#     included, and only by a layer that lists it (tools/check_layers.py);
#     the picture and table of docs/ARCHITECTURE.md agree with the table
#     (tools/layers_doc.py --check);
#   - functions: none outside tests/ longer than 120 lines;
#   - files: no source file outside tests/ longer than 600 lines.
# Usage: check-layout.sh [ROOT] (default: this checkout).  Prints every
# violation; exits 1 when there is one.
set -uo pipefail
root=${1:-"$(dirname "$0")/.."}
cd "$root" || exit 2
bad=0
python3 "$(dirname "$0")/check_layers.py" . || bad=1
python3 "$(dirname "$0")/layers_doc.py" --check . || bad=1
while read -r n f; do
  [ "$f" = total ] && continue
  if [ "$n" -gt 600 ]; then echo "size: $f has $n lines (at most 600 outside tests/)"; bad=1; fi
done < <(find src net adapters plugins tools include algos examples config \
           -name build -prune -o -type f \
           \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.c' -o -name '*.lua' \
              -o -name '*.py' -o -name '*.sh' \) -print0 2>/dev/null | xargs -0 wc -l | sort -n)
[ $bad = 0 ] && echo "layout: OK"
exit $bad
