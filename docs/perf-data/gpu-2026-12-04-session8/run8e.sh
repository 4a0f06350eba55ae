#!/usr/bin/env bash
# session 8, GPU call E: after the small-block fix (mixed communicators) and
# with hand-off as the default: cuda-multi, torch's GPU check, the adapter,
# bench_engine direct vs direct-value (64 MiB), the direct matrix last.
set -u
cd "$(dirname "$0")/.."
L=$OUT; mkdir -p $L/more
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
B=build-dropin; T0=$SECONDS
[ -f $B/build.ninja ] || meson setup $B -Dcuda=enabled -Dnccl=enabled -Dnccl_dropin=enabled -Dgpu_archs=90 -Dmpi=disabled -Dtorch=enabled -Dnccl_include=$PWD/.carry/nccl-h >$L/more/setup.log 2>&1
ninja -k 0 -C $B >$L/more/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s ($(git rev-parse --short HEAD) + worktree)" >> $L/env.txt
timeout 250 $B/tests/gpu/test_cuda_multi > $L/multi.log 2>&1; echo "cuda-multi rc $? at $((SECONDS-T0))s" >> $L/env.txt; pkill -9 -f test_cuda_multi
TORCH_GPU_STEP_TIMEOUT=60 PYTHON=python3 timeout 200 plugins/torch/tests/gpu_check.sh $B > $L/torch-gpu-check.txt 2>&1
echo "torch gpu_check rc $? at $((SECONDS-T0))s" >> $L/env.txt
timeout 60 $B/tests/gpu/test_cuda_adapter > $L/more/adapter.log 2>&1; echo "cuda-adapter rc $? at $((SECONDS-T0))s" >> $L/env.txt
for p in direct direct-value; do BENCH_ENGINE_PASS=$p timeout 60 $B/tests/gpu/bench_engine 2 64 > $L/more/engine-$p.log 2>&1; echo "bench_engine $p rc $? at $((SECONDS-T0))s" >> $L/env.txt; done
cat $L/more/engine-direct.log $L/more/engine-direct-value.log > $L/engine.log
MR_FULL=0 MR_DTYPES=all MR_DEVICE=cuda FLAGCX_DEVICE=cuda FLAGCX_USE_HETERO_COMM=1 timeout 200 $B/tests/mr/test_mr_coll --gtest_filter='Collectives/*' > $L/matrix-direct.log 2>&1
echo "matrix-direct rc $? at $((SECONDS-T0))s" >> $L/env.txt
tail -3 $L/matrix-direct.log > $L/more/matrix-tail.txt
cp -r $B/torch-gpu $L/more/ 2>/dev/null
tar czf $L/more.tgz -C $L more && rm -rf $L/more
cat $L/env.txt; grep -E "^\[  (PASSED|FAILED)" $L/multi.log; tail -14 $L/torch-gpu-check.txt; grep -E "^ +[0-9]|^#|^##" $L/engine.log | head -30; tail -3 $L/matrix-direct.log
