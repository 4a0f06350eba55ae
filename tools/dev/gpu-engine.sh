#!/bin/bash
# On the GPU machine: the engine's allreduce with ranks sharing one GPU, with and
# without the CUDA MPS daemon, the direct path of src/exec/shm_direct.cc against the ring
# schedule (FLAGCX_SHM_DIRECT_BYTES=0), plus the CUDA engine tests.  Run from the repository
# root through the device tool with carry [".carry"] (tools/dev/gpu-carry.sh fills it):
#   tools/dev/gpu-engine.sh            # logs under $OUT/logs (or ./gpu-engine-logs)
# ENGINE_STEPS=build,tests,bench picks steps; ENGINE_NRANKS (2), ENGINE_MAX_MIB (1024).
set -u
L=${OUT:-$PWD/gpu-engine-logs}/logs
mkdir -p "$L"
export PATH=$PATH:/usr/local/cuda/bin
. tools/dev/carried-deps.sh
steps=${ENGINE_STEPS:-build,tests,bench}
n=${ENGINE_NRANKS:-2}
max=${ENGINE_MAX_MIB:-1024}
has() { [[ ",$steps," == *",$1,"* ]]; }
if has build; then
  [ -d build-k ] || meson setup build-k -Dcuda=enabled -Dnccl=disabled -Dgpu_archs=90 \
    -Dtorch=disabled -Dmpi=disabled -Dnccl_dropin=disabled >"$L/setup.log" 2>&1
  ninja -C build-k >"$L/build.log" 2>&1
  echo "build rc $?"
  grep -E "error" "$L/build.log" | head -20
fi
if has tests; then
  timeout 240 build-k/tests/gpu/cuda_multi_test >"$L/cuda_multi.log" 2>&1
  echo "cuda_multi_test rc $?"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$L/cuda_multi.log"
fi
bench() {  # $1: log name; the rest: environment
  local name=$1; shift
  env "$@" BENCH_ENGINE_PASS=direct timeout 240 build-k/tests/gpu/bench_engine "$n" "$max" \
    >"$L/$name.log" 2>&1
  echo "$name rc $?"
  grep -E "^#.*(us per call|turn)|^ +[0-9]" "$L/$name.log" | head -20
}
if has bench; then
  bench engine-direct
  bench engine-rings FLAGCX_SHM_DIRECT_BYTES=0
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p /tmp/mps-pipe /tmp/mps-log
  if nvidia-cuda-mps-control -d; then
    sleep 1
    bench engine-direct-mps
    bench engine-rings-mps FLAGCX_SHM_DIRECT_BYTES=0
    echo quit | nvidia-cuda-mps-control
  else
    echo "no MPS daemon here"
  fi
fi
