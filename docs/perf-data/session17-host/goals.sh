#!/bin/bash
# Session 17: issue 19's "every test_<op> >= 1x MPICH from 64 KiB over shm" re-measured on
# main (the adapter's buffers, the harness default), R rounds, the ops in turn.
#   B=<release build> goals.sh [rounds] [extra harness flags]
R=${1:-3}; shift; EXTRA="$*"
export UCX_NET_DEVICES=lo FLAGCX_DATA_DIR=${FLAGCX_DATA_DIR:-$PWD}
OPS=${OPS:-allreduce allgather reducescatter broadcast reduce gather scatter alltoall alltoallv sendrecv}
for r in $(seq 1 $R); do for op in $OPS; do
  echo "== round $r $op $EXTRA $(date -u +%T)"
  timeout 300 mpiexec -n 2 $B/tools/perf/test_$op -b 64K -e 16M -f 4 -m 1 -r 0 --repeat 3 $EXTRA 2>&1 |
    grep -E "^ +[0-9]|wrong|rror" | awk '/^ +[0-9]/{print $1, $6, $11, $NF; next} {print}'
done; done
