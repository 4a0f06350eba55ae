#!/usr/bin/env bash
# Session 23's device call (CPU only, 16-core host), over loopback TCP against MPICH: session 22's
# batch-bcast.sh arms plus two about the broadcast root's copy pieces, which the engine thread
# makes between its hand-offs of 128 KiB stripes to the lane helpers:
# - p32 (XX_PIECE=32768: 32 KiB pieces instead of 128 KiB), idle (XX_IDLE=1: a piece only in a
#   round where no message was posted or completed), p32i (both).
# Bundle: release build of main + scratch.patch (this folder), then session20-gpu/mk-bundle.sh.
source "$(dirname "$0")/../session21-gpu/common.sh"
declare -A ARM=([def]="" [c2m]="FLAGCX_NET_CHUNK_SIZE=2097152" [b8]="XX_SEND_BATCH=8" [nt]="XX_NT=1"
  [cpt]="XX_CPT=1" [p32]="XX_PIECE=32768" [idle]="XX_IDLE=1" [p32i]="XX_PIECE=32768 XX_IDLE=1")
run() { # op arm round [extra flags]
  local op=$1 arm=$2 r=$3; shift 3
  env ${ARM[$arm]} timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$op -b 256K -e 16M -f 4 -m 1 \
    -r 0 --repeat 3 "$@" > $L/$op-$arm-r$r.log 2>&1 || echo "FAIL $op $arm r$r rc=$?"
}
for r in 1 2 3 4; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-150} ] && break
  for a in def cpt p32 idle p32i nt; do run broadcast $a $r -I 0; mv $L/broadcast-$a-r$r.log $L/bcastI0-$a-r$r.log; done
  run broadcast def $r -I 1; mv $L/broadcast-def-r$r.log $L/bcastI1-def-r$r.log
  for a in def b8 c2m; do run allreduce $a $r; done
  if [ $r -le 2 ]; then for op in sendrecv allgather; do for a in def b8; do run $op $a $r; done; done; fi
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
