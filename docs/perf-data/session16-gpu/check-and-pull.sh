#!/usr/bin/env bash
# session 16, GPU call A: gpu-check's tests with NCCL enabled (SHM_PULL=1 now the default), then
# bench_engine's staged-shm pass (FLAGCX_IPC_DISABLE=1 path) at FLAGCX_SHM_PULL 0 and 1, interleaved.
set -u
cd "$(dirname "$0")/../../.."
L=$OUT; mkdir -p $L; T0=$SECONDS
export PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
echo "main $(git rev-parse --short HEAD 2>/dev/null) nproc $(nproc)" > $L/env.txt
GPU_CHECK_BENCH=0 GPU_CHECK_OUT=$L/check timeout 470 tools/gpu-check.sh build-gpu > $L/gpu-check.txt 2>&1
echo "gpu-check rc $? at $((SECONDS-T0))s" >> $L/env.txt
. tools/carried-deps.sh
for r in 1 2; do for p in 0 1; do
  [ $((SECONDS-T0)) -gt 540 ] && break 2
  FLAGCX_SHM_PULL=$p BENCH_ENGINE_PASS=staged-shm timeout 40 build-gpu/tests/gpu/bench_engine 2 256 > $L/staged-shm-pull$p-r$r.log 2>&1
  echo "staged-shm pull=$p round $r rc $? at $((SECONDS-T0))s" >> $L/env.txt
done; done
cat $L/env.txt; tail -25 $L/gpu-check.txt
for f in $L/staged-shm-*.log; do echo "## $f"; grep -E "^ +[0-9]|us per call" $f | head -12; done
