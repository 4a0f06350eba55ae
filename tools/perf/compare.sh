#!/usr/bin/env bash
# Two builds of flagcx, one machine, one run: did a change make any size
# slower?  Runs each test_<op> of BEFORE and AFTER at 2 ranks, ROUNDS times
# each, alternating which goes first so a drift of the machine hits both
# alike, then prints one table per op and transport (tools/perf/compare.py):
# the median time of each build's runs, after/before, and whether the after
# build is slower beyond the noise (its fastest run slower than the before
# build's slowest, and the medians more than 10 % apart).
#
# usage: tools/perf/compare.sh BEFORE_BUILD AFTER_BUILD
#   OPS="allreduce ..."  default: allreduce allgather reducescatter broadcast alltoall sendrecv
#   SIZES="-b 16 -e 16M -f 16"   FLAGS="-w 5 -W 50 -n 5 -T 30"   ROUNDS=3
#   TRANSPORTS="shm socket"   WORK=dir (raw JSON lines; default a temporary folder)
# Exit status: 0 no size slower beyond noise, 1 some size is, 2 a run failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# = 2 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
before=$1 after=$2
ops=${OPS:-allreduce allgather reducescatter broadcast alltoall sendrecv}
sizes=${SIZES:--b 16 -e 16M -f 16}
flags=${FLAGS:--w 5 -W 50 -n 5 -T 30}
rounds=${ROUNDS:-3}
transports=${TRANSPORTS:-shm socket}
run_timeout=${RUN_TIMEOUT:-600}
work=${WORK:-$(mktemp -d /tmp/flagcx-compare.XXXXXX)}
for b in "$before" "$after"; do
  for op in $ops; do
    [ -x "$b/tools/perf/test_$op" ] || { echo "compare.sh: no $b/tools/perf/test_$op" >&2; exit 2; }
  done
done
mkdir -p "$work"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" FLAGCX_TIMEOUT="${FLAGCX_TIMEOUT:-60}"
. tools/perf/run_one.sh
failed=0
for round in $(seq 1 "$rounds"); do
  order="before after"
  [ $((round % 2)) = 0 ] && order="after before"
  for op in $ops; do
    root=""
    case $op in broadcast|reduce|gather|scatter) root="-r 0" ;; esac
    for tr in $transports; do
      env=()
      [ "$tr" = socket ] && env=(FLAGCX_SHM_DISABLE=1)
      for side in $order; do
        b=$before; [ "$side" = after ] && b=$after
        log="$work/$side-$op-$tr-$round"
        echo "== round $round: $op over $tr, $side ($b)"
        run_one "$log.log" env "${env[@]}" mpiexec -n 2 "$b/tools/perf/test_$op" $sizes $root $flags -J "$log.json" ||
          { echo "   FAILED: $log.log"; failed=1; }
      done
    done
  done
done
/usr/bin/python3 tools/perf/compare.py "$work" "$before" "$after"
rc=$?
[ $failed = 1 ] && exit 2
exit $rc
