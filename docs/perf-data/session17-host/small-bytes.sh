#!/bin/bash
# Session 17: FLAGCX_SHM_SMALL_BYTES (the shared block's limit per rank's share) at
# 4096 (the default), 16384 and 32768, the same binary, launches interleaved.
#   B=<release build> small-bytes.sh [rounds] [extra harness flags, e.g. -M 1]
R=${1:-2}; shift; EXTRA="$*"
export UCX_NET_DEVICES=lo FLAGCX_DATA_DIR=${FLAGCX_DATA_DIR:-$PWD}
OPS=${OPS:-gather scatter broadcast allgather allreduce reduce reducescatter alltoall}
for r in $(seq 1 $R); do for op in $OPS; do for v in 4096 16384 32768; do
  echo "== round $r $op SMALL_BYTES=$v $EXTRA $(date -u +%T)"
  FLAGCX_SHM_SMALL_BYTES=$v timeout 300 mpiexec -n 2 $B/tools/perf/test_$op -b 4K -e 64K -f 2 -m 1 -r 0 \
    --repeat 3 -n 200 $EXTRA 2>&1 |
    grep -E "^ +[0-9]|wrong|rror" | awk '/^ +[0-9]/{print $1, $6, $11, $NF; next} {print}'
done; done; done
