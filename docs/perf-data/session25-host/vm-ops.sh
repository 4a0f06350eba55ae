#!/usr/bin/env bash
# Session 25, this 2-core VM: every test_<op> of a release build over shared memory against
# MPICH on its default transports (issue 19's "every test_<op> >= 1x MPICH from 64 KiB over
# shm", first measured in session 13), or with "tcp" over loopback TCP against MPICH over
# UCX_TLS=tcp,self; 2 ranks, 64 KiB - 16 MiB, three rounds.
#   vm-ops.sh <release build> <log dir> [shm|tcp]
set -u
B=$1 L=$2 T=${3:-shm}; mkdir -p $L
[ $T = tcp ] && export FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self
export UCX_NET_DEVICES=lo FLAGCX_DATA_DIR=$PWD
{ lscpu | grep -E "Model name|^CPU\(s\)"; uptime; } | tee $L/host.txt
for r in 1 2 3; do
  for op in allreduce allgather reducescatter alltoall reduce gather scatter sendrecv broadcast; do
    x=; [ $op = broadcast ] && x="-I 0"
    timeout 120 mpiexec -n 2 $B/tools/perf/test_$op -b 64K -e 16M -f 4 -m 1 -r 0 --repeat 3 $x \
      > $L/$op-$T-r$r.log 2>&1 || echo "FAIL $op r$r rc=$?"
  done
  echo "round $r done"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
