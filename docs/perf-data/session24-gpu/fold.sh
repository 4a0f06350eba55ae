#!/usr/bin/env bash
# Session 24's third device script (CPU only, 16-core host): the socket helpers reducing what they
# receive (FLAGCX_SOCKET_RECV_REDUCE=1, "fold", the library as committed) against the engine
# thread reducing each landed slice ("nofold": FLAGCX_SOCKET_RECV_REDUCE=0), for the three reducing
# ops at 2 ranks over loopback TCP against MPICH, rounds interleaved; then allreduce at 4 ranks
# (MPICH on its default transports) and broadcast at 4 ranks with the chain as committed (the root's
# copy of chunk k in chunk k's stage: c4) and as before (c4old: the fuzz corpus keeps that chain.lua,
# tests/fuzz/corpus/script/broadcast-chain.lua, copied to a folder of its own for FLAGCX_ALGO_PATH).
# Last, the out-of-place broadcast at 2 ranks (the engine thread helping the copy thread).
# "main" in the bundle is a release build of the tree under test.
source "$(dirname "$0")/../session21-gpu/common.sh"
declare -A ARM=([fold]="" [nofold]="FLAGCX_SOCKET_RECV_REDUCE=0"
  [fold4]="-u UCX_TLS" [nofold4]="-u UCX_TLS FLAGCX_SOCKET_RECV_REDUCE=0"
  [c4]="-u UCX_TLS" [c4old]="-u UCX_TLS FLAGCX_ALGO_PATH=/tmp/oldchain")
mkdir -p /tmp/oldchain && cp tests/fuzz/corpus/script/broadcast-chain.lua /tmp/oldchain/chain.lua
run() { # op arm round [extra flags]
  local op=$1 arm=$2 r=$3; shift 3
  env ${ARM[$arm]} timeout 60 $M/bin/mpiexec.hydra -n ${NP:-2} $M/main/tools/perf/test_$op -b 256K -e 16M -f 4 -m 1 \
    -r 0 --repeat 3 "$@" > $L/$op-$arm-r$r.log 2>&1 || echo "FAIL $op $arm r$r rc=$?"
}
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-150} ] && break
  for op in allreduce reducescatter reduce; do for a in fold nofold; do run $op $a $r; done; done
  for a in fold4 nofold4; do NP=4 run allreduce $a $r; done
  for a in c4 c4old; do NP=4 run broadcast $a $r -I 0; done
  run broadcast fold $r -I 0
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
