#!/usr/bin/env bash
# Session 20, one device call.  A: the raw loopback-TCP exchange bound on a host with spare
# cores (tcp_lanes.c: one polling thread vs lane threads), interleaved with flagcx main's and
# MPICH's allreduce over TCP (the bundle .carry/mpi-bench.tgz from
# docs/perf-data/session16-gpu/mk-mpi-bench.sh, main d60d9a7 release).  B: bench_engine at 4
# ranks on one GPU (docs/GPU.md item 3), with 2 ranks beside it.
set -u
cd "$(dirname "$0")/../../.."
L=$OUT; mkdir -p $L; T0=$SECONDS
mkdir -p /tmp/mbx && tar xzf .carry/mpi-bench.tgz -C /tmp/mbx; M=/tmp/mbx/mb
{ echo "host $(uname -n) nproc $(nproc) main $(git rev-parse --short HEAD 2>/dev/null)"; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|Thread"; uname -r; } > $L/env.txt
gcc -O2 -pthread docs/perf-data/session20-gpu/tcp_lanes.c -o /tmp/tcp_lanes
iters() { case $1 in 1048576) echo 200;; 4194304) echo 100;; 16777216) echo 40;; *) echo 15;; esac; }
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${SOCK_LIMIT_S:-300} ] && break
  for S in 1048576 4194304 16777216 67108864; do
    for v in "poll 1" "poll 2" "spin 1" "spin 2" "spin 4" "spin2 1" "spin2 2" "block2 1" "block2 2" "block2 4"; do
      timeout 30 /tmp/tcp_lanes $S $(iters $S) $v >> $L/lanes-r$r.txt 2>&1 || echo "$v $S rc $?" >> $L/lanes-r$r.txt
    done
  done
  LD_LIBRARY_PATH=$M/lib FLAGCX_DATA_DIR=$PWD FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo \
    timeout 90 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_allreduce -b 1M -e 64M -f 4 -m 1 -r 0 --repeat 3 > $L/allreduce-r$r.log 2>&1
  echo "round $r done at $((SECONDS-T0))s" >> $L/env.txt
done
cat $L/env.txt
for r in 1 2 3; do echo "## round $r"; cat $L/lanes-r$r.txt 2>/dev/null; grep -E "^ +[0-9]" $L/allreduce-r$r.log 2>/dev/null | awk '{print "allreduce", $1, "flagcx", $6, "mpi", $11, "ratio", $NF}'; done
# B: the GPU part, if time is left
[ $((SECONDS-T0)) -gt 420 ] && { echo "no time for B"; exit 0; }
export PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
B=build-gpu
[ -f $B/build.ninja ] || meson setup $B -Dcuda=enabled -Dnccl=disabled -Dgpu_archs=90 -Dtorch=disabled > $L/setup.log 2>&1
ninja -C $B tests/gpu/bench_engine > $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "built at $((SECONDS-T0))s"
for n in 4 2 4; do
  [ $((SECONDS-T0)) -gt 540 ] && break
  BENCH_ENGINE_PASS=direct timeout 60 $B/tests/gpu/bench_engine $n 256 > $L/engine-$n-$SECONDS.log 2>&1; echo "bench_engine $n rc $? at $((SECONDS-T0))s"
done
for f in $L/engine-*.log; do echo "## $f"; cat $f | head -40; done
