#!/usr/bin/env bash
# Session 20, device call 3: helper threads with 4 lanes won at >= 4 MiB in call 2 but lost at
# 256 KiB (a 128 KiB message on one lane handed to a helper) and used only 2 of 4 lanes below
# 1 MiB messages (stripes are >= 256 KiB).  Scratch knobs in the helper build (not in the
# library): XX_ONLYSTRIPED=1 hands only stripes of messages split over several lanes to the
# helpers; XX_MINSTRIPE=N is the smallest stripe.  Against main (1 lane) and MPICH over TCP.
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
  [ $((SECONDS-T0)) -gt ${LIMIT_S:-400} ] && break
  run main1-r$r main
  run help4-r$r helpers FLAGCX_SOCKET_NTHREADS=4
  run help4s-r$r helpers FLAGCX_SOCKET_NTHREADS=4 XX_ONLYSTRIPED=1
  run help4s128-r$r helpers FLAGCX_SOCKET_NTHREADS=4 XX_ONLYSTRIPED=1 XX_MINSTRIPE=131072
  run help4s64-r$r helpers FLAGCX_SOCKET_NTHREADS=4 XX_ONLYSTRIPED=1 XX_MINSTRIPE=65536
  run help8s64-r$r helpers FLAGCX_SOCKET_NTHREADS=8 XX_ONLYSTRIPED=1 XX_MINSTRIPE=65536
done
