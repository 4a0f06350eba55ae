#!/bin/bash
# Session 17: point-to-point messages from shareable buffers copied out of a mapping of the
# sender's allocation (after) against process_vm_readv (before), same harness binaries, the
# library picked by LD_LIBRARY_PATH, launches interleaved.
#   OLD=<dir with the parent's libflagcx.so> B=<release build> p2p-mapped.sh [rounds] [ops...]
R=${1:-3}; shift; OPS=${*:-sendrecv alltoallv}
export UCX_NET_DEVICES=lo FLAGCX_DATA_DIR=${FLAGCX_DATA_DIR:-$PWD}
for r in $(seq 1 $R); do for op in $OPS; do for v in before after; do
  lib=$OLD; [ $v = after ] && lib=$B
  echo "== round $r $op $v $(date -u +%T)"
  LD_LIBRARY_PATH=$lib timeout 300 mpiexec -n 2 $B/tools/perf/test_$op -b 64K -e 16M -f 4 -m 1 -r 0 \
    --repeat 3 ${EXTRA:-} 2>&1 |
    grep -E "^ +[0-9]|wrong|rror" | awk '/^ +[0-9]/{print $1, $6, $11, $NF; next} {print}'
done; done; done
