#!/usr/bin/env bash
# The torch backend on the GPU machine (torch 2.x with CUDA, torchrun):
# builds the plugin into <builddir> and runs the CUDA variants of the tests
# and the GPU benchmark; prints one PASS/FAIL line per step and a summary.
#
#   plugins/torch/tests/gpu_check.sh [builddir]     (default: build-gpu)
#
# Steps: every operation on CUDA tensors (1 rank: NCCL pass-through; 2 ranks
# sharing GPU 0: the flagcx engine), the device strings "cpu:gloo,cuda:flagcx"
# and "cpu:flagcx,cuda:flagcx" (CPU tensors staged through the GPU), 20 DDP
# steps against gloo on the same GPU, and all_reduce 1 MiB..256 MiB against
# nccl (1 rank).  Logs: <builddir>/torch-gpu/.  TORCH_GPU_STEP_TIMEOUT=s
# bounds each step (default 900); a step cut short has its workers killed so
# that they do not slow the next one.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=${1:-build-gpu}
OUT=$B/torch-gpu
export NCCL_NVLS_ENABLE=0 UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
[ -f tools/dev/carried-deps.sh ] && . tools/dev/carried-deps.sh
export PATH=$PATH:/usr/local/cuda/bin
PY=${PYTHON:-python3}
"$PY" -c 'import torch; assert torch.cuda.is_available(), "no GPU"; print("torch", torch.__version__, "cuda", torch.version.cuda)' || exit 1
if [ ! -f "$B/build.ninja" ]; then meson setup "$B" -Dtorch=enabled || exit 1; fi
meson configure "$B" -Dtorch=enabled >/dev/null || exit 1
# Keep going past targets that do not link here (a drop-in test program
# against an older system NCCL); the extension itself must exist.
ninja -C "$B" >/dev/null 2>&1 || ninja -k 0 -C "$B" | grep -E "FAILED|error" | head -5
ls "$B"/plugins/torch/flagcx/_C*.so >/dev/null || { echo "the torch extension did not build"; exit 1; }
mkdir -p "$OUT"
export PYTHONPATH=$PWD/$B/plugins/torch${PYTHONPATH:+:$PYTHONPATH}
T=plugins/torch/tests
pass=0; fail=0
step() {  # step NAME ENV... -- CMD...
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  if env "${envs[@]}" timeout -k 5 "${TORCH_GPU_STEP_TIMEOUT:-900}" "$@" >"$OUT/$name.log" 2>&1; then
    echo "PASS $name"; pass=$((pass + 1))
  else
    echo "FAIL $name (see $OUT/$name.log)"; fail=$((fail + 1))
    pkill -9 -f "python[0-9.]* .*(ops_test|ddp_test|shrink_test|example|bench_allreduce)\.py" 2>/dev/null
  fi
}
run1="$PY -m torch.distributed.run --nproc_per_node 1 --master_port 29611"
run2="$PY -m torch.distributed.run --nproc_per_node 2 --master_port 29612"
step ops-cuda-1rank-nccl -- $run1 $T/ops_test.py --device cuda
step ops-cuda-2ranks-gpu0-engine FLAGCX_USE_HETERO_COMM=1 CUDA_VISIBLE_DEVICES=0 -- $run2 $T/ops_test.py --device cuda
step ops-cuda-cpu:gloo,cuda:flagcx CUDA_VISIBLE_DEVICES=0 FLAGCX_USE_HETERO_COMM=1 -- $run2 $T/ops_test.py --device cuda --backend cpu:gloo,cuda:flagcx
step ops-cpu-staged-cpu:flagcx,cuda:flagcx CUDA_VISIBLE_DEVICES=0 FLAGCX_USE_HETERO_COMM=1 -- $run2 $T/ops_test.py --device cpu --backend cpu:flagcx,cuda:flagcx
step ddp-cuda-1rank-nccl -- $run1 $T/ddp_test.py --device cuda
step ddp-cuda-2ranks-gpu0-engine FLAGCX_USE_HETERO_COMM=1 CUDA_VISIBLE_DEVICES=0 -- $run2 $T/ddp_test.py --device cuda
step shrink-cpu-4ranks-shrink_group FLAGCX_DEVICE=host -- $PY $T/shrink_test.py --api torch
step shrink-cpu-4ranks-plugin FLAGCX_DEVICE=host -- $PY $T/shrink_test.py --api plugin
step example-cuda-1rank -- $run1 examples/torch/example.py --device cuda
step bench-cuda-1rank-vs-nccl -- $run1 examples/torch/bench_allreduce.py --device cuda --compare nccl --iters 20 --rounds 3
echo "== benchmark (1 rank, flagcx through the NCCL pass-through vs nccl):"
grep -v '^$' "$OUT/bench-cuda-1rank-vs-nccl.log" | grep -E '^#|^ +[0-9]' || true
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
