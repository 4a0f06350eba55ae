#!/usr/bin/env bash
# For the next device call (GPU.md item 10; not run in session 20): socket helpers that poll a
# non-blocking socket for XX_HELPER_SPIN_US before sleeping in poll(), against blocking helpers
# (0) in the same binary.  Bundle: git worktree add /tmp/sp HEAD && git -C /tmp/sp apply
# docs/perf-data/session20-gpu/helper-spin.patch, a release build there
# (meson setup B --buildtype=release -Dcuda=disabled -Dtests=disabled -Dtorch=disabled), then
# docs/perf-data/session20-gpu/mk-bundle.sh <that build> <a release build of main>.  ~250 s.
set -u
cd "$(dirname "$0")/../../.."
L=$OUT; mkdir -p $L; T0=$SECONDS
{ lscpu | grep -E "Model name|^CPU\(s\)"; uptime; } | tee $L/host.txt
mkdir -p /tmp/mbx && tar xzf .carry/mpi-bench.tgz -C /tmp/mbx; M=/tmp/mbx/mb
export LD_LIBRARY_PATH=$M/lib FLAGCX_DATA_DIR=$PWD FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo
run() { # name op [env...]
  local name=$1 op=$2; shift 2
  env "$@" timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$op -b 64K -e 64M -f 4 -m 1 -r 0 --repeat 3 > $L/$name.log 2>&1
  grep -E "^ +[0-9]" $L/$name.log | awk -v n=$name '{print n, $1, $6, $11, $NF}'
}
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt 200 ] && break
  for us in 0 50 200; do run allreduce-spin$us-r$r allreduce XX_HELPER_SPIN_US=$us; done
  for us in 0 50; do run sendrecv-spin$us-r$r sendrecv XX_HELPER_SPIN_US=$us; done
done
