#!/usr/bin/env bash
# session 6, GPU call C: after the --exclude-libs and one-sided fixes: torch gpu_check, gpu-check
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
T0=$SECONDS
meson setup build-gpu -Dcuda=enabled -Dnccl=enabled -Dgpu_archs=90 -Dtorch=enabled -Dmpi=disabled >$L/setup.log 2>&1 || tail -30 $L/setup.log
ninja -C build-gpu >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" | tee -a $L/env.txt
{ echo "libflagcx exported std defs: $(nm -D --defined-only build-gpu/libflagcx.so | grep -c ' _ZNS\| _ZNKS\| _ZSt')"
  echo "libflagcx exported cuda defs: $(nm -D --defined-only build-gpu/libflagcx.so | grep -c ' cuda')"
  readelf -d build-gpu/libflagcx.so | grep NEEDED
  ls -la /usr/lib/gcc/x86_64-linux-gnu/*/libstdc++.so /usr/lib/gcc/x86_64-linux-gnu/*/libstdc++.a 2>&1
  g++ --version | head -1; } >> $L/env.txt 2>&1
export PYTHONPATH=$PWD/build-gpu/plugins/torch
cat > /tmp/one.py <<'PY'
import os, datetime, torch, torch.distributed as dist, flagcx
torch.cuda.set_device(0)
dist.init_process_group("flagcx", rank=0, world_size=1, init_method="tcp://127.0.0.1:29771", timeout=datetime.timedelta(seconds=60))
t = torch.ones(4, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize(); print("one.py allreduce", t, flush=True)
dist.destroy_process_group()
PY
timeout 60 python3 /tmp/one.py >> $L/env.txt 2>&1; echo "one.py rc $?" >> $L/env.txt
PYTHON=python3 timeout 270 plugins/torch/tests/gpu_check.sh build-gpu > $L/torch-gpu-check.txt 2>&1
echo "torch rc $? at $((SECONDS-T0))s" >> $L/env.txt
mkdir -p $L/torch; cp build-gpu/torch-gpu/*.log $L/torch/ 2>/dev/null
left=$((570 - SECONDS + T0)); echo "gpu-check budget ${left}s" >> $L/env.txt
GPU_CHECK_OUT=$L/gpucheck timeout $left tools/gpu-check.sh build-gpu > $L/gpu-check.log 2>&1; echo "gpu-check rc $? at $((SECONDS-T0))s" >> $L/env.txt
tar czf $OUT/logs.tgz -C $OUT logs; cat $L/env.txt; cat $L/torch-gpu-check.txt | tail -20; tail -12 $L/gpu-check.log
