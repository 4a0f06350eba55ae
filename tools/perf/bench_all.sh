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
# Before every run OUTDIR/load.txt gets the load average and the share of the
# CPUs busy during one second (the previous run has ended by then, so this is
# everything else); a run that started with more than 10 % busy is flagged
# there and on the terminal (its figures are not quiet-machine figures).  The
# load average alone cannot tell: it still holds the previous run's two
# busy-polling ranks.  Each run is bounded by PERF_RUN_TIMEOUT seconds
# (default 1500): MPICH over TCP once hung in MPI_Finalize after the results
# were written (2026-12-03).
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
run_timeout=${PERF_RUN_TIMEOUT:-1500}
# Percent of all CPUs busy over one second, from /proc/stat.
busy_pct() {
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  local t=0 i
  for i in 1 2 3 4 5 6 7 8; do t=$((t + b[i] - a[i])); done
  local idle=$(( (b[4] - a[4]) + (b[5] - a[5]) ))
  echo $(( t > 0 ? 100 * (t - idle) / t : 0 ))
}
echo "# bench_all.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), flags: $flags" > "$out/load.txt"
for op in "${ops[@]}"; do
  root=""
  case $op in broadcast|reduce|gather|scatter) root="-r 0" ;; esac
  for tr in shm socket; do
    f="$out/$op-$tr.json"
    rm -f "$f"
    busy=$(busy_pct)
    flag=""
    if [ "$busy" -gt 10 ]; then flag=" LOADED"; loud=1; fi
    echo "$op $tr load $(cut -d' ' -f1-3 /proc/loadavg) busy ${busy}%$flag" >> "$out/load.txt"
    echo "== $op over $tr (load: $(cut -d' ' -f1-3 /proc/loadavg), ${busy}% busy before)$flag"
    if [ "$tr" = shm ]; then
      timeout "$run_timeout" \
        mpiexec -n 2 "$build/tools/perf/test_$op" -b 1K -e 256M -f 4 -m 1 $root $flags -J "$f"
    else
      FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self timeout "$run_timeout" \
        mpiexec -n 2 "$build/tools/perf/test_$op" -b 1K -e 256M -f 4 -m 1 $root $flags -J "$f"
    fi
    rc=$?
    [ $rc -eq 124 ] && echo "$op $tr: cut after ${run_timeout} s (results written before are kept)" | tee -a "$out/load.txt"
  done
done
echo "end load $(cut -d' ' -f1-3 /proc/loadavg), $((SECONDS - start)) s" >> "$out/load.txt"
echo "== done in $((SECONDS - start)) s; load now $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$loud" = 1 ] && echo "== WARNING: some runs started with more than 10% of the CPUs busy (see $out/load.txt)"
exit 0
