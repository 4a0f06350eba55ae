#!/usr/bin/env bash
# The device API's one-kernel allreduce against the engine and NCCL, on one
# GPU machine, in one run (about a minute after the build), then the table
# into docs/PERFORMANCE.md's generated section (tools/perf/device_api.py;
# re-running replaces it):
#   - examples/device_allreduce.cu (BUILD_DIR/tests/gpu/device_allreduce),
#     2 ranks sharing GPU 0 under the MPS daemon, 8 B .. 64 KiB, over CUDA
#     IPC (1000 calls) and through the proxy (FLAGCX_IPC_DISABLE=1, 200 calls),
#     and at the largest size over CUDA IPC with BLOCKS blocks each;
#   - the engine's flagcxAllReduce on device buffers, the same 2 ranks
#     sharing the GPU (BUILD_DIR/tools/perf/test_allreduce, FLAGCX_DEVICE=cuda,
#     FLAGCX_USE_HETERO_COMM=1, one rank per process under the machine's MPI);
#   - NCCL (nccl-tests' all_reduce_perf -g 2, after MPS is stopped) where the
#     machine has a GPU per rank; otherwise the table says why it did not run.
# Every figure is the mean time of one allreduce of float sums, calls issued
# back to back on one stream.
#
# usage: tools/perf/device_api.sh BUILD_DIR
#   BUILD_DIR: configured with -Dcuda=enabled (tools/gpu-check.sh BUILD_DIR
#   makes one; the engine's column needs MPI found at configure time);
#   device_allreduce and test_allreduce are built there if missing.
#   SIZES="8 64 512 4096 16384 65536"  WORK=dir (raw lines; default a
#   temporary folder)  DOC=docs/PERFORMANCE.md  NCCL_TESTS_BIN=all_reduce_perf
#   BLOCKS="4 8 16 32": block counts tried at the largest size (empty: none)
#   DEVICE_API_LIMIT_S=270: later runs are skipped (listed) past it.
# Exit status: 0 when every run gave a figure and a right result; 1
# otherwise; 2 on bad use or without a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || { echo "usage: tools/perf/device_api.sh BUILD_DIR" >&2; exit 2; }
B=$1
SIZES_SET=${SIZES:+1}
SIZES=${SIZES:-8 64 512 4096 16384 65536}
min=$(echo $SIZES | tr ' ' '\n' | sort -n | head -1)
max=$(echo $SIZES | tr ' ' '\n' | sort -n | tail -1)
DOC=${DOC:-docs/PERFORMANCE.md}
BLOCKS=${BLOCKS-4 8 16 32}
LIMIT=${DEVICE_API_LIMIT_S:-270}
WORK=${WORK:-$(mktemp -d /tmp/flagcx-device-api.XXXXXX)}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$ngpu" = 0 ]; then
  echo "device_api.sh: no GPU here (nvidia-smi lists none): nothing measured, $DOC untouched" >&2
  exit 2
fi
[ -f "$B/build.ninja" ] ||
  { echo "device_api.sh: $B is not a build directory (tools/gpu-check.sh $B makes one)" >&2; exit 2; }
mkdir -p "$WORK"
rm -f "$WORK"/*.txt "$WORK"/*.json "$WORK"/*.log
start=$SECONDS
say() { echo "== [$((SECONDS - start)) s] $*"; }
. tools/dev/carried-deps.sh
export PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0 FLAGCX_TIMEOUT=${FLAGCX_TIMEOUT:-60}

# ---- build what is missing ----
targets=tests/gpu/device_allreduce
engine=1
# (grep without -q: it reads everything, so that ninja never dies of SIGPIPE under pipefail)
if ninja -C "$B" -t targets all 2>/dev/null | grep '^tools/perf/test_allreduce:' >/dev/null; then
  targets+=" tools/perf/test_allreduce"
else
  engine=0
fi
say "build ($targets)"
ninja -C "$B" $targets >"$WORK/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$WORK/build.log" | head -30; echo "device_api.sh: build failed" >&2; exit 1; }

{
  echo "gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  echo "ngpu=$ngpu"
  echo "cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cores=$(nproc)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src net adapters include examples 2>/dev/null || echo ' (with uncommitted library changes)')"
  echo "command=${SIZES_SET:+SIZES=\"$SIZES\" }tools/perf/device_api.sh $B"
  echo "sizes=$SIZES"
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
} >"$WORK/machine.txt"
failed=0 skipped=""
late() { [ $((SECONDS - start)) -ge "$LIMIT" ] && { skipped+=" $1"; return 0; }; return 1; }

# ---- the MPS daemon: the two ranks share GPU 0 without time-slicing ----
mps=0
mps_stop() {
  [ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control
  mps=0
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
if command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/flagcx-device-api-mps/pipe
  export CUDA_MPS_LOG_DIRECTORY=/tmp/flagcx-device-api-mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    mps=1
    trap mps_stop EXIT  # stopped however the script ends
    sleep 1
  fi
fi
echo "mps=$mps" >>"$WORK/machine.txt"

# ---- the device API's allreduce: one line per run into FILE ----
devar() {  # FILE NAME BYTES ITERS BLOCKS [VAR=VALUE...]
  local file=$1 name=$2 bytes=$3 iters=$4 blocks=$5 rc
  shift 5
  late "$name" && return
  CUDA_VISIBLE_DEVICES=0 timeout 60 env "$@" "$B/tests/gpu/device_allreduce" 2 "$bytes" "$iters" \
    "$blocks" >"$WORK/$name.log" 2>&1
  rc=$?
  if grep -q '^device_allreduce: .* us per allreduce' "$WORK/$name.log"; then
    grep '^device_allreduce: ' "$WORK/$name.log" >>"$WORK/$file"
  else
    echo "FAILED ${name#*-} rc=$rc" | sed 's/-/ /' >>"$WORK/$file"
    failed=1
    tail -3 "$WORK/$name.log" | sed 's/^/   | /'
  fi
  [ "$rc" = 0 ] || failed=1
}
: >"$WORK/devar.txt"
for bytes in $SIZES; do
  say "device API, $bytes B"
  devar devar.txt "devar-ipc-$bytes" "$bytes" 1000 0
  devar devar.txt "devar-proxy-$bytes" "$bytes" 200 0 FLAGCX_IPC_DISABLE=1
done
# The example's blocks at the largest size against other counts (its fourth
# argument), over CUDA IPC.
: >"$WORK/blocks.txt"
if [ -n "$BLOCKS" ]; then
  say "device API, $max B by blocks ($BLOCKS)"
  for nb in $BLOCKS; do devar blocks.txt "blocks-ipc-$nb" "$max" 1000 "$nb"; done
fi

# ---- the engine on device buffers, the same two ranks ----
if [ "$engine" = 1 ] && ! late engine; then
  say "engine (test_allreduce, device buffers)"
  launch=(mpiexec -n 2)  # the ranks inherit this environment (both launchers, one host)
  if mpirun --version 2>&1 | grep -q "Open MPI"; then
    launch=(mpirun --bind-to none -np 2)  # a rank per core starves the engine's threads
    [ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)
  fi
  run_timeout=120
  . tools/perf/run_one.sh
  export FINALIZE_GRACE=5
  run_one "$WORK/engine.log" env CUDA_VISIBLE_DEVICES=0 FLAGCX_DEVICE=cuda FLAGCX_USE_HETERO_COMM=1 \
    FLAGCX_DATA_DIR="$PWD" "${launch[@]}" "$B/tools/perf/test_allreduce" -b "$min" -e "$max" -f 2 \
    -d float --repeat 3 -J "$WORK/engine.json" || failed=1
  grep -q '^# OK: ' "$WORK/engine.log" || { failed=1; tail -5 "$WORK/engine.log" | sed 's/^/   | /'; }
elif [ "$engine" = 0 ]; then
  echo "not run: $B has no tools/perf/test_allreduce (no MPI found when it was configured)" \
    >"$WORK/engine-not-run.txt"
fi
mps_stop

# ---- NCCL: one GPU per rank ----
if [ "$ngpu" -lt 2 ]; then
  echo "not run: NCCL needs one GPU per rank, this machine has $ngpu" >"$WORK/nccl.txt"
else
  nccl_bin=${NCCL_TESTS_BIN:-$(command -v all_reduce_perf)}
  if [ -z "$nccl_bin" ] || [ ! -x "$nccl_bin" ]; then
    echo "not run: no nccl-tests all_reduce_perf (NCCL_TESTS_BIN names one)" >"$WORK/nccl.txt"
  elif ! late nccl; then
    say "NCCL (all_reduce_perf -g 2)"
    CUDA_VISIBLE_DEVICES=0,1 timeout 120 "$nccl_bin" -b "$min" -e "$max" -f 2 -g 2 -d float \
      -w 20 -n 1000 >"$WORK/nccl.txt" 2>&1 || failed=1
  fi
fi

echo "skipped=${skipped# }" >>"$WORK/machine.txt"
say "done; raw lines in $WORK${skipped:+; skipped (time):$skipped}"
python3 tools/perf/device_api.py "$WORK" "$DOC" || failed=1
exit $failed
