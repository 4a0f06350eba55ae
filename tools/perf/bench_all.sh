#!/usr/bin/env bash
# Runs every test_<op> at 2 ranks over 1 KiB .. 256 MiB with the MPI baseline,
# once over shared memory and once over forced sockets (MPICH over TCP), and
# writes one JSON-lines file per (op, transport) into OUTDIR.  The tables and
# the plot of docs/PERFORMANCE.md are made from these files by table.py and
# plot.py.
#
# usage: tools/perf/bench_all.sh [BUILD_DIR [OUTDIR [ops...]]]
#   extra test_<op> flags can be passed in PERF_FLAGS (default "-w 3 -n 10").
set -uo pipefail  # a failed run (e.g. a hang cut by FLAGCX_TIMEOUT) does not stop the rest
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-perf-results}
shift $(( $# > 2 ? 2 : $# )) || true
ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(allreduce allgather reducescatter broadcast reduce gather scatter
                             alltoall alltoallv sendrecv)
flags=${PERF_FLAGS:--w 3 -n 10}
mkdir -p "$out"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
export FLAGCX_TIMEOUT="${FLAGCX_TIMEOUT:-60}"
for op in "${ops[@]}"; do
  root=""
  case $op in broadcast|reduce|gather|scatter) root="-r 0" ;; esac
  for tr in shm socket; do
    f="$out/$op-$tr.json"
    rm -f "$f"
    echo "== $op over $tr (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    if [ "$tr" = shm ]; then
      mpiexec -n 2 "$build/tools/perf/test_$op" -b 1K -e 256M -f 4 -m 1 $root $flags -J "$f"
    else
      FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self \
        mpiexec -n 2 "$build/tools/perf/test_$op" -b 1K -e 256M -f 4 -m 1 $root $flags -J "$f"
    fi
  done
done
