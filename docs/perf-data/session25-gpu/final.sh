#!/usr/bin/env bash
# Session 25's device call (CPU only, 16-core host): issue 19's socket goal measured the issue's
# way for every op. Each tools/perf/test_<op> of a release build of main at 2 ranks over loopback
# TCP against MPICH (-m 1, ratio = MPI time / flagcx time) from 64 KiB to 16 MiB, three
# interleaved rounds; broadcast out of place (-I 0). Then session 24's fused-copy arms
# (FLAGCX_FUSE_COPIES=0) for the three reducing ops, while the budget lasts.
# Bundle: ../session23-gpu/mk-bundle.sh <release build of main> <same build>.
SIZES="-b 64K -e 16M -f 4"
source "$(dirname "$0")/lib.sh"
declare -A ARM=([main]="" [nofuse]="FLAGCX_FUSE_COPIES=0")
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-200} ] && break
  every_op main $r
  echo "round $r done at $((SECONDS-T0)) s"
done
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET2:-300} ] && break
  for op in allreduce reducescatter reduce; do run $op nofuse $r; done
  echo "nofuse round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
