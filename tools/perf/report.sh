#!/usr/bin/env bash
# The current performance results of docs/PERFORMANCE.md: runs every
# test_<op> at 2 ranks under MPICH's mpiexec with the MPI baseline (-m 1) in
# the same run, over shared memory and over forced sockets (against MPICH over
# TCP), then writes docs/perf/results-<machine>.md (the machine, the exact
# commands, the commit, one table per op and transport) and two plots
# (docs/perf/results-<machine>-shm.png, -socket.png).  Re-running replaces
# them; the raw JSON lines stay in $WORK (default: a temporary folder).
#
# usage: tools/perf/report.sh [BUILD_DIR]            (default: build)
#   QUICK=1        four ops (allreduce allgather broadcast sendrecv), 16 B .. 16 MiB x16
#   OPS="a b .."   the ops to run (default: all ten)
#   SIZES="-b 16 -e 64M -f 4"   test_<op> size flags (default; QUICK: -b 16 -e 16M -f 16)
#   FLAGS="--repeat 3 -w 5 -W 100 -n 5 -T 50"   the timing flags (the method: docs/PERFORMANCE.md)
#   TRANSPORTS="shm socket"   MACHINE=name (default: CPU model and core count)
#   OUT=docs/perf   WORK=dir   RUN_TIMEOUT=seconds per run (default 900)
#   FINALIZE_GRACE=seconds a run may take to exit after its verdict (default 20)
# Needs a build with tools/perf (MPICH found by meson: -Dmpi=auto) and
# /usr/bin/python3 with matplotlib (Debian's python3-matplotlib).
set -uo pipefail  # one failed run does not stop the others; the report says which failed
cd "$(dirname "$0")/../.."
build=${1:-build}
if [ "${QUICK:-0}" = 1 ]; then
  ops=${OPS:-allreduce allgather broadcast sendrecv}
  sizes=${SIZES:--b 16 -e 16M -f 16}
else
  ops=${OPS:-allreduce allgather reducescatter broadcast reduce gather scatter alltoall alltoallv sendrecv}
  sizes=${SIZES:--b 16 -e 64M -f 4}
fi
flags=${FLAGS:---repeat 3 -w 5 -W 100 -n 5 -T 50}
transports=${TRANSPORTS:-shm socket}
out=${OUT:-docs/perf}
run_timeout=${RUN_TIMEOUT:-900}
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
cores=$(nproc)
machine=${MACHINE:-$(echo "${cpu:-cpu}" | tr 'A-Z' 'a-z' | sed 's/([^)]*)//g; s/[^a-z0-9]\+/-/g; s/^-//; s/-$//')-${cores}c}
work=${WORK:-$(mktemp -d /tmp/flagcx-report.XXXXXX)}
for op in $ops; do
  [ -x "$build/tools/perf/test_$op" ] || { echo "report.sh: no $build/tools/perf/test_$op (meson setup $build with MPICH installed, then ninja -C $build)" >&2; exit 2; }
done
command -v mpiexec >/dev/null || { echo "report.sh: no mpiexec (MPICH)" >&2; exit 2; }
mkdir -p "$out" "$work"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" FLAGCX_TIMEOUT="${FLAGCX_TIMEOUT:-60}"

. tools/perf/run_one.sh  # busy_pct, run_one (uses $run_timeout)

# The machine, the commands and the load, for the report's opening lines.
{
  echo "machine=$machine"
  echo "cpu=$cpu"
  echo "cores=$cores"
  echo "memory=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel=$(uname -sr)"
  echo "mpi=$(mpichversion 2>/dev/null | sed -n 's/^MPICH Version:[[:space:]]*//p' | head -1 | sed 's/^/MPICH /')"
  echo "ucx=$(ucx_info -v 2>/dev/null | sed -n 's/.*UCT version=\([^ ]*\).*/\1/p' | head -1)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src net adapters algos config include 2>/dev/null || echo ' (with uncommitted library changes)')"
  echo "buildtype=$(meson introspect --buildoptions "$build" 2>/dev/null | python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"))' 2>/dev/null)"
  echo "report=$( [ "${QUICK:-0}" = 1 ] && echo 'QUICK=1 ')tools/perf/report.sh $build"
  echo "sizes=$sizes"
  echo "flags=$flags"
  echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
} > "$work/machine.txt"
: > "$work/runs.txt"
start=$SECONDS
for op in $ops; do
  root=""
  case $op in broadcast|reduce|gather|scatter) root="-r 0" ;; esac
  for tr in $transports; do
    f="$work/$op-$tr.json"
    rm -f "$f"
    busy=$(busy_pct)
    env=""
    [ "$tr" = socket ] && env="FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self "
    cmd="mpiexec -n 2 $build/tools/perf/test_$op $sizes -m 1 $root $flags"
    echo "== $op over $tr (${busy}% of the CPUs busy before)"
    run_one "$work/$op-$tr.log" env $env $cmd -J "$f"
    rc=$?
    tail -1 "$work/$op-$tr.log"
    printf '%s\t%s\t%s\t%s\t%s%s\n' "$op" "$tr" "$busy" "$rc" "$env" "$cmd" >> "$work/runs.txt"
  done
done
echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$work/machine.txt"
echo "seconds=$((SECONDS - start))" >> "$work/machine.txt"
/usr/bin/python3 tools/perf/report.py "$work" "$out" || exit 1
echo "== done in $((SECONDS - start)) s; raw JSON lines and logs in $work"
