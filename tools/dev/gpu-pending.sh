#!/usr/bin/env bash
# On the GPU machine (device tool, carry [".carry"] made by tools/dev/gpu-carry.sh):
# the GPU steps below as one call of about 5 minutes.  Logs under $OUT (a summary on stdout, the rest in $OUT/more.tgz).
#   1. build build-dropin (CUDA, NCCL pass-through, drop-in, torch plugin)
#   2. the torch GPU check (every op, DDP, 1 rank and 2 ranks on GPU 0)
#   3. the torch benchmark: all_reduce 1-256 MiB, flagcx vs nccl, 1 rank,
#      200 calls x 5 rounds
#   4. the P2P engine's device path: the batched-copy test, p2p_cuda_test, and
#      kv_transfer --device cuda (KV_TOKENS, KV_BATCH, KV_ITERS, KV_TRACE)
#   5. the NCCL drop-in's stages (NCCLX_STAGES, default build,torch,compare;
#      DROPIN_TIMEOUT, default 300 s): torch (DDP losses, NCCL_DEBUG=WARN) and
#      compare (time per call against NVIDIA's NCCL; builds nccl-tests first)
# GPU_PENDING_STEPS=build,torch,bench,kv,dropin picks steps (default all).
set -u
cd "$(dirname "$0")/../.."
L=${OUT:-build-dropin/pending}; mkdir -p "$L/more"
STEPS=${GPU_PENDING_STEPS:-build,torch,bench,kv,dropin}
want() { [[ ",$STEPS," == *",$1,"* ]]; }
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
export PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
. tools/dev/carried-deps.sh
B=build-dropin; T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__)'
  echo "git $(git rev-parse --short HEAD) $(git status --porcelain | wc -l) changed file(s)"; } > "$L/env.txt" 2>&1
if want build; then
  [ -f $B/build.ninja ] || meson setup $B -Dcuda=enabled -Dnccl=enabled -Dnccl_dropin=enabled \
    -Dgpu_archs=90 -Dmpi=disabled -Dtorch=enabled -Dnccl_include="$PWD/.carry/nccl-h" > "$L/more/setup.log" 2>&1
  ninja -k 0 -C $B > "$L/more/build.log" 2>&1
  echo "build rc $? at $((SECONDS - T0))s (a drop-in test program may fail to link against an older system NCCL)" >> "$L/env.txt"
fi
if want torch; then
  TORCH_GPU_STEP_TIMEOUT=60 PYTHON=python3 timeout 240 plugins/torch/tests/gpu_check.sh $B > "$L/torch-gpu-check.txt" 2>&1
  echo "torch gpu_check rc $? at $((SECONDS - T0))s" >> "$L/env.txt"
  cp -r $B/torch-gpu "$L/more/" 2>/dev/null
fi
if want bench; then
  PYTHONPATH=$PWD/$B/plugins/torch timeout 150 python3 -m torch.distributed.run --nproc_per_node 1 \
    --master_port 29631 examples/torch/bench_allreduce.py --device cuda --compare nccl --iters 200 \
    --rounds 5 > "$L/bench-torch.log" 2>&1
  echo "torch bench rc $? at $((SECONDS - T0))s" >> "$L/env.txt"
fi
if want kv; then
  { timeout 120 $B/tests/gpu/cuda_adapter_test --gtest_filter='CudaBatchCopy*'; echo "batch-copy test rc $?"
    timeout 120 $B/tests/p2p/p2p_cuda_test; echo "p2p_cuda_test rc $?"
    # KV_TOKENS: tokens per block (16: 32 KiB pieces, 64: 128 KiB, 512: 1 MiB);
    # KV_BATCH: FLAGCX_P2P_IPC_BATCH_BYTES values, each run in turn (0: one
    # batch per transfer); KV_TRACE=1 adds a run with the P2P TRACE lines.
    for round in 1 2; do
      for t in ${KV_TOKENS:-16 64}; do
        for bb in ${KV_BATCH:-4194304}; do
          FLAGCX_P2P_IPC_BATCH_BYTES=$bb FLAGCX_DEVICE=cuda timeout 120 $B/tools/kv_transfer \
            --device cuda --iters ${KV_ITERS:-20} --tokens $t
          echo "kv_transfer --tokens $t batch $bb round $round rc $?"
        done
      done
    done
    if [ -n "${KV_TRACE:-}" ]; then
      for t in ${KV_TOKENS:-16 64}; do
        FLAGCX_DEBUG=TRACE FLAGCX_DEBUG_SUBSYS=P2P FLAGCX_DEVICE=cuda timeout 120 $B/tools/kv_transfer \
          --device cuda --iters 10 --tokens $t 2>&1 | grep -E "IPC write|GB/s|WriteVector|D2D|wrong" | tail -14
        echo "kv_transfer traced --tokens $t rc $?"
      done
    fi; } > "$L/kv-cuda.txt" 2>&1
  echo "kv step done at $((SECONDS - T0))s" >> "$L/env.txt"
fi
if want dropin; then
  NCCL_TESTS_TGZ=.carry/nccl-tests.tar.gz NCCL_DEBUG=WARN NCCLX_STAGES=${NCCLX_STAGES:-build,torch,compare} \
    OUT="$L/more/dropin" timeout ${DROPIN_TIMEOUT:-300} tools/dev/nccl-dropin-gpu.sh $B > "$L/more/dropin-stdout.log" 2>&1
  echo "drop-in torch+compare rc $? at $((SECONDS - T0))s" >> "$L/env.txt"
  cp "$L/more/dropin/summary.txt" "$L/dropin-summary.txt" 2>/dev/null
fi
tar czf "$L/more.tgz" -C "$L" more && rm -rf "$L/more"
cat "$L/env.txt"
[ -f "$L/torch-gpu-check.txt" ] && tail -14 "$L/torch-gpu-check.txt"
[ -f "$L/bench-torch.log" ] && grep -E "^#|^ +[0-9]" "$L/bench-torch.log"
[ -f "$L/dropin-summary.txt" ] && cat "$L/dropin-summary.txt"
[ -f "$L/kv-cuda.txt" ] && grep -E "rc |WriteVector|device copy|IPC write|wrong|PASSED|FAILED" "$L/kv-cuda.txt" | tail -70
exit 0
