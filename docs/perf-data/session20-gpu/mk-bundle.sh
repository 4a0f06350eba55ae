#!/bin/bash
# Session 20: like session16-gpu/mk-mpi-bench.sh (this VM's MPICH 4.0.2 + UCX runtime), with every
# tools/perf/test_<op> of two release builds: "main" (the tree under test) and "base" (d60d9a7).
#   mk-bundle.sh <release build under test> <baseline release build>
set -e
MAIN=$1 BASE=$2 R=/tmp/mb
rm -rf $R; mkdir -p $R/bin $R/lib/ucx $R/main/tools/perf $R/base/tools/perf
cp /usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy $R/bin/
for l in libmpich.so.12 libhwloc.so.15 libucp.so.0 libucs.so.0 libuct.so.0 libucm.so.0 libslurm.so.38 \
         libnuma.so.1 libudev.so.1 libluajit-5.1.so.2 libyaml-cpp.so.0.7 libucs_signal.so.0; do
  cp -L /usr/lib/x86_64-linux-gnu/$l $R/lib/ 2>/dev/null || cp -L /lib/x86_64-linux-gnu/$l $R/lib/
done
cp -L /usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0 $R/lib/ucx/
for t in allreduce broadcast allgather reducescatter reduce gather scatter alltoall alltoallv sendrecv; do
  cp $MAIN/tools/perf/test_$t $R/main/tools/perf/
done
cp $BASE/tools/perf/test_allreduce $R/base/tools/perf/
cp $MAIN/libflagcx.so $R/main/; cp $BASE/libflagcx.so $R/base/
mkdir -p .carry; tar czf .carry/mpi-bench.tgz -C /tmp mb; ls -la .carry/mpi-bench.tgz
