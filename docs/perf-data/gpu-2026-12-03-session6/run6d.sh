#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
T0=$SECONDS
meson setup build-gpu -Dcuda=enabled -Dnccl=enabled -Dgpu_archs=90 -Dtorch=enabled -Dmpi=disabled >$L/setup.log 2>&1 || tail -30 $L/setup.log
ninja -C build-gpu >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" | tee -a $L/env.txt
echo "libflagcx exported cuda defs: $(nm -D --defined-only build-gpu/libflagcx.so | grep -c ' cuda')" >> $L/env.txt
gcc -shared -fPIC -o /tmp/segv.so .carry/dbg/segv.c
export PYTHONPATH=$PWD/build-gpu/plugins/torch
cat > /tmp/one.py <<'PY'
import os, datetime, torch, torch.distributed as dist, flagcx
torch.cuda.set_device(0)
dist.init_process_group("flagcx", rank=0, world_size=1, init_method="tcp://127.0.0.1:29771", timeout=datetime.timedelta(seconds=60))
t = torch.ones(4, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize(); print("one.py allreduce", t, flush=True)
dist.destroy_process_group()
PY
timeout 60 python3 /tmp/one.py >> $L/env.txt 2>&1; echo "one.py rc $?" >> $L/env.txt
T=plugins/torch/tests
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29613 LD_PRELOAD=/tmp/segv.so timeout 60 python3 $T/test_ops.py --device cuda > $L/ops1.log 2>&1; echo "ops 1rank rc $? at $((SECONDS-T0))s" >> $L/env.txt
FLAGCX_USE_HETERO_COMM=1 CUDA_VISIBLE_DEVICES=0 timeout 70 python3 -m torch.distributed.run --nproc_per_node 2 --master_port 29612 $T/test_ops.py --device cuda > $L/ops2.log 2>&1; echo "ops 2ranks engine rc $? at $((SECONDS-T0))s" >> $L/env.txt
timeout 60 python3 -m torch.distributed.run --nproc_per_node 1 --master_port 29611 $T/test_ddp.py --device cuda > $L/ddp1.log 2>&1; echo "ddp 1rank rc $? at $((SECONDS-T0))s" >> $L/env.txt
MR_FULL=0 MR_DTYPES=all MR_DEVICE=cuda FLAGCX_DEVICE=cuda FLAGCX_USE_HETERO_COMM=1 FLAGCX_IPC_DISABLE=1 FLAGCX_STAGE_SLICE_SIZE=4096 timeout 60 build-gpu/tests/mr/test_mr_coll --gtest_filter='Collectives/*allreduce_ring' > $L/matrix1.log 2>&1; echo "matrix-staged ring rc $? at $((SECONDS-T0))s" >> $L/env.txt
tar czf $OUT/logs.tgz -C $OUT logs; cat $L/env.txt; grep -E "OK|FAIL" $L/matrix1.log | tail -3; tail -25 $L/ops1.log
