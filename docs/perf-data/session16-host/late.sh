#!/bin/bash
# Session 16: a stage's local steps while its messages move (after) against main before it
# (before), heap buffers over shm (pull on, the default), interleaved launches.
#   OLD=<build of the parent commit> NEW=<build of the change> late.sh [rounds] [ops...]
R=${1:-2}; shift; OPS=${*:-broadcast scatter gather allgather allreduce reducescatter alltoall}
export UCX_NET_DEVICES=lo FLAGCX_DATA_DIR=${FLAGCX_DATA_DIR:-$PWD}
for r in $(seq 1 $R); do for op in $OPS; do for v in before after; do
  b=$OLD; [ $v = after ] && b=$NEW
  echo "== round $r $op $v ${EXTRA:-} $(date -u +%T)"
  timeout 300 mpiexec -n 2 $b/tools/perf/test_$op -b 64K -e 16M -f 4 -m 1 -r 0 --repeat 3 -M 1 ${EXTRA:-} 2>&1 |
    grep -E "^ +[0-9]|wrong|rror" | awk '/^ +[0-9]/{print $1, $6, $11, $NF; next} {print}'
done; done; done
