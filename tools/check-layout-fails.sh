#!/usr/bin/env bash
# That tools/check-layout.sh can fail: on a scratch copy of the tree it must
# reject an include of a layer it may not use, an include of another layer's
# insides, a 131-line function and a layer table in docs/ARCHITECTURE.md that
# disagrees with tools/layers.txt, each with its own line.  Exits 0 when all
# four are caught (the `layout-fails` test of the quick suite).
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for d in src net adapters plugins tools include algos examples config; do
  [ -d "$src/$d" ] && cp -r "$src/$d" "$tmp/$d"
done
rm -rf "$tmp/plugins/torch/build"
mkdir -p "$tmp/docs" && cp -r "$src/docs/ARCHITECTURE.md" "$src/docs/arch" "$tmp/docs/"
sed -i 's/^| exec | `src\/exec\/` |/| exec | `src\/executor\/` |/' "$tmp/docs/ARCHITECTURE.md"
echo '#include "exec/exec.h"' >> "$tmp/src/api/misc.cc"            # api may not use exec
echo '#include "net/common/framed_conn.h"' >> "$tmp/src/core/comm.cc"  # not net's door
{
  echo 'int plantedLongFunction(int x) {'
  for i in $(seq 1 128); do echo "  x += $i;"; done
  echo '  return x;'
  echo '}'
} > "$tmp/net/planted_long.cc"
out=$(bash "$tmp/tools/check-layout.sh" "$tmp" 2>&1)
rc=$?
fail=0
expect() {
  if ! grep -q -- "$1" <<<"$out"; then echo "not caught: $2"; fail=1; fi
}
expect 'layering: src/api/misc.cc:.*api may not use exec' 'an include of a layer not listed in uses'
expect 'door: src/core/comm.cc:.*net/common/framed_conn.h' "an include of another layer's insides"
expect 'function: net/planted_long.cc:1: plantedLongFunction is 131 lines' 'a function over 120 lines'
expect "layers: docs/ARCHITECTURE.md's layer table differs" 'a stale table in ARCHITECTURE.md'
if [ $rc = 0 ]; then echo "check-layout.sh passed a tree with planted violations"; fail=1; fi
[ $fail = 0 ] && echo "check-layout catches all four planted violations"
[ $fail = 0 ] || echo "$out"
exit $fail
