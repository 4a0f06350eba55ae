#!/usr/bin/env bash
# The cost of a recovery after a SIGKILL (docs/ELASTIC.md): at NRANKS ranks
# on this host, the survivors' time for flagcxCommShrink(FLAGCX_SHRINK_ABORT)
# against flagcxCommAbort + a fresh flagcxCommInitRank of NRANKS-1 ranks
# (build/tools/elastic_cost, fresh processes each round), in the same run,
# ROUNDS rounds each, alternating which goes first; then writes the medians
# into docs/PERFORMANCE.md's section "Recovery: shrink against a fresh init"
# (tools/perf/elastic_cost.py).  The raw lines stay in $WORK.
#
# usage: tools/perf/elastic_cost.sh [BUILD_DIR]      (default: build)
#   NRANKS=8   ROUNDS=9   TRANSPORT=shm|socket   DOC=docs/PERFORMANCE.md
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
nranks=${NRANKS:-8}
rounds=${ROUNDS:-9}
transport=${TRANSPORT:-shm}
doc=${DOC:-docs/PERFORMANCE.md}
work=${WORK:-$(mktemp -d /tmp/flagcx-elastic-cost.XXXXXX)}
tool="$build/tools/elastic_cost"
[ -x "$tool" ] || { echo "elastic_cost.sh: no $tool" >&2; exit 2; }
mkdir -p "$work"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" FLAGCX_TIMEOUT="${FLAGCX_TIMEOUT:-30}"
[ "$transport" = socket ] && export FLAGCX_SHM_DISABLE=1
. tools/perf/run_one.sh  # busy_pct
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "cpu=$cpu"
  echo "cores=$(nproc)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src net include 2>/dev/null || echo ' (with uncommitted library changes)')"
  echo "command=${TRANSPORT:+TRANSPORT=$transport }NRANKS=$nranks ROUNDS=$rounds tools/perf/elastic_cost.sh $build"
  echo "transport=$transport"
  echo "busy_before=$(busy_pct)"
} > "$work/machine.txt"
: > "$work/lines.txt"
failed=0
for round in $(seq 1 "$rounds"); do
  order="shrink fresh"
  [ $((round % 2)) = 0 ] && order="fresh shrink"
  for mode in $order; do
    timeout 300 "$tool" "$mode" "$nranks" 1 >> "$work/lines.txt" 2>> "$work/stderr.log" || failed=1
  done
  echo "== round $round: $(tail -2 "$work/lines.txt" | tr '\n' ' ')"
done
echo "busy_after=$(busy_pct)" >> "$work/machine.txt"
python3 tools/perf/elastic_cost.py "$work" "$doc" || failed=1
echo "elastic_cost.sh: raw lines in $work"
exit $failed
