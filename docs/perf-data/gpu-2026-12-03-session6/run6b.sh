#!/usr/bin/env bash
# session 6, GPU call B: torch crash bindings + experiments, gpu-check, p2p test direct
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
T0=$SECONDS
meson setup build-gpu -Dcuda=enabled -Dnccl=enabled -Dgpu_archs=90 -Dtorch=enabled -Dmpi=disabled >$L/setup.log 2>&1 || tail -30 $L/setup.log
ninja -C build-gpu >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" | tee -a $L/env.txt
gcc -shared -fPIC -o /tmp/segv.so .carry/dbg/segv.c
TL=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')/lib
{ for f in $TL/libtorch_cpu.so $TL/libc10.so $TL/libtorch_python.so $TL/libtorch_cuda.so; do
  echo "== $f: exported std:: defs: $(nm -D --defined-only $f | grep -c ' _ZNS\| _ZNKS\| _ZSt') YAML defs: $(nm -D --defined-only $f | grep -c YAML)"
  nm -D --defined-only $f | grep -E ' _ZNS|_ZNKS|_ZSt' | head -15
  readelf -d $f | grep -E "NEEDED|RUNPATH"
  done; } > $L/torch-syms.txt 2>&1
export PYTHONPATH=$PWD/build-gpu/plugins/torch
cat > /tmp/one.py <<'PY'
import os, datetime, torch, torch.distributed as dist, flagcx
print("step import", flush=True)
torch.cuda.set_device(0)
dist.init_process_group(os.environ.get("BK","flagcx"), rank=0, world_size=1, init_method="tcp://127.0.0.1:29771", timeout=datetime.timedelta(seconds=60))
print("step init", flush=True)
t = torch.ones(4, device=os.environ.get("DEV","cuda"))
dist.all_reduce(t); torch.cuda.synchronize(); print("step allreduce", t, flush=True)
dist.destroy_process_group(); print("step done", flush=True)
PY
diag() { n=$1; shift; echo "== $n" >> $L/diag.txt; timeout 120 "$@" >> $L/diag.txt 2>&1; echo "rc $?" >> $L/diag.txt; }
diag one-nofh env LD_PRELOAD=/tmp/segv.so python3 /tmp/one.py
rm -rf /tmp/ldd; mkdir /tmp/ldd
LD_DEBUG=bindings LD_DEBUG_OUTPUT=/tmp/ldd/b timeout 120 python3 /tmp/one.py > /dev/null 2>&1
cat /tmp/ldd/b* | grep "binding file [^ ]*libflagcx.so" | grep -v "to [^ ]*libflagcx.so" | sed -E 's/^ *[0-9]+: *//' | awk '{print $5}' | sort | uniq -c > $L/bind-summary.txt
cat /tmp/ldd/b* | grep "binding file [^ ]*libflagcx.so" | grep -E "torch|c10" | head -100 >> $L/bind-summary.txt
cat /tmp/ldd/b* | grep "binding file [^ ]*libyaml-cpp" | grep -E "torch|c10" | head -50 >> $L/bind-summary.txt
diag preload-stdcxx env LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6 python3 /tmp/one.py
diag import-flagcx-first python3 -c 'import ctypes,os; ctypes.CDLL(os.environ["PYTHONPATH"]+"/../../libflagcx.so", mode=os.RTLD_GLOBAL); exec(open("/tmp/one.py").read())'
SO=$(ls build-gpu/plugins/torch/flagcx/_C*.so)
readelf -d $SO build-gpu/libflagcx.so | grep -E "NEEDED|RUNPATH|File" > $L/needed.txt
echo "diag done at $((SECONDS-T0))s" >> $L/env.txt
GPU_CHECK_OUT=$L/gpucheck timeout 380 tools/gpu-check.sh build-gpu > $L/gpu-check.log 2>&1; echo "gpu-check rc $? at $((SECONDS-T0))s" >> $L/env.txt
FLAGCX_DEBUG=INFO timeout 100 build-gpu/tests/p2p/test_p2p_cuda > $L/p2p-direct.log 2>&1; echo "p2p rc $? at $((SECONDS-T0))s" >> $L/env.txt
tar czf $OUT/logs.tgz -C $OUT logs; cat $L/env.txt; cat $L/bind-summary.txt | head -40; tail -15 $L/gpu-check.log
