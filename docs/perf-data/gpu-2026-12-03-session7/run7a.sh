#!/usr/bin/env bash
# session 7, GPU call A: build (cuda, nccl, torch), tools/gpu-check.sh
set -u
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/carried-deps.sh
T0=$SECONDS
meson setup build-gpu -Dcuda=enabled -Dnccl=enabled -Dgpu_archs=90 -Dtorch=enabled -Dmpi=disabled >$L/setup.log 2>&1 || tail -30 $L/setup.log
ninja -C build-gpu >$L/build.log 2>&1; echo "build rc $? at $((SECONDS-T0))s" | tee -a $L/env.txt
git log --oneline -1 >> $L/env.txt; git status --porcelain | wc -l >> $L/env.txt
GPU_CHECK_OUT=$L/gpu-check timeout 500 tools/gpu-check.sh build-gpu > $L/gpu-check.txt 2>&1; echo "gpu-check rc $? at $((SECONDS-T0))s" | tee -a $L/env.txt
tar czf $OUT/logs.tgz -C $OUT logs; tail -30 $L/gpu-check.txt; grep -i misaligned -r $L/gpu-check | head
