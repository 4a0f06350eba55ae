#!/usr/bin/env bash
# session 7, GPU call D: the chosen misaligned policy (best), tests + bench only
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=$PATH:/usr/local/cuda/bin
. tools/carried-deps.sh
T0=$SECONDS
meson setup build-k -Dcuda=enabled -Dnccl=disabled -Dgpu_archs=90 -Dtorch=disabled -Dmpi=disabled -Dnccl_dropin=disabled >$L/setup.log 2>&1 || tail -20 $L/setup.log
ninja -C build-k tests/gpu/test_cuda_adapter tests/gpu/bench_cuda >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" | tee -a $L/env.txt
timeout 60 build-k/tests/gpu/test_cuda_adapter --gtest_filter='CudaReduce.*' > $L/adapter.log 2>&1; echo "adapter rc $?" >> $L/env.txt
timeout 60 build-k/tests/gpu/bench_cuda 256 > $L/bench_cuda.log 2>&1; echo "bench rc $?" >> $L/env.txt
cat $L/env.txt; grep -E "misaligned|PASSED|FAILED|checked" $L/bench_cuda.log $L/adapter.log; head -12 $L/bench_cuda.log
