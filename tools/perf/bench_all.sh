#!/usr/bin/env bash
# Runs every test_<op> at 2 ranks over 1 KiB .. 256 MiB with the MPI baseline,
# once over shared memory and once over forced sockets (MPICH over TCP), and
# writes one JSON-lines file per (op, transport) into OUTDIR.  The tables and
# the plot of docs/PERFORMANCE.md are made from these files by table.py and
# plot.py.
#
# Method (docs/PERFORMANCE.md): a cold pass over every size, then per point a
# warm-up of both sides to steady state and --repeat timed runs, flagcx and
# MPI alternating; the median and spread are reported.
#
# usage: tools/perf/bench_all.sh [BUILD_DIR [OUTDIR [ops...]]]
#   extra test_<op> flags in PERF_FLAGS (default "--repeat 5 -w 5 -W 200 -n 5 -T 100").
# The load average before every run goes to OUTDIR/load.txt; a run that
# started above 0.5 is flagged there and on the terminal (its figures are not
# publishable as quiet-machine figures).
set -uo pipefail  # a failed run (e.g. a hang cut by FLAGCX_TIMEOUT) does not stop the rest
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-perf-results}
shift $(( $# > 2 ? 2 : $# )) || true
ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(allreduce allgather reducescatter broadcast reduce gather scatter
                             alltoall alltoallv sendrecv)
flags=${PERF_FLAGS:---repeat 5 -w 5 -W 200 -n 5 -T 100}
mkdir -p "$out"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
export FLAGCX_TIMEOUT="${FLAGCX_TIMEOUT:-60}"
start=$SECONDS
loud=0
echo "# bench_all.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), flags: $flags" > "$out/load.txt"
for op in "${ops[@]}"; do
  root=""
  case $op in broadcast|reduce|gather|scatter) root="-r 0" ;; esac
  for tr in shm socket; do
    f="$out/$op-$tr.json"
    rm -f "$f"
    load=$(cut -d' ' -f1 /proc/loadavg)
    flag=""
    if awk -v l="$load" 'BEGIN { exit !(l >= 0.5) }'; then flag=" LOADED"; loud=1; fi
    echo "$op $tr load $(cut -d' ' -f1-3 /proc/loadavg)$flag" >> "$out/load.txt"
    echo "== $op over $tr (load: $(cut -d' ' -f1-3 /proc/loadavg))$flag"
    if [ "$tr" = shm ]; then
      mpiexec -n 2 "$build/tools/perf/test_$op" -b 1K -e 256M -f 4 -m 1 $root $flags -J "$f"
    else
      FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self \
        mpiexec -n 2 "$build/tools/perf/test_$op" -b 1K -e 256M -f 4 -m 1 $root $flags -J "$f"
    fi
  done
done
echo "end load $(cut -d' ' -f1-3 /proc/loadavg), $((SECONDS - start)) s" >> "$out/load.txt"
echo "== done in $((SECONDS - start)) s; load now $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$loud" = 1 ] && echo "== WARNING: some runs started with load >= 0.5 (see $out/load.txt)"
exit 0
