# Sourced by tools/perf/report.sh and compare.sh: runs one benchmark under
# mpiexec with a bound on its time, and measures how busy the machine is.
# The caller sets run_timeout (seconds) and may set FINALIZE_GRACE.

# Percent of all CPUs busy during one second, from /proc/stat: taken before
# each run, when the previous run has ended, so it is everything else.
busy_pct() {
  local a b t=0 i
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  for i in 1 2 3 4 5 6 7 8; do t=$((t + b[i] - a[i])); done
  local idle=$(( (b[4] - a[4]) + (b[5] - a[5]) ))
  echo $(( t > 0 ? 100 * (t - idle) / t : 0 ))
}

# Runs one benchmark with its output in $1.  The harness prints its verdict
# ("# OK: ..." or "# FAILED: ...") before MPI_Finalize, and MPICH over TCP
# sometimes never returns from MPI_Finalize (a rank spinning in UCX's
# progress): once the verdict is there the run gets FINALIZE_GRACE seconds,
# then is ended with the verdict's status.  RUN_TIMEOUT bounds the rest.
descendants() {  # the pids below $1, deepest first
  local c
  for c in $(ps -o pid= --ppid "$1"); do descendants "$c"; echo "$c"; done
}
end_run() {  # TERM, then KILL, to the run's processes (the ranks first), by pid
  local p pids
  pids="$(descendants "$1") $1"
  for p in $pids; do kill -TERM "$p" 2>/dev/null; done
  sleep 2
  for p in $pids; do kill -KILL "$p" 2>/dev/null; done
  wait "$1" 2>/dev/null
}
run_one() {
  local log=$1; shift
  "$@" > "$log" 2>&1 &
  local pid=$! waited=0 grace=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    if grep -q '^# \(OK\|FAILED\): ' "$log"; then
      grace=$((grace + 1))
      [ "$grace" -ge "${FINALIZE_GRACE:-20}" ] || continue
      echo "   (MPI_Finalize did not return ${grace} s after the results: ended)"
      end_run "$pid"
      grep -q '^# OK: ' "$log"
      return
    elif [ "$waited" -ge "$run_timeout" ]; then
      echo "   (no verdict after $run_timeout s: ended)"
      end_run "$pid"
      return 124
    fi
  done
  wait "$pid"
}
