#!/usr/bin/env bash
# The MPI benchmarks on device buffers: build the
# perf tools against whichever MPI this machine has (MPICH, or Open MPI as on
# the device tool's image) and run
#
#   test_allreduce -b 1M -e 1G -f 4        (FLAGCX_DEVICE=cuda)
#
# with N ranks (default 2) on this host; local rank i uses GPU i % #GPUs, so
# on a one-GPU machine every rank shares GPU 0 (the engine's direct mode).
#
#   tools/dev/gpu-perf.sh [builddir] [nranks] [extra test_allreduce flags...]
#
# Uses the Debian packages in .carry/gpu-deps/debs where LuaJIT / yaml-cpp
# development files are missing (tools/dev/carried-deps.sh).  Exit status: the
# benchmark's (non-zero on any wrong element).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-gpu-perf}
N=${2:-2}
shift $(( $# > 2 ? 2 : $# ))
. tools/dev/carried-deps.sh
export PATH=$PATH:/usr/local/cuda/bin
export NCCL_NVLS_ENABLE=0
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dtests=disabled -Dmpi=enabled -Dgpu_archs=90 >"$B.setup.log" 2>&1 ||
    { tail -30 "$B.setup.log"; echo "gpu-perf: meson setup failed"; exit 1; }
fi
ninja -C "$B" tools/perf/test_allreduce >"$B.build.log" 2>&1 ||
  { grep -E "error|FAILED" "$B.build.log" | head -30; echo "gpu-perf: build failed"; exit 1; }
if mpirun --version 2>&1 | grep -q "Open MPI"; then
  # Open MPI binds each rank to one core by default: the rank's progress
  # thread then shares it with the caller and CUDA's threads (15 ms per call
  # at any size was measured that way on the H200 machine).
  launch=(mpirun -np "$N" --bind-to none)
  [ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)
else
  launch=(mpiexec -n "$N")
fi
echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC'), ${launch[*]}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/   gpu: /'
FLAGCX_DEVICE=cuda FLAGCX_DATA_DIR=$PWD "${launch[@]}" "$B/tools/perf/test_allreduce" \
  -b 1M -e 1G -f 4 --repeat 3 "$@"
