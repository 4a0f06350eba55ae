#!/usr/bin/env bash
# Session 20, device call 6: helpers on 64 KiB+ stripes (as call 4) against a scratch rule
# (XX_Q=1: only while another message of the same direction is posted on the Conn).
# The bundle was built from baa5e4a plus a scratch getenv("XX_Q") test beside helperStripe()
# in progressSend/progressRecv; not kept.
set -u
cd "$(dirname "$0")/../../.."
L=$OUT; mkdir -p $L; T0=$SECONDS
mkdir -p /tmp/mbx && tar xzf .carry/mpi-bench.tgz -C /tmp/mbx; M=/tmp/mbx/mb
export LD_LIBRARY_PATH=$M/lib FLAGCX_DATA_DIR=$PWD FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo
run() { # name op [env...]
  local name=$1 op=$2; shift 2
  env "$@" timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$op -b 256K -e 16M -f 4 -m 1 -r 0 --repeat 3 > $L/$name.log 2>&1
  grep -E "^ +[0-9]" $L/$name.log | awk -v n=$name '{print n, $1, $6, $11, $NF}'
}
run allreduce-s64 allreduce
run allreduce-q allreduce XX_Q=1
run sendrecv-s64 sendrecv
run sendrecv-q sendrecv XX_Q=1
run allreduce-s64b allreduce
run allreduce-qb allreduce XX_Q=1
