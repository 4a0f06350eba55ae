#!/bin/bash
# Session 13: every op at 2 ranks over shm, 64 KiB-16 MiB, three interleaved runs, then the
# large allreduce 16-128 MiB three times; MPICH measured the same way in each run.
# Usage (repo root, release build in build-perf): docs/perf-data/session13-host/run-map.sh OUTDIR
set -u
out=${1:?outdir}
mkdir -p "$out"
export UCX_NET_DEVICES=lo
for rep in 1 2 3; do
  for op in allreduce allgather reducescatter broadcast reduce gather scatter alltoall alltoallv sendrecv; do
    r=""
    case $op in reduce|gather|broadcast|scatter) r="-r 0";; esac
    timeout 900 mpiexec -n 2 build-perf/tools/perf/test_$op -b 64K -e 16M -f 4 -m 1 $r \
      --repeat 3 -w 5 -W 100 -n 10 -T 60 > "$out/$op-$rep.txt" 2>&1
  done
  timeout 900 mpiexec -n 2 build-perf/tools/perf/test_allreduce -b 16M -e 128M -f 2 -m 1 \
    --repeat 3 -w 5 -W 100 -n 5 -T 60 > "$out/allreduce-large-$rep.txt" 2>&1
done
