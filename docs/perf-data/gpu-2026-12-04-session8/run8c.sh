#!/usr/bin/env bash
# session 8, GPU call C: the hand-off mode (FLAGCX_CUDA_STREAM_WAIT=handoff,
# the new default): CUDA tests, the torch-style deadlock test with
# CUDA_DEVICE_MAX_CONNECTIONS=1, torch's GPU check, bench_engine
# direct (hand-off) vs direct-value.
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
B=build-dropin; T0=$SECONDS
[ -f $B/build.ninja ] || meson setup $B -Dcuda=enabled -Dnccl=enabled -Dnccl_dropin=enabled -Dgpu_archs=90 -Dmpi=disabled -Dtorch=enabled -Dnccl_include=$PWD/.carry/nccl-h >$L/setup.log 2>&1
ninja -k 0 -C $B >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" >> $L/env.txt
timeout 150 $B/tests/gpu/test_cuda_adapter > $L/adapter.log 2>&1; echo "cuda-adapter rc $? at $((SECONDS-T0))s" >> $L/env.txt
timeout 300 $B/tests/gpu/test_cuda_multi > $L/multi.log 2>&1; echo "cuda-multi rc $? at $((SECONDS-T0))s" >> $L/env.txt; pkill -9 -f test_cuda_multi
timeout 100 $B/tests/gpu/test_cuda_onesided > $L/onesided.log 2>&1; echo "cuda-onesided rc $? at $((SECONDS-T0))s" >> $L/env.txt
TORCH_GPU_STEP_TIMEOUT=60 PYTHON=python3 timeout 330 plugins/torch/tests/gpu_check.sh $B > $L/torch-gpu-check.txt 2>&1
echo "torch gpu_check rc $? at $((SECONDS-T0))s" >> $L/env.txt
cp -r $B/torch-gpu $L/ 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt; grep -E "^\[  (PASSED|FAILED)|OK \]|mode " $L/adapter.log $L/multi.log $L/onesided.log | grep -v "^.*OK \].*ms)$" | head -30; tail -22 $L/torch-gpu-check.txt
