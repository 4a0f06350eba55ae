#!/usr/bin/env bash
# session 8, GPU call B: is the torch stall CUDA's hardware-queue aliasing?
# (engine work on the internal stream queued behind the caller's
# cuStreamWaitValue32 gate).  CUDA_DEVICE_MAX_CONNECTIONS=1 puts every stream
# of a context on one queue.
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
B=build-dropin; T0=$SECONDS
[ -f $B/build.ninja ] || meson setup $B -Dcuda=enabled -Dnccl=enabled -Dnccl_dropin=enabled -Dgpu_archs=90 -Dmpi=disabled -Dtorch=enabled -Dnccl_include=$PWD/.carry/nccl-h >$L/setup.log 2>&1
ninja -k 0 -C $B >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" >> $L/env.txt
for c in 1 2; do
  CUDA_DEVICE_MAX_CONNECTIONS=$c timeout 100 $B/tests/gpu/test_cuda_multi --gtest_filter='*TorchStyle*' > $L/torchstyle-conn$c.log 2>&1
  echo "torchstyle conn=$c rc $? at $((SECONDS-T0))s" >> $L/env.txt; pkill -9 -f test_cuda_multi
done
CUDA_DEVICE_MAX_CONNECTIONS=1 BENCH_ENGINE_PASS=direct timeout 60 $B/tests/gpu/bench_engine 2 16 > $L/engine-conn1.log 2>&1
echo "bench_engine direct conn=1 rc $? at $((SECONDS-T0))s" >> $L/env.txt; pkill -9 -f bench_engine
export PYTHONPATH=$PWD/$B/plugins/torch
for c in 32; do
  for r in 0 1; do
    CUDA_DEVICE_MAX_CONNECTIONS=$c RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=2964$c CUDA_VISIBLE_DEVICES=0 \
    FLAGCX_USE_HETERO_COMM=1 FLAGCX_TIMEOUT=20 timeout -k 2 60 python3 plugins/torch/tests/test_ops.py --device cuda > $L/ops2-conn$c-r$r.log 2>&1 &
  done
  wait; echo "torch ops conn=$c done at $((SECONDS-T0))s" >> $L/env.txt
done
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt; for f in $L/torchstyle-conn*.log; do tail -n 3 $f; done; tail -3 $L/engine-conn1.log; tail -4 $L/ops2-conn32-r0.log
