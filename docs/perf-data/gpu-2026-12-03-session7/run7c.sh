#!/usr/bin/env bash
# session 7, GPU call C: torch 2 ranks on GPU 0 stall diagnosis (TRACE log,
# thread states), NCCL drop-in stages build,same,torch (+ same_process_bench).
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
T0=$SECONDS
[ -f build-dropin/build.ninja ] || meson setup build-dropin -Dcuda=enabled -Dnccl=enabled -Dnccl_dropin=enabled -Dgpu_archs=90 -Dmpi=disabled -Dtorch=enabled -Dnccl_include=$PWD/.carry/nccl-h >$L/setup.log 2>&1 || tail -20 $L/setup.log
ninja -k 0 -C build-dropin >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" | tee -a $L/env.txt
timeout 120 build-dropin/tests/gpu/test_cuda_adapter > $L/adapter.log 2>&1; echo "cuda-adapter rc $? at $((SECONDS-T0))s" >> $L/env.txt
timeout 200 build-dropin/tests/gpu/bench_cuda 1024 > $L/bench_cuda.log 2>&1; echo "bench_cuda rc $? at $((SECONDS-T0))s" >> $L/env.txt
export PYTHONPATH=$PWD/build-dropin/plugins/torch
pids=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29634 CUDA_VISIBLE_DEVICES=0 \
  FLAGCX_USE_HETERO_COMM=1 FLAGCX_DEBUG=TRACE FLAGCX_TIMEOUT=20 PYTHONFAULTHANDLER=1 \
  python3 plugins/torch/tests/test_ops.py --device cuda > $L/ops2-trace-r$r.log 2>&1 &
  pids+=($!)
done
sleep 22
for p in "${pids[@]}"; do
  { echo "== pid $p"; for t in /proc/$p/task/*; do echo "$(cat $t/comm) wchan=$(cat $t/wchan) syscall=$(cut -d' ' -f1 $t/syscall)"; done; } >> $L/threads.txt 2>&1
done
kill -9 "${pids[@]}" 2>/dev/null; wait
echo "torch diag done at $((SECONDS-T0))s" >> $L/env.txt
unset PYTHONPATH
NCCL_TESTS_TGZ=.carry/nccl-tests.tar.gz OUT=$L/dropin NCCLX_STAGES=build,same timeout 150 tools/nccl-dropin-gpu.sh build-dropin > $L/dropin.txt 2>&1
echo "dropin rc $? at $((SECONDS-T0))s" >> $L/env.txt
tar czf $OUT/logs.tgz -C $OUT logs; cat $L/env.txt; grep -E "misaligned|PASSED|FAILED" $L/bench_cuda.log $L/adapter.log; tail -12 $L/dropin.txt; cat $L/dropin/same-bench.log 2>/dev/null | tail -9; cat $L/threads.txt | sort | uniq -c | sort -rn | head -30
