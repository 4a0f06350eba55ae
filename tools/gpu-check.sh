#!/usr/bin/env bash
# Build flagcx with CUDA and run the GPU tests and the GPU benchmark on this
# machine; prints one summary at the end.  Needs nvcc and a usable GPU.  A
# test binary that skips as a whole (exit 77) fails the check when this
# machine has a GPU (nvidia-smi lists one); the binaries themselves exit 1,
# not 77, when a GPU is present but the CUDA adapter is unusable.
#
#   tools/gpu-check.sh [builddir]        (default: build-gpu)
#
# Environment:
#   GPU_CHECK_OUT=dir        logs go there too (default: <builddir>/gpu-check)
#   GPU_CHECK_BENCH_MIB=N    largest benchmark buffer in MiB (default 1024)
#   GPU_CHECK_EXTRA_TESTS=1  also build and run the CPU quick suite
#   GPU_CHECK_MATRIX=0       skip the engine's correctness matrix on device buffers
#   GPU_CHECK_MATRIX_FULL=1  that matrix at the full size (MR_FULL=1: nranks 1-8,
#                            a 1 Mi-element count; over the device tool's 10 minutes
#                            a command) instead of the default: the quick shape
#                            (nranks 1-5) with all 12 dtypes (MR_DTYPES=all)
#   GPU_CHECK_TESTS=0        skip the tests (benchmarks only)
#   GPU_CHECK_DEVAPI_ONLY=1  only the device API's tests (IPC, proxy, mixed,
#                            range checks, two netns hosts): builds and runs
#                            just those, in a few minutes
#   GPU_CHECK_BENCH=0        skip the benchmarks (tests only)
#   GPU_CHECK_PREBUILT=1     use the binaries already in <builddir> (no meson,
#                            no ninja): a build made elsewhere with the same layout
#   FLAGCX_NCCL_LIB=path     NCCL to load (default: libnccl.so.2, else a pip
#                            nvidia-nccl package is looked for)
#
# Machines without LuaJIT / yaml-cpp / GoogleTest development files: put the
# Debian packages (libluajit-5.1-2 libluajit-5.1-common libluajit-5.1-dev
# libyaml-cpp0.7 libyaml-cpp-dev libgtest-dev, and pkgconf pkgconf-bin
# libpkgconf3 where pkg-config is missing) in .carry/gpu-deps/debs: they are
# unpacked under .carry/gpu-deps/root (never into /) and used from there.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-gpu}
OUTDIR=${GPU_CHECK_OUT:-$B/gpu-check}
MIB=${GPU_CHECK_BENCH_MIB:-1024}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines

say() { echo "== $*"; }

# ---- carried build dependencies (tools/dev/carried-deps.sh) ----
. tools/dev/carried-deps.sh
export PATH=$PATH:/usr/local/cuda/bin

# ---- NCCL for the pass-through tests ----
if [ -z "${FLAGCX_NCCL_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  cand=$(python3 - 2>/dev/null <<'EOF'
import os
try:
    import nvidia.nccl as m
    for d in m.__path__:
        p = os.path.join(d, "lib", "libnccl.so.2")
        if os.path.exists(p):
            print(p); break
except Exception:
    pass
EOF
)
  [ -z "$cand" ] && cand=$(find /usr/local /opt /usr/lib -name 'libnccl.so.2' 2>/dev/null | head -1)
  if [ -n "$cand" ]; then export FLAGCX_NCCL_LIB=$cand; fi
fi

{
  say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  say "host: $(uname -n), $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/   gpu: /'
  echo "   nvcc: $(nvcc --version 2>/dev/null | tail -2 | head -1)"
  echo "   FLAGCX_NCCL_LIB=${FLAGCX_NCCL_LIB:-libnccl.so.2 (default)}"
} | tee "$OUTDIR/env.txt"

# ---- build ----
if [ "${GPU_CHECK_PREBUILT:-0}" = 1 ]; then
  say "prebuilt binaries in $B"
elif [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dnccl=enabled -Dgpu_archs=90 -Dtorch=disabled >"$OUTDIR/setup.log" 2>&1 ||
    { tail -40 "$OUTDIR/setup.log"; echo "gpu-check: meson setup failed"; exit 1; }
fi
devapi_targets="tests/gpu/cuda_devapi_test tests/gpu/cuda_devapi_test_checked tests/gpu/device_allreduce"
DEVAPI_ONLY=${GPU_CHECK_DEVAPI_ONLY:-0}
targets="tests/gpu/cuda_adapter_test tests/gpu/cuda_fold_test tests/gpu/cuda_multi_test tests/gpu/cuda_onesided_test tests/gpu/bench_cuda tests/gpu/bench_engine tests/gpu/bench_onesided tests/gpu/bench_nccl tests/multirank/coll_test $devapi_targets"
[ "$DEVAPI_ONLY" = 1 ] && targets=$devapi_targets
[ "${GPU_CHECK_EXTRA_TESTS:-0}" = 1 ] && targets=""
if [ "${GPU_CHECK_PREBUILT:-0}" = 1 ]; then
  :
elif say "build ($B)" && ! ninja -C "$B" $targets >"$OUTDIR/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUTDIR/build.log" | head -40
  echo "gpu-check: build failed (log: $OUTDIR/build.log)"
  exit 1
fi

# ---- tests ----
declare -A result
have_gpu=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && have_gpu=1
# Two ranks on this machine, each alone on a host of its own name
# (FLAGCX_HOSTID): the proxy over sockets, INTRA a team of one.  Each rank
# runs "$@" RANK; both must pass.
two_hostids() {
  local secret rc=0 p
  secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  local env="FLAGCX_COMM_ID=127.0.0.1:29541 FLAGCX_COMM_SECRET=$secret FLAGCX_TIMEOUT=60"
  env $env FLAGCX_HOSTID=hostA timeout 150 "$@" 0 &
  p=$!
  env $env FLAGCX_HOSTID=hostB timeout 150 "$@" 1 || rc=1
  wait $p || rc=1
  return $rc
}

run_test() {  # name, command...
  local name=$1; shift
  say "test $name"
  local t0=$SECONDS
  "$@" 2>&1 | tee "$OUTDIR/$name.log"
  local rc=${PIPESTATUS[0]}
  case $rc in
    0) result[$name]="PASS ($((SECONDS - t0)) s)" ;;
    77) if [ "$name" = nccl-bench ] && grep -q "SKIP: cannot load" "$OUTDIR/$name.log"; then
          result[$name]="SKIP (NCCL not loadable)"
        elif [ "$have_gpu" = 1 ]; then
          result[$name]="FAIL (skipped as a whole on a machine with a GPU)"
        else
          result[$name]="SKIP (no GPU)"
        fi ;;
    *) result[$name]="FAIL (exit $rc)" ;;
  esac
}
# The MPS daemon around the device API's runs: their ranks share the GPU and
# spin on each other inside kernels (time-sliced without it).
mps=0
mps_start() {
  command -v nvidia-cuda-mps-control >/dev/null || return 0
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/flagcx-gpu-check-mps/pipe
  export CUDA_MPS_LOG_DIRECTORY=/tmp/flagcx-gpu-check-mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && mps=1 && sleep 1
}
mps_stop() {
  [ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control
  mps=0
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
trap mps_stop EXIT
# A checked kernel's line for cuda_devapi_test's put past the window: it
# must name block (0,0,0), thread (0,0,0) and the offset the test announced.
devapi_check_line() {
  local log=$OUTDIR/$1.log off
  case ${result[$1]} in PASS*) ;; *) return ;; esac
  off=$(sed -n 's/^device checks: a put past the window, offset \([0-9]*\), 8 bytes$/\1/p' "$log" | head -1)
  grep -qF "flagcx device check: block (0,0,0) thread (0,0,0): flagcxDevPut: range past the memory (offset, bytes): ${off:-?} 8" "$log" ||
    result[$1]="FAIL (no device-check line naming block (0,0,0), thread (0,0,0) and offset ${off:-?})"
}
TESTS=${GPU_CHECK_TESTS:-1}
BENCH=${GPU_CHECK_BENCH:-1}
if [ "$DEVAPI_ONLY" = 1 ]; then
  BENCH=0
elif [ "$TESTS" = 1 ]; then
  run_test cuda-adapter timeout 300 "$B/tests/gpu/cuda_adapter_test"
  run_test cuda-fold timeout 300 "$B/tests/gpu/cuda_fold_test"
  run_test cuda-multi timeout 600 "$B/tests/gpu/cuda_multi_test"
  run_test cuda-onesided timeout 600 "$B/tests/gpu/cuda_onesided_test"
fi
if [ "$TESTS" = 1 ]; then
  # The device API from CUDA kernels, ranks sharing the GPU under MPS.
  mps_start
  run_test cuda-devapi-2 timeout 300 "$B/tests/gpu/cuda_devapi_test" 2
  run_test cuda-devapi-4 timeout 300 "$B/tests/gpu/cuda_devapi_test" 4
  # The proxy path from kernels: IPC off (every call through the proxy, the
  # windows in host memory the GPU maps) and a host rank beside a CUDA rank.
  run_test cuda-devapi-noipc-2 env FLAGCX_IPC_DISABLE=1 timeout 300 "$B/tests/gpu/cuda_devapi_test" 2
  run_test cuda-devapi-mixed-2 timeout 300 "$B/tests/gpu/cuda_devapi_test" 2 mixed
  run_test cuda-devapi-hostids-2 two_hostids "$B/tests/gpu/cuda_devapi_test" --rank
  run_test device-allreduce-noipc-2 env FLAGCX_IPC_DISABLE=1 timeout 300 "$B/tests/gpu/device_allreduce" 2 4096 200
  # The kernels' range checks (FLAGCX_DEVICE_CHECKS, which -Ddevice_checks=true
  # gives every kernel built against flagcx.pc): rank 0's put past the window
  # is printed and skipped, and flagcxDevCommDestroy returns the error.
  run_test cuda-devapi-checks timeout 120 "$B/tests/gpu/cuda_devapi_test_checked" 2
  devapi_check_line cuda-devapi-checks
  mps_stop
  # Two netns "hosts" (the proxy over sockets), outside MPS (its clients in
  # other namespaces were never tried): the driver time-slices the two.
  run_test cuda-devapi-netns-2 timeout 180 tests/netns/two_hosts.sh "$B/tests/gpu/cuda_devapi_test" --rank
fi
if [ "$BENCH" = 1 ]; then
  run_test benchmark timeout 180 "$B/tests/gpu/bench_cuda" "$MIB"
  run_test engine-bench timeout 600 "$B/tests/gpu/bench_engine" 2 "$MIB"
  run_test onesided-bench timeout 300 "$B/tests/gpu/bench_onesided" "$MIB"
  mps_start
  for bytes in 8 4096 65536; do
    run_test device-allreduce-$bytes timeout 300 "$B/tests/gpu/device_allreduce" 2 $bytes 1000
  done
  mps_stop
  [ -x "$B/tests/gpu/bench_nccl" ] && run_test nccl-bench timeout 300 "$B/tests/gpu/bench_nccl" 256
fi
if [ "$TESTS" = 1 ] && [ "$DEVAPI_ONLY" != 1 ] && [ "${GPU_CHECK_MATRIX:-1}" = 1 ]; then
  # The engine's correctness matrix on device buffers, ranks sharing the GPU:
  # every shipped algorithm x dtypes x ops x counts x in-place x roots, with
  # all 12 dtypes (MR_DTYPES=all) at the quick shape by default, or the full
  # matrix (GPU_CHECK_MATRIX_FULL=1: MR_FULL=1, nranks 1-8, counts up to
  # 1 Mi + 3 elements).  Host staging (pipelined in 4 KiB slices, so that every
  # message of the matrix crosses slice boundaries), then direct mode (CUDA IPC).
  mfull=${GPU_CHECK_MATRIX_FULL:-0}
  mtime=$([ "$mfull" = 1 ] && echo 3600 || echo 900)
  run_test matrix-staged env MR_FULL=$mfull MR_DTYPES=all MR_DEVICE=cuda FLAGCX_DEVICE=cuda \
    FLAGCX_USE_HETERO_COMM=1 FLAGCX_IPC_DISABLE=1 FLAGCX_STAGE_SLICE_SIZE=4096 \
    timeout $mtime "$B/tests/multirank/coll_test" --gtest_filter='Collectives/*'
  run_test matrix-direct env MR_FULL=$mfull MR_DTYPES=all MR_DEVICE=cuda FLAGCX_DEVICE=cuda \
    FLAGCX_USE_HETERO_COMM=1 timeout $mtime "$B/tests/multirank/coll_test" --gtest_filter='Collectives/*'
fi
if [ "${GPU_CHECK_EXTRA_TESTS:-0}" = 1 ]; then
  say "CPU quick suite"
  meson test -C "$B" --suite quick --num-processes 4 >"$OUTDIR/quick.log" 2>&1
  result[quick-suite]=$([ $? = 0 ] && echo PASS || echo "FAIL (see quick.log)")
  tail -12 "$OUTDIR/quick.log"
fi

say "summary"
fail=0
for k in "${!result[@]}"; do
  printf '   %-14s %s\n' "$k" "${result[$k]}"
  case ${result[$k]} in FAIL*) fail=1 ;; esac
done | sort | tee "$OUTDIR/summary.txt"
grep -q FAIL "$OUTDIR/summary.txt" && fail=1
exit $fail
