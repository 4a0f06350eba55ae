#!/usr/bin/env bash
# session 7, GPU call B (build-gpu from call A kept warm): torch 2 ranks on
# GPU 0 diagnosed (faulthandler + FLAGCX_DEBUG=INFO), torch gpu_check with
# short steps, bench_engine under MPS.
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
T0=$SECONDS
[ -f build-gpu/build.ninja ] || meson setup build-gpu -Dcuda=enabled -Dnccl=enabled -Dgpu_archs=90 -Dtorch=enabled -Dmpi=disabled >$L/setup.log 2>&1
ninja -C build-gpu >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" | tee -a $L/env.txt
timeout 120 build-gpu/tests/gpu/test_cuda_adapter > $L/adapter.log 2>&1; echo "cuda-adapter rc $? at $((SECONDS-T0))s" >> $L/env.txt
timeout 120 build-gpu/tests/gpu/bench_cuda 1024 > $L/bench_cuda.log 2>&1; echo "bench_cuda rc $? at $((SECONDS-T0))s" >> $L/env.txt
export PYTHONPATH=$PWD/build-gpu/plugins/torch
# 2 ranks on GPU 0 without torchrun: each under faulthandler, ABRT at 40 s.
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29633 CUDA_VISIBLE_DEVICES=0 \
  FLAGCX_USE_HETERO_COMM=1 FLAGCX_DEBUG=INFO FLAGCX_TIMEOUT=30 PYTHONFAULTHANDLER=1 \
  timeout -s ABRT -k 5 40 python3 plugins/torch/tests/test_ops.py --device cuda > $L/ops2-r$r.log 2>&1 &
done
wait; echo "ops2 manual done at $((SECONDS-T0))s" >> $L/env.txt
pkill -9 -f test_ops.py
TORCH_GPU_STEP_TIMEOUT=45 PYTHON=python3 timeout 420 plugins/torch/tests/gpu_check.sh build-gpu > $L/torch-gpu-check.txt 2>&1
echo "torch gpu_check rc $? at $((SECONDS-T0))s" >> $L/env.txt
cp -r build-gpu/torch-gpu $L/ 2>/dev/null
# The engine with 2 ranks on GPU 0 under MPS (issue 19).
if command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d && echo "mps started" >> $L/env.txt
  timeout 150 build-gpu/tests/gpu/bench_engine 2 1024 > $L/engine-mps.log 2>&1; echo "engine mps rc $? at $((SECONDS-T0))s" >> $L/env.txt
  echo quit | nvidia-cuda-mps-control; cp -r /tmp/mps-log $L/ 2>/dev/null
else
  echo "no nvidia-cuda-mps-control on this machine" >> $L/env.txt
fi
tar czf $OUT/logs.tgz -C $OUT logs; cat $L/env.txt; grep -E "misaligned|PASSED|FAILED" $L/bench_cuda.log $L/adapter.log; cat $L/torch-gpu-check.txt | tail -15; tail -5 $L/ops2-r0.log; grep -E "bytes|MiB|ratio|^ +[0-9]" $L/engine-mps.log | head -20
