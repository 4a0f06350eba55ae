# Session 24: where the reducing ops' time goes with the helpers' folds (the tree as committed plus the
# XX_PROF instrumentation of scratch.patch's xfer.cc part, as "main" in the bundle): per stage size,
# the stage's time in runXfers, the engine's own reductions, when the last receive and send ended,
# and the gap since the previous stage ended (work between stages), rank by rank.
source docs/perf-data/session21-gpu/common.sh >/dev/null
for op in reducescatter reduce allreduce; do for f in 1 0; do
  echo "== $op FLAGCX_SOCKET_RECV_REDUCE=$f"
  FLAGCX_SOCKET_RECV_REDUCE=$f XX_PROF=1 timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$op -b 1M -e 16M -f 2 -r 0 -m 1 --repeat 3 2>&1 | grep -v "^#" | sort -k1,1 -k3,3n
done; done
