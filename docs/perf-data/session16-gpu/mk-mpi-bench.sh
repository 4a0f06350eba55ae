#!/bin/bash
# Session 16: bundle this VM's MPICH 4.0.2 runtime (hydra, libmpich, UCX, hwloc) with two release
# builds of the perf tools into .carry/mpi-bench.tgz, so that the device machine (Open MPI only,
# 16 cores) can compare flagcx's sockets with the same MPICH over TCP where cores are spare.
#   mk-mpi-bench.sh <main release build> <helper-prototype release build>
# Both builds: meson setup B --buildtype=release -Dcuda=disabled -Dtests=disabled; the second
# from a tree with docs/perf-data/session14-host/socket-helpers.patch applied (git apply --3way).
set -e
MAIN=$1 HELP=$2 R=/tmp/mb
rm -rf $R; mkdir -p $R/bin $R/lib/ucx $R/main/tools/perf $R/helpers/tools/perf
cp /usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy $R/bin/
for l in libmpich.so.12 libhwloc.so.15 libucp.so.0 libucs.so.0 libuct.so.0 libucm.so.0 libslurm.so.38 \
         libnuma.so.1 libudev.so.1 libluajit-5.1.so.2 libyaml-cpp.so.0.7 libucs_signal.so.0; do
  cp -L /usr/lib/x86_64-linux-gnu/$l $R/lib/ 2>/dev/null || cp -L /lib/x86_64-linux-gnu/$l $R/lib/
done
cp -L /usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0 $R/lib/ucx/
for t in allreduce broadcast allgather; do
  cp $MAIN/tools/perf/test_$t $R/main/tools/perf/; cp $HELP/tools/perf/test_$t $R/helpers/tools/perf/
done
cp $MAIN/libflagcx.so $R/main/; cp $HELP/libflagcx.so $R/helpers/
mkdir -p .carry; tar czf .carry/mpi-bench.tgz -C /tmp mb; ls -la .carry/mpi-bench.tgz
