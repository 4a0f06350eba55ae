#!/usr/bin/env bash
# Session 23's second device call (CPU only, 16-core host), over loopback TCP against MPICH:
# "main" = the copy thread (FLAGCX_COPY_THREAD, auto: on) and 2 MiB slices to socket peers with
# helper threads (FLAGCX_NET_CHUNK_SIZE auto); "base" = 83c8951 (the first call's build, its
# scratch knobs unset). Arms: main, base, and main with each change off (ct0:
# FLAGCX_COPY_THREAD=0, c512: FLAGCX_NET_CHUNK_SIZE=524288); then every other op once per round,
# main and base; then the same-host shm path (FLAGCX_SHM_DISABLE=0) with and without the copy
# thread (flagcx times only: MPICH stays on TCP there).
# Bundle: mk-bundle.sh (this folder) <release build of main> <release build of base>.
source "$(dirname "$0")/../session21-gpu/common.sh"
declare -A ARM=([main]="" [base]="" [ct0]="FLAGCX_COPY_THREAD=0" [c512]="FLAGCX_NET_CHUNK_SIZE=524288"
  [shm]="FLAGCX_SHM_DISABLE=0" [shmct0]="FLAGCX_SHM_DISABLE=0 FLAGCX_COPY_THREAD=0")
run() { # op arm round [extra flags]
  local op=$1 arm=$2 r=$3; shift 3
  local tree=main; [ $arm = base ] && tree=base
  env ${ARM[$arm]} timeout 60 $M/bin/mpiexec.hydra -n 2 $M/$tree/tools/perf/test_$op -b 256K -e 16M -f 4 -m 1 \
    -r 0 --repeat 3 "$@" > $L/$op-$arm-r$r.log 2>&1 || echo "FAIL $op $arm r$r rc=$?"
}
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-150} ] && break
  for a in main base ct0; do run broadcast $a $r -I 0; done
  for a in main base c512; do run allreduce $a $r; done
  if [ $r -le 2 ]; then
    for op in allgather reducescatter alltoall reduce gather scatter sendrecv; do
      for a in main base; do run $op $a $r; done
    done
    for a in shm shmct0; do run broadcast $a $r -I 0; run allgather $a $r; done
  fi
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
