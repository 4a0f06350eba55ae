#!/usr/bin/env bash
# session 16, device call B (CPU only): sockets on a machine with spare cores.  MPICH 4.0.2 (the
# VM's, carried with its UCX in .carry/mpi-bench.tgz) over TCP against flagcx main and the
# session-14 helper-thread prototype rebased on main; 2 ranks, interleaved launches.
set -u
cd "$(dirname "$0")/../../.."
L=$OUT; mkdir -p $L; T0=$SECONDS
mkdir -p /tmp/mbx && tar xzf .carry/mpi-bench.tgz -C /tmp/mbx; M=/tmp/mbx/mb
export LD_LIBRARY_PATH=$M/lib PATH=$M/bin:$PATH FLAGCX_DATA_DIR=$PWD
export FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo
{ echo "host $(uname -n) nproc $(nproc)"; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|Thread"; uname -r; } > $L/env.txt
run() { # name tree op [env...]
  local name=$1 tree=$2 op=$3; shift 3
  env "$@" timeout 90 $M/bin/mpiexec.hydra -n 2 $M/$tree/tools/perf/test_$op -b 64K -e 64M -f 4 -m 1 -r 0 --repeat 3 > $L/$name.log 2>&1
  echo "$name rc $? at $((SECONDS-T0))s" >> $L/env.txt
}
# SOCKET_VARIANTS: which of main helpers helpers2 lanes2 to run (default all);
# SOCKET_LIMIT_S: no new round after this many seconds (default 480).
variants=" ${SOCKET_VARIANTS:-main helpers helpers2 lanes2} "
want() { [[ $variants == *" $1 "* ]]; }
for r in 1 2 3; do
  for op in allreduce broadcast; do
    [ $((SECONDS-T0)) -gt ${SOCKET_LIMIT_S:-480} ] && break 2
    want main && run $op-main-r$r main $op
    want helpers && run $op-helpers-r$r helpers $op FLAGCX_SOCKET_HELPER_BYTES=65536
    want helpers2 && run $op-helpers2-r$r helpers $op FLAGCX_SOCKET_HELPER_BYTES=65536 FLAGCX_SOCKET_NTHREADS=2
    want lanes2 && run $op-lanes2-r$r main $op FLAGCX_SOCKET_NTHREADS=2
  done
done
cat $L/env.txt
for f in $L/*-r*.log; do echo "## $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{print $1, $6, $11, $NF}'; done
