#!/usr/bin/env bash
# For the next device call (written in session 21, never run: its device time ran out): fewer
# hand-offs between the engine and the socket helpers, two ways, on the library with kMinSplit:
# a send helper job carries up to 8 of its lane's frames (XX_SEND_BATCH=8, scratch knob of
# send-batch.patch, which applies to f1ba0ce), or the engine's slice (FLAGCX_NET_CHUNK_SIZE,
# 512 KiB) is 1 or 2 MiB.  Bundle: a release build of f1ba0ce + send-batch.patch, then
# session20-gpu/mk-bundle.sh <that build> <any>.  ~80 s with BUDGET=60.
source "$(dirname "$0")/common.sh"
declare -A ARM=([def]="" [c1m]="FLAGCX_NET_CHUNK_SIZE=1048576" [c2m]="FLAGCX_NET_CHUNK_SIZE=2097152"
  [off]="FLAGCX_SOCKET_HELPERS=0" [b8]="XX_SEND_BATCH=8")
run() { # op arm round
  env ${ARM[$2]} timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$1 -b 256K -e 16M -f 4 -m 1 \
    -r 0 --repeat 3 > $L/$1-$2-r$3.log 2>&1 || echo "FAIL $1 $2 r$3 rc=$?"
}
for r in 1 2 3 4; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-150} ] && break
  for a in def b8 c2m; do run allreduce $a $r; done
  if [ $r -le 2 ]; then for op in sendrecv allgather; do for a in def b8; do run $op $a $r; done; done; fi
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
