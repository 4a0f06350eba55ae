#!/usr/bin/env bash
# Before (eb27c2d, the tree before the restructure) against after (main), interleaved,
# 3 runs each, 2 ranks over shm, count-based method on both sides.
export UCX_NET_DEVICES=lo FLAGCX_TIMEOUT=60
out=/tmp/ab; mkdir -p $out
for run in 1 2 3; do
  for op in allreduce allgather alltoall broadcast; do
    root=""; [ $op = broadcast ] && root="-r 0"
    echo "load $(cut -d' ' -f1 /proc/loadavg)" >> $out/load.txt
    mpiexec -n 2 /work/wt/before/build/tools/perf/test_$op -b 1K -e 64M -f 8 -w 300 -n 300 $root > $out/before-$op-$run.txt 2>&1
    mpiexec -n 2 /work/main/build/tools/perf/test_$op -b 1K -e 64M -f 8 -w 300 -W 0 -n 300 -T 0 $root > $out/after-$op-$run.txt 2>&1
  done
done
echo done > $out/DONE
