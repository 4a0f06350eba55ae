#!/usr/bin/env bash
# Session 24's last device script (CPU only, 16-core host): the copies runColl leaves out for a
# receive-and-reduce (FLAGCX_FUSE_COPIES=1, "fuse", the tree under test) against making them
# ("nofuse": FLAGCX_FUSE_COPIES=0), for the three reducing ops at 2 ranks over loopback TCP against
# MPICH, rounds interleaved. "main" in the bundle is a release build of the tree under test.
source "$(dirname "$0")/../session21-gpu/common.sh"
declare -A ARM=([fuse]="" [nofuse]="FLAGCX_FUSE_COPIES=0")
run() { # op arm round
  local op=$1 arm=$2 r=$3
  env ${ARM[$arm]} timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$op -b 256K -e 16M -f 4 -m 1 \
    -r 0 --repeat 3 > $L/$op-$arm-r$r.log 2>&1 || echo "FAIL $op $arm r$r rc=$?"
}
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-150} ] && break
  for op in allreduce reducescatter reduce; do for a in fuse nofuse; do run $op $a $r; done; done
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
