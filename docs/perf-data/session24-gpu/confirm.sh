#!/usr/bin/env bash
# Session 24's device call (CPU only, 16-core host), over loopback TCP against MPICH: session 23's
# confirm.sh (never run: no machine came) plus two scratch arms.
# "main" = 36e15bc plus scratch.patch (this folder; its XX_PROF part came after these calls, for
# prof.sh, and does nothing unset) with its knobs unset, which is 36e15bc's
# behaviour: the copy thread (FLAGCX_COPY_THREAD auto: on) and 2 MiB slices to socket peers with
# helper threads (FLAGCX_NET_CHUNK_SIZE auto). "base" = session 23's call-1 build (87cb077 plus
# session23-gpu/scratch.patch, its knobs unset). Arms: main, base, main with each change off
# (ct0: FLAGCX_COPY_THREAD=0, c512: FLAGCX_NET_CHUNK_SIZE=524288), main with the engine thread
# sharing the copy thread's batch in 256 KiB pieces (cs1: when its messages are done, cs2: also
# whenever it would otherwise wait), allreduce as recursive doubling (rd: at 2 ranks one
# exchange of the whole buffer, then a local reduction, instead of the ring's two steps of half);
# then every other op once per round, main and base; then the same-host shm path
# (FLAGCX_SHM_DISABLE=0) with and without the copy thread (flagcx times only: MPICH stays on TCP);
# then a 4-rank broadcast (chain from 512 KiB; MPICH on its default transports, as its TCP-only
# setting hangs in MPI_Finalize past 2 ranks) with the shipped chain.lua (c4) and with spread/
# chain.lua (c4s: the root's copy of chunk k in the stage of chunk k's send, not all in stage 0).
# spread/chain.lua became algos/broadcast/chain.lua in 52b21f7 and was removed: on later trees
# c4 is that chain and c4s runs it again (tests/fuzz/corpus/script/broadcast-chain.lua is the one before).
# Bundle: ../session23-gpu/mk-bundle.sh <release build of main+scratch> <release build of base>.
source "$(dirname "$0")/../session21-gpu/common.sh"
declare -A ARM=([main]="" [base]="" [ct0]="FLAGCX_COPY_THREAD=0" [c512]="FLAGCX_NET_CHUNK_SIZE=524288"
  [cs1]="XX_CPT_SHARE=1" [cs2]="XX_CPT_SHARE=2" [rd]="FLAGCX_ALGO=allreduce:recursive_doubling"
  [c4]="-u UCX_TLS" [c4s]="-u UCX_TLS"
  [shm]="FLAGCX_SHM_DISABLE=0" [shmct0]="FLAGCX_SHM_DISABLE=0 FLAGCX_COPY_THREAD=0")
run() { # op arm round [extra flags]
  local op=$1 arm=$2 r=$3; shift 3
  local tree=main; [ $arm = base ] && tree=base
  env ${ARM[$arm]} timeout 60 $M/bin/mpiexec.hydra -n ${NP:-2} $M/$tree/tools/perf/test_$op -b 256K -e 16M -f 4 -m 1 \
    -r 0 --repeat 3 "$@" > $L/$op-$arm-r$r.log 2>&1 || echo "FAIL $op $arm r$r rc=$?"
}
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-150} ] && break
  for a in main base ct0 cs1 cs2; do run broadcast $a $r -I 0; done
  for a in main base c512 rd; do run allreduce $a $r; done
  if [ $r -le 2 ]; then
    for op in allgather reducescatter alltoall reduce gather scatter sendrecv; do
      for a in main base; do run $op $a $r; done
    done
    for a in shm shmct0; do run broadcast $a $r -I 0; run allgather $a $r; done
    for a in c4 c4s; do NP=4 run broadcast $a $r -I 0; done
  fi
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
