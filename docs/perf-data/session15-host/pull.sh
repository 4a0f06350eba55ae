#!/bin/bash
cd /work/main
export UCX_NET_DEVICES=lo
for round in 1 2; do
 for op in allreduce broadcast reduce allgather reducescatter gather scatter alltoall alltoallv sendrecv; do
  for M in 1 0; do
   if [ $M = 0 ] && [ $op != alltoallv ] && [ $op != sendrecv ]; then continue; fi
   for p in 0 1; do
    FLAGCX_SHM_PULL=$p timeout 150 mpiexec -n 2 build-perf/tools/perf/test_$op -b 64K -e 16M -f 4 -m 1 -r 0 --repeat 3 -M $M 2>&1 | awk -v r=$round -v M=$M -v op=$op -v p=$p 'NF>=14 && $1 ~ /^[0-9]+$/ {print r, "M="M, op, "pull="p, $1, $6, $11, $14}'
   done
  done
 done
done
