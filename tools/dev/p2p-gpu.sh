#!/usr/bin/env bash
# The P2P engine on a GPU machine (docs/P2P.md): the device-memory test, then
# kv_transfer on device buffers (CUDA IPC between two processes of one host)
# and on host buffers, with their baselines, on an idle machine.
# usage: tools/dev/p2p-gpu.sh [BUILD_DIR]
set -u
build=${1:-build}
echo "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(nproc) cores; loadavg $(cat /proc/loadavg)"
meson test -C "$build" gpu-p2p-cuda --print-errorlogs || exit 1
FLAGCX_DEVICE=cuda "$build/tools/kv_transfer" --device cuda --iters 20 || exit 1
FLAGCX_DEVICE=cuda "$build/tools/kv_transfer" --device cuda --iters 20 --tokens 64 || exit 1
"$build/tools/kv_transfer" --iters 20 || exit 1
FLAGCX_SHM_DISABLE=1 "$build/tools/kv_transfer" --iters 20 || exit 1
