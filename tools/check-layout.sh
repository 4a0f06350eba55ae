#!/usr/bin/env bash
# The layering rules of docs/ARCHITECTURE.md, checked on the source tree:
#   src/base        includes nothing of ours (only include/)
#   src/rendezvous  base only
#   net/, adapters/ base and rendezvous only
#   src/sched       base only
# and no source file outside tests/ is longer than 600 lines.
# Prints every violation; exits 1 when there is one.
set -uo pipefail
cd "$(dirname "$0")/.."
bad=0
# allowed_src <folder> <include prefixes it may use>; paths are relative to
# src/ or to the root (both are include directories).
allowed_src() {
  local dir=$1; shift
  local f inc ok p
  while IFS=: read -r f inc; do
    inc=${inc#\"}; inc=${inc%\"}
    case $inc in */*) ;; *) continue ;; esac
    ok=0
    for p in "$@"; do [[ $inc == "$p"/* ]] && ok=1; done
    if [ $ok = 0 ]; then echo "layering: $f includes \"$inc\""; bad=1; fi
  done < <(grep -rHo '#include "[^"]*"' "$dir" --include='*.h' --include='*.cc' --include='*.cu' |
           sed 's/:#include /:/')
}
allowed_src src/base base
allowed_src src/rendezvous base rendezvous
allowed_src src/sched base sched
allowed_src net base rendezvous net
allowed_src adapters base rendezvous adapters
while read -r n f; do
  [ "$f" = total ] && continue
  if [ "$n" -gt 600 ]; then echo "size: $f has $n lines (at most 600 outside tests/)"; bad=1; fi
done < <(git ls-files '*.cc' '*.h' '*.cu' '*.c' '*.lua' '*.py' '*.sh' | grep -v '^tests/' |
         xargs wc -l | sort -n)
[ $bad = 0 ] && echo "layout: OK"
exit $bad
