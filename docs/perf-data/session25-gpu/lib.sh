# Sourced by session 25's device scripts: session 21's setup (logs, host, the MPICH + flagcx
# bundle, loopback TCP) and run(): one test_<op> of the bundle's main build at 2 ranks against
# MPICH with the environment of arm ARM[$arm] and the sizes in $SIZES, logged as <op>-<arm>-r<round>;
# every_op(): each test_<op> once, broadcast out of place (-I 0).
source "$(dirname "${BASH_SOURCE[0]}")/../session21-gpu/common.sh"
run() { # op arm round [extra flags]
  local op=$1 arm=$2 r=$3; shift 3
  env ${ARM[$arm]} timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$op $SIZES -m 1 \
    -r 0 --repeat 3 "$@" > $L/$op-$arm-r$r.log 2>&1 || echo "FAIL $op $arm r$r rc=$?"
}
every_op() { # arm round
  for op in allreduce allgather reducescatter alltoall reduce gather scatter sendrecv; do run $op $1 $2; done
  run broadcast $1 $2 -I 0
}
