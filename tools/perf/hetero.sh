#!/usr/bin/env bash
# Mixed communicators against host-only ones of the same shape, on one GPU
# machine, in one run (under 8 minutes after the build), then the tables
# into docs/GPU.md (tools/perf/hetero.py; re-running replaces them):
#   - pair (host, CUDA) and four (host, CUDA, host, CUDA) against host-only
#     pair and four: allreduce allgather reducescatter broadcast alltoall
#     sendrecv, 4 MiB-256 MiB, over shm and over sockets (the CUDA ranks
#     run under the MPS daemon, so that two sharing the GPU do not time-slice);
#   - staged CUDA ranks (FLAGCX_USE_HETERO_COMM=1 FLAGCX_IPC_DISABLE=1), 2
#     ranks sharing the GPU under MPS, against host buffers: allreduce;
#   - 8-byte allreduce latency, pair mixed against host-only, and mixed with
#     the stream-ordered small-call path off (FLAGCX_STREAM_ASYNC_BYTES=0).
# Each point is tools/perf/test_<op>, one rank per process, launched by the
# machine's MPI (Open MPI: mpirun --bind-to none, per-rank FLAGCX_DEVICE by
# MPMD contexts; MPICH: mpiexec -env).  A run that cannot start before
# HETERO_LIMIT_S is skipped and listed.
#
# usage: tools/perf/hetero.sh [BUILD_DIR]      (default: build-hetero)
#   HETERO_BUILD_ONLY=1 configure and build, run nothing (a first device call)
#   HETERO_PREBUILT=1   use BUILD_DIR as it is (built with -Dcuda=enabled
#                       -Dmpi=enabled against this machine's MPI); else it is
#                       configured (-Dcuda=enabled -Dnccl=enabled -Dmpi=enabled
#                       -Dtests=disabled) and the perf tools built
#   HETERO_EMULATE=1    no GPU: "CUDA" ranks are host ranks staged behind the
#                       host adapter's emulated copy engine
#                       (FLAGCX_HOST_COPY_ENGINE_NS=HETERO_EMULATE_NS, default
#                       50); GPU.md untouched
#   OPS="allreduce ..."  SIZES="-b 4M -e 256M -f 4"  FLAGS="-w 1 -W 0 -n 4 -T 0"
#   HETERO_LIMIT_S=420  seconds of runs after the build; later points are skipped
#   WORK=dir            logs and JSON lines (default a temporary folder)
#   DOC=docs/GPU.md
# The tables go to stdout too.  Exit status: 0 when every run gave results
# with no wrong element, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-hetero}
OPS=${OPS:-allreduce allgather reducescatter broadcast alltoall sendrecv}
SIZES=${SIZES:--b 4M -e 256M -f 4}
FLAGS=${FLAGS:--w 1 -W 0 -n 4 -T 0}
LIMIT=${HETERO_LIMIT_S:-420}
EMULATE=${HETERO_EMULATE:-0}
EMU_NS=${HETERO_EMULATE_NS:-50}
DOC=${DOC:-docs/GPU.md}
WORK=${WORK:-$(mktemp -d /tmp/flagcx-hetero.XXXXXX)}
run_timeout=${RUN_TIMEOUT:-120}
export FINALIZE_GRACE=${FINALIZE_GRACE:-5}
mkdir -p "$WORK"
rm -f "$WORK"/*.json "$WORK"/*.log
start=$SECONDS
say() { echo "== [$((SECONDS - start)) s] $*"; }

if [ "$EMULATE" != 1 ]; then
  . tools/dev/carried-deps.sh
  export PATH=$PATH:/usr/local/cuda/bin
fi
export NCCL_NVLS_ENABLE=0 FLAGCX_TIMEOUT=${FLAGCX_TIMEOUT:-60} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

# ---- build ----
if [ "${HETERO_PREBUILT:-0}" != 1 ]; then
  cuda=$([ "$EMULATE" = 1 ] && echo disabled || echo enabled)
  if [ ! -f "$B/build.ninja" ]; then
    say "configure $B"
    meson setup "$B" --buildtype=release -Dcuda=$cuda -Dnccl=$cuda -Dmpi=enabled -Dtests=disabled \
      -Dtorch=disabled -Dgpu_archs=90 >"$WORK/setup.log" 2>&1 ||
      { tail -30 "$WORK/setup.log"; echo "hetero.sh: meson setup failed"; exit 1; }
  fi
  say "build"
  ninja -C "$B" $(for op in $OPS; do echo "tools/perf/test_$op"; done) >"$WORK/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$WORK/build.log" | head -30; echo "hetero.sh: build failed"; exit 1; }
fi
[ "${HETERO_BUILD_ONLY:-0}" = 1 ] && { say "built $B"; exit 0; }
for op in $OPS; do
  [ -x "$B/tools/perf/test_$op" ] || { echo "hetero.sh: no $B/tools/perf/test_$op" >&2; exit 1; }
done

# ---- launching ----
if mpirun --version 2>&1 | grep -q "Open MPI"; then
  # Open MPI binds each rank to one core by default; the engine's threads
  # need more (docs/GPU.md, tools/dev/gpu-perf.sh).
  LAUNCH=(mpirun --bind-to none)
  [ "$(id -u)" = 0 ] && LAUNCH+=(--allow-run-as-root)
  rankspec() { local v; echo "-np 1"; for v in "$@"; do echo "-x $v"; done; }
else
  LAUNCH=(mpiexec)
  rankspec() { local v; echo "-n 1"; for v in "$@"; do echo "-env ${v%%=*} ${v#*=}"; done; }
fi
. tools/perf/run_one.sh  # run_one (uses $run_timeout)
start=$SECONDS  # HETERO_LIMIT_S counts from here, after the build
ngpu=$( [ "$EMULATE" = 1 ] && echo 0 || nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "host=$(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "gpu=$( [ "$EMULATE" = 1 ] && echo "none (emulated copy engine, ${EMU_NS} ns/KiB)" ||
    nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) x $ngpu"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src net adapters algos config include 2>/dev/null || echo ' (with uncommitted library changes)')"
  echo "mpi=${LAUNCH[*]}"
  echo "sizes=$SIZES"
  echo "flags=$FLAGS"
} >"$WORK/machine.txt"
failed=0 skipped=""

# point NAME OP KINDS SIZES [VAR=VALUE...]: one run of test_OP, one rank per
# entry of KINDS (host or cuda, comma separated), the variables given to
# every rank (in its MPMD context and in the launcher's environment).
point() {
  local name=$1 op=$2 kinds=$3 sizes=$4; shift 4
  if [ $((SECONDS - start)) -ge "$LIMIT" ]; then skipped+=" $name"; return; fi
  local cmd=() k first=1
  for k in ${kinds//,/ }; do
    [ $first = 1 ] || cmd+=(:)
    first=0
    if [ "$k" = cuda ] && [ "$EMULATE" = 1 ]; then
      cmd+=($(rankspec FLAGCX_DEVICE=host FLAGCX_HOST_COPY_ENGINE_NS="$EMU_NS" "$@"))
    else
      cmd+=($(rankspec FLAGCX_DEVICE="$k" "$@"))
    fi
    cmd+=("$B/tools/perf/test_$op" $sizes $FLAGS -J "$WORK/$name.json")
  done
  run_one "$WORK/$name.log" env "$@" FLAGCX_DATA_DIR="$PWD" "${LAUNCH[@]}" "${cmd[@]}" || failed=1
  if ! grep -q '^# OK: ' "$WORK/$name.log"; then
    failed=1
    echo "   $name: no OK verdict"; tail -5 "$WORK/$name.log" | sed 's/^/   | /'
  fi
}
transport_env() { [ "$1" = socket ] && echo FLAGCX_SHM_DISABLE=1 || echo FLAGCX_SHM_DISABLE=0; }

# ---- the MPS daemon for the whole run: the four's CUDA ranks and the
# staged pair share the GPU; host ranks never touch it ----
mps=0
if [ "$EMULATE" != 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/flagcx-hetero-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/flagcx-hetero-mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    mps=1
    trap 'echo quit | nvidia-cuda-mps-control' EXIT  # stopped however the script ends
    sleep 1
  fi
fi
echo "mps=$mps" >>"$WORK/machine.txt"

# ---- 8-byte latency: pair, mixed and host-only ----
for t in shm socket; do
  say "latency, $t"
  point "lat-$t-pair-host" allreduce host,host "-b 8 -e 8" $(transport_env $t)
  point "lat-$t-pair-mixed" allreduce host,cuda "-b 8 -e 8" $(transport_env $t) \
    FLAGCX_STREAM_ASYNC_BYTES=32768
  point "lat-$t-pair-mixed-blocking" allreduce host,cuda "-b 8 -e 8" $(transport_env $t) \
    FLAGCX_STREAM_ASYNC_BYTES=0
done

# ops_vs_host SHAPE HOST_KINDS MIXED_KINDS OPS...: each op over shm and
# sockets, mixed and host-only, alternating which goes first.
ops_vs_host() {
  local shape=$1 hostKinds=$2 mixedKinds=$3 op t m order i=0
  shift 3
  for op in "$@"; do
    for t in shm socket; do
      say "$shape, $op, $t"
      order="host mixed"
      [ $((i++ % 2)) = 1 ] && order="mixed host"
      for m in $order; do
        point "ops-$t-$shape-$m-$op" "$op" "$([ $m = host ] && echo "$hostKinds" || echo "$mixedKinds")" \
          "$SIZES" $(transport_env $t)
      done
    done
  done
}
pair() { ops_vs_host pair host,host host,cuda "$@"; }
four() { ops_vs_host four host,host,host,host host,cuda,host,cuda "$@"; }

# ---- allreduce first (pair, four), the staged pair, then the other ops ----
first=$(echo $OPS | tr ' ' '\n' | grep -x allreduce)
rest=$(echo $OPS | tr ' ' '\n' | grep -vx allreduce)
pair $first
four $first
for t in shm socket; do
  say "staged CUDA pair (MPS: $mps), $t"
  point "staged-$t-pair-host" allreduce host,host "$SIZES" $(transport_env $t)
  point "staged-$t-pair-staged" allreduce cuda,cuda "$SIZES" $(transport_env $t) \
    FLAGCX_USE_HETERO_COMM=1 FLAGCX_IPC_DISABLE=1
done
for op in $rest; do
  pair "$op"
  four "$op"
done

echo "skipped=${skipped# }" >>"$WORK/machine.txt"
say "done; logs and JSON in $WORK${skipped:+; skipped (time):$skipped}"
python3 tools/perf/hetero.py "$WORK" -
if [ "$EMULATE" != 1 ]; then
  python3 tools/perf/hetero.py "$WORK" "$DOC" && echo "tables written into $DOC"
fi
exit $failed
