#!/usr/bin/env bash
# Session 20, device call 2: tcp_lanes.c showed that on 16 cores a loopback exchange scales with
# TCP connections only when each has its own thread.  Session 14's helper threads (a send and a
# receive thread per connection; docs/perf-data/session18-host/socket-helpers-rebased.patch on
# d60d9a7) were measured on 16 cores with one lane only.  Here: helpers with 1, 2 and 4 lanes,
# with and without the engine sleeping in poll(), against main at 1 and 4 lanes and MPICH over
# TCP.  Bundle: mk-mpi-bench.sh <main d60d9a7 release> <the same + the patch>.
set -u
cd "$(dirname "$0")/../../.."
L=$OUT; mkdir -p $L; T0=$SECONDS
mkdir -p /tmp/mbx && tar xzf .carry/mpi-bench.tgz -C /tmp/mbx; M=/tmp/mbx/mb
export LD_LIBRARY_PATH=$M/lib FLAGCX_DATA_DIR=$PWD FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo
run() { # name tree [env...]
  local name=$1 tree=$2; shift 2
  env "$@" timeout 60 $M/bin/mpiexec.hydra -n 2 $M/$tree/tools/perf/test_allreduce -b 64K -e 64M -f 4 -m 1 -r 0 --repeat 3 > $L/$name.log 2>&1
  echo "$name rc $? at $((SECONDS-T0))s"
  grep -E "^ +[0-9]" $L/$name.log | awk -v n=$name '{print n, $1, $6, $11, $NF}'
}
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${LIMIT_S:-470} ] && break
  run main1-r$r main
  run help4-r$r helpers FLAGCX_SOCKET_NTHREADS=4
  run main4-r$r main FLAGCX_SOCKET_NTHREADS=4
  run help2-r$r helpers FLAGCX_SOCKET_NTHREADS=2
  run help4spin-r$r helpers FLAGCX_SOCKET_NTHREADS=4 XX_NOSLEEP=1
  run help1-r$r helpers
done
