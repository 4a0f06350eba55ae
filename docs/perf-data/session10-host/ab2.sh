#!/usr/bin/env bash
cd /work/main
export UCX_NET_DEVICES=lo
for i in $(seq 1 ${N:-3}); do
  for mode in off on; do
    if [ $mode = off ]; then v=0; else v=2097152; fi
    for op in ${OPS:-allreduce broadcast allgather reducescatter}; do
      FLAGCX_SHM_STREAM_BYTES=$v mpiexec -n 2 build-perf/tools/perf/test_$op -b ${B:-256K} -e ${E:-16M} -f ${F:-4} -m 1 -r 0 -w 5 -W 50 -n 10 -T 40 -c 0 2>&1 \
        | awk -v m=$mode -v op=$op -v i=$i '$1 ~ /^[0-9]+$/ {print i, m, op, $0}'
    done
  done
done
