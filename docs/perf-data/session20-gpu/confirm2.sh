#!/usr/bin/env bash
# Session 20, device call 5: helpers only for stripes >= 128 KiB (64 KiB stripes stay polled),
# after call 4 showed 256 KiB sendrecv at 0.39x and allgather at 0.80x with helpers on 64 KiB
# stripes.  Same bundle layout as confirm.sh (mk-bundle.sh); 2 ranks, sockets, auto settings.
# The bundle was built from baa5e4a plus a scratch change (kHelperStripe = 128 KiB in
# net/common/framed_conn.cc: helpers only for stripes of at least 128 KiB); not kept.
set -u
cd "$(dirname "$0")/../../.."
L=$OUT; mkdir -p $L; T0=$SECONDS
mkdir -p /tmp/mbx && tar xzf .carry/mpi-bench.tgz -C /tmp/mbx; M=/tmp/mbx/mb
export LD_LIBRARY_PATH=$M/lib FLAGCX_DATA_DIR=$PWD FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo
run() { # name op [env...]
  local name=$1 op=$2; shift 2
  env "$@" timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$op -b 64K -e 64M -f 4 -m 1 -r 0 --repeat 3 > $L/$name.log 2>&1
  grep -E "^ +[0-9]" $L/$name.log | awk -v n=$name '{print n, $1, $6, $11, $NF}'
}
for op in allreduce sendrecv allreduce allgather reducescatter allreduce; do
  [ $((SECONDS-T0)) -gt ${LIMIT_S:-110} ] && break
  run $op-$SECONDS $op
done
