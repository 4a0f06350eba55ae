#!/usr/bin/env bash
# Used with a temporary switch EXP_SHM_STREAM (removed); to repeat, use ab2.sh (FLAGCX_SHM_STREAM_BYTES).
# A/B of EXP_SHM_STREAM: alternate launches; prints op size flagcx_us mpi_us ratio per launch
cd /work/main
export UCX_NET_DEVICES=lo
for i in $(seq 1 ${N:-4}); do
  for mode in 0 1; do
    for op in ${OPS:-broadcast allreduce}; do
      EXP_SHM_STREAM=$mode mpiexec -n 2 build-perf/tools/perf/test_$op -b ${B:-64K} -e ${E:-16M} -f ${F:-4} -m 1 -r 0 -w 5 -W 50 -n 10 -T 40 -c 0 2>&1 \
        | awk -v m=$mode -v op=$op -v i=$i '$1 ~ /^[0-9]+$/ {print i, "mode" m, op, $0}'
    done
  done
done
