#!/usr/bin/env bash
# session 8, GPU call D: MixedCudaAndHostRanks hang under hand-off (trace +
# stacks), the adapter test, torch test_ops at 2 ranks on GPU 0.
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
EU=$PWD/.carry/dbg/eu/root
B=build-dropin; T0=$SECONDS
[ -f $B/build.ninja ] || meson setup $B -Dcuda=enabled -Dnccl=enabled -Dnccl_dropin=enabled -Dgpu_archs=90 -Dmpi=disabled -Dtorch=enabled -Dnccl_include=$PWD/.carry/nccl-h >$L/setup.log 2>&1
ninja -k 0 -C $B >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" >> $L/env.txt
( sleep 35; for p in $(pgrep -f test_cuda_multi); do echo "=== pid $p"; LD_LIBRARY_PATH=$EU/usr/lib/x86_64-linux-gnu timeout 20 $EU/usr/bin/eu-stack -p $p 2>&1 | grep -v "^#[0-9]* *0x[0-9a-f]* *$" | head -150; done > $L/stacks-mixed.txt 2>&1 ) &
FLAGCX_TIMEOUT=30 FLAGCX_DEBUG=TRACE FLAGCX_DEBUG_SUBSYS=COLL,P2P,INIT timeout 75 $B/tests/gpu/test_cuda_multi --gtest_filter='*Mixed*' > $L/mixed.log 2>&1
echo "mixed rc $? at $((SECONDS-T0))s" >> $L/env.txt; pkill -9 -f test_cuda_multi; wait
timeout 100 $B/tests/gpu/test_cuda_adapter > $L/adapter.log 2>&1; echo "cuda-adapter rc $? at $((SECONDS-T0))s" >> $L/env.txt
export PYTHONPATH=$PWD/$B/plugins/torch
FLAGCX_USE_HETERO_COMM=1 CUDA_VISIBLE_DEVICES=0 timeout -k 5 80 python3 -m torch.distributed.run --nproc_per_node 2 --master_port 29613 plugins/torch/tests/test_ops.py --device cuda > $L/ops2.log 2>&1
echo "torch ops 2 ranks rc $? at $((SECONDS-T0))s" >> $L/env.txt
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt; grep -E "^\[  (PASSED|FAILED)" $L/adapter.log; grep -E "checks|FAIL" $L/ops2.log | head; grep -v TRACE $L/mixed.log | tail -5
