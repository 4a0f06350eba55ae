#!/usr/bin/env bash
# Session 21, device call 3: the library with messages under 512 KiB sent whole (kMinSplit) against
# 56cb6b4 (every message of 128 KiB or more split over the lanes) and against helpers off, over TCP
# against MPICH.  Bundle: session20-gpu/mk-bundle.sh <this tree, release> <56cb6b4, release>, then
# base's test_sendrecv and test_allgather added to it (mb/base/tools/perf/).
# Rounds interleave allreduce main / base / off and sendrecv, allgather main / base; then every
# other op once with main.  Prints the median of the rounds' ratios (MPI/flagcx) and each round's.
source "$(dirname "$0")/common.sh"
run() { # op arm tree round [env...]
  local op=$1 arm=$2 tree=$3 r=$4; shift 4
  env "$@" timeout 90 $M/bin/mpiexec.hydra -n 2 $M/$tree/tools/perf/test_$op -b 64K -e 64M -f 4 -m 1 \
    -r 0 --repeat 3 > $L/$op-$arm-r$r.log 2>&1 || echo "FAIL $op $arm r$r rc=$?"
}
FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=NET timeout 30 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_allreduce -b 1M -e 1M -n 2 -w 1 2>&1 | grep -m1 "lane"
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-300} ] && break
  run allreduce main main $r; run allreduce base base $r; run allreduce off main $r FLAGCX_SOCKET_HELPERS=0
  run sendrecv main main $r; run sendrecv base base $r
  run allgather main main $r; run allgather base base $r
  echo "round $r done at $((SECONDS-T0)) s"
done
for op in broadcast reducescatter alltoall reduce gather scatter alltoallv; do
  [ $((SECONDS-T0)) -gt ${BUDGET2:-440} ] && break
  run $op main main 1
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
