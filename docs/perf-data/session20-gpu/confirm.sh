#!/usr/bin/env bash
# Session 20, device call 4: the library with socket helper threads (FLAGCX_SOCKET_HELPERS, auto)
# against MPICH over TCP on the 16-core host.  Bundle: mk-bundle.sh <this tree, release> <d60d9a7>.
#   A: allreduce, 3 interleaved rounds: auto (helpers on, 4 lanes here) and the same binary with
#      FLAGCX_SOCKET_HELPERS=0 (1 lane: the engine as in d60d9a7).
#   B: every other test_<op> once with auto.
#   C: 2 ranks on 8 cores (taskset): auto picks 2 lanes; against helpers off.
set -u
cd "$(dirname "$0")/../../.."
L=$OUT; mkdir -p $L; T0=$SECONDS
mkdir -p /tmp/mbx && tar xzf .carry/mpi-bench.tgz -C /tmp/mbx; M=/tmp/mbx/mb
export LD_LIBRARY_PATH=$M/lib FLAGCX_DATA_DIR=$PWD FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo
run() { # name tree op [env...]
  local name=$1 tree=$2 op=$3; shift 3
  env "$@" timeout 90 $M/bin/mpiexec.hydra -n 2 $M/$tree/tools/perf/test_$op -b 64K -e 64M -f 4 -m 1 -r 0 --repeat 3 > $L/$name.log 2>&1
  echo "$name rc $? at $((SECONDS-T0))s"
  grep -E "^ +[0-9]" $L/$name.log | awk -v n=$name '{print n, $1, $5, $6, $11, $NF}'
}
FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=NET timeout 30 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_allreduce -b 1M -e 1M -n 2 -w 1 2>&1 | grep -m2 "lane"
for r in 1 2 3; do
  run auto-r$r main allreduce
  run off-r$r main allreduce FLAGCX_SOCKET_HELPERS=0
done
for op in broadcast allgather reducescatter alltoall sendrecv reduce gather scatter alltoallv; do
  [ $((SECONDS-T0)) -gt 170 ] && break
  run $op-auto main $op
done
[ $((SECONDS-T0)) -gt 190 ] && exit 0
T="taskset -c 0-7"
FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=NET timeout 30 $T $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_allreduce -b 1M -e 1M -n 2 -w 1 2>&1 | grep -m1 "lane"
for r in 1; do
  env $T bash -c "timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_allreduce -b 64K -e 64M -f 4 -m 1 -r 0 --repeat 3" > $L/cores8-auto-r$r.log 2>&1
  grep -E "^ +[0-9]" $L/cores8-auto-r$r.log | awk -v n=cores8-auto-r$r '{print n, $1, $6, $11, $NF}'
  FLAGCX_SOCKET_HELPERS=0 $T timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_allreduce -b 64K -e 64M -f 4 -m 1 -r 0 --repeat 3 > $L/cores8-off-r$r.log 2>&1
  grep -E "^ +[0-9]" $L/cores8-off-r$r.log | awk -v n=cores8-off-r$r '{print n, $1, $6, $11, $NF}'
done
