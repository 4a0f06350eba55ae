#!/usr/bin/env bash
# session 8, GPU call A: build (cuda+nccl+dropin+torch), the torch-style
# stream test (test_cuda_multi EngineTorchStyleStreams) with thread stacks on
# a hang, torch test_ops at 2 ranks on GPU 0 with TRACE/ALL + stacks,
# bench_onesided, kv_transfer on device buffers.
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
EU=$PWD/.carry/dbg/eu/root
stacks() {  # file pattern
  for p in $(pgrep -f "$2"); do
    echo "=== pid $p $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-120)"
    LD_LIBRARY_PATH=$EU/usr/lib/x86_64-linux-gnu timeout 20 $EU/usr/bin/eu-stack -p $p 2>&1 | head -400
  done >> "$1" 2>&1
}
T0=$SECONDS
B=build-dropin
[ -f $B/build.ninja ] || meson setup $B -Dcuda=enabled -Dnccl=enabled -Dnccl_dropin=enabled -Dgpu_archs=90 -Dmpi=disabled -Dtorch=enabled -Dnccl_include=$PWD/.carry/nccl-h >$L/setup.log 2>&1 || tail -20 $L/setup.log
ninja -k 0 -C $B >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" | tee -a $L/env.txt
grep -E "FAILED|error:" $L/build.log | head -5 >> $L/env.txt
( sleep 40; stacks $L/stacks-multi.txt test_cuda_multi ) &
timeout 200 $B/tests/gpu/test_cuda_multi --gtest_filter='*TorchStyle*' > $L/multi-torchstyle.log 2>&1
echo "torchstyle rc $? at $((SECONDS-T0))s" >> $L/env.txt
pkill -9 -f test_cuda_multi; wait
export PYTHONPATH=$PWD/$B/plugins/torch
pids=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29635 CUDA_VISIBLE_DEVICES=0 \
  FLAGCX_USE_HETERO_COMM=1 FLAGCX_DEBUG=TRACE FLAGCX_DEBUG_SUBSYS=ALL FLAGCX_TIMEOUT=20 PYTHONFAULTHANDLER=1 \
  python3 plugins/torch/tests/test_ops.py --device cuda > $L/ops2-r$r.log 2>&1 &
  pids+=($!)
done
sleep 25
stacks $L/stacks-torch.txt test_ops.py
kill -9 "${pids[@]}" 2>/dev/null; wait
echo "torch diag done at $((SECONDS-T0))s" >> $L/env.txt
unset PYTHONPATH
timeout 150 $B/tests/gpu/bench_onesided 1024 > $L/bench_onesided.log 2>&1; echo "bench_onesided rc $? at $((SECONDS-T0))s" >> $L/env.txt
FLAGCX_DEVICE=cuda timeout 100 $B/tools/kv_transfer --device cuda --iters 20 > $L/kv-cuda.log 2>&1; echo "kv cuda rc $? at $((SECONDS-T0))s" >> $L/env.txt
FLAGCX_DEVICE=cuda timeout 100 $B/tools/kv_transfer --device cuda --iters 20 --tokens 64 > $L/kv-cuda-64.log 2>&1; echo "kv cuda 64 rc $? at $((SECONDS-T0))s" >> $L/env.txt
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt; tail -5 $L/multi-torchstyle.log; grep -c . $L/stacks-multi.txt 2>/dev/null; cat $L/bench_onesided.log; tail -8 $L/kv-cuda.log; tail -4 $L/kv-cuda-64.log; grep -v "^$" $L/ops2-r0.log | tail -15
