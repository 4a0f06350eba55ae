#!/usr/bin/env bash
# The cost of the deterministic mode (docs/DETERMINISM.md): test_allreduce
# with -D 0 (default mode) and -D 1 (the rank-ordered fold) at 2, 3 and 4
# ranks, one host, in the same run, ROUNDS times each, alternating which mode
# goes first so that a drift of the machine hits both alike; then writes
# docs/perf/determinism-<machine>.md (tools/perf/det_cost.py): per rank count
# and size the median time of each mode, det/default, and the targets (1.2x
# below 4 KiB, 1.3x from 1 MiB).  Re-running replaces the page; the raw JSON
# lines stay in $WORK (default: a temporary folder).
#
# usage: tools/perf/det_cost.sh [BUILD_DIR]          (default: build)
#   NRANKS="2 3 4"   ROUNDS=3   DTYPE=float   OP=sum
#   SIZES="-b 8 -e 64M -f 8"   FLAGS="-w 5 -W 100 -n 5 -T 50"
#   TRANSPORT=shm|socket (socket: FLAGCX_SHM_DISABLE=1)   MACHINE=name   OUT=docs/perf
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
nranks=${NRANKS:-2 3 4}
rounds=${ROUNDS:-3}
dtype=${DTYPE:-float}
redop=${OP:-sum}
sizes=${SIZES:--b 8 -e 64M -f 8}
flags=${FLAGS:--w 5 -W 100 -n 5 -T 50}
transport=${TRANSPORT:-shm}
out=${OUT:-docs/perf}
run_timeout=${RUN_TIMEOUT:-900}
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
cores=$(nproc)
machine=${MACHINE:-$(echo "${cpu:-cpu}" | tr 'A-Z' 'a-z' | sed 's/([^)]*)//g; s/[^a-z0-9]\+/-/g; s/^-//; s/-$//')-${cores}c}
work=${WORK:-$(mktemp -d /tmp/flagcx-detcost.XXXXXX)}
[ -x "$build/tools/perf/test_allreduce" ] || { echo "det_cost.sh: no $build/tools/perf/test_allreduce" >&2; exit 2; }
command -v mpiexec >/dev/null || { echo "det_cost.sh: no mpiexec (MPICH)" >&2; exit 2; }
mkdir -p "$out" "$work"
rm -f "$work"/*.json
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" FLAGCX_TIMEOUT="${FLAGCX_TIMEOUT:-60}"
env=""
[ "$transport" = socket ] && env="FLAGCX_SHM_DISABLE=1"
. tools/perf/run_one.sh  # busy_pct, run_one (uses $run_timeout)
{
  echo "machine=$machine"
  echo "cpu=$cpu"
  echo "cores=$cores"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src net adapters algos config include 2>/dev/null || echo ' (with uncommitted library changes)')"
  echo "command=tools/perf/det_cost.sh $build"
  echo "run=${env:+$env }mpiexec -n N $build/tools/perf/test_allreduce -d $dtype -o $redop $sizes $flags -D 0|1"
  echo "transport=$transport"
  echo "rounds=$rounds"
  echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
} > "$work/machine.txt"
start=$SECONDS
failed=0
for round in $(seq 1 "$rounds"); do
  order="0 1"
  [ $((round % 2)) = 0 ] && order="1 0"
  for n in $nranks; do
    for d in $order; do
      echo "== round $round, $n ranks, -D $d ($(busy_pct)% of the CPUs busy before)"
      run_one "$work/D$d-n$n-r$round.log" env $env mpiexec -n "$n" "$build/tools/perf/test_allreduce" \
        -d "$dtype" -o "$redop" $sizes $flags -D "$d" -J "$work/D$d-n$n-r$round.json" || failed=1
      tail -1 "$work/D$d-n$n-r$round.log"
    done
  done
done
echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$work/machine.txt"
echo "seconds=$((SECONDS - start))" >> "$work/machine.txt"
/usr/bin/python3 tools/perf/det_cost.py "$work" "$out/determinism-$machine.md" || exit 1
echo "== done in $((SECONDS - start)) s; raw JSON lines and logs in $work"
exit $failed
