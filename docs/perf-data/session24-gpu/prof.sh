# Session 24: where the reducing ops' time goes, on 36e15bc plus scratch.patch (XX_PROF=1: per stage
# size, runXfers' time, the engine's reductions, when the last receive / send ended; at exit rank 0
# times hostReduce and memcpy at 2 and 64 MiB) as "main" in the bundle, 512 KiB slices or auto.
source docs/perf-data/session21-gpu/common.sh >/dev/null
for op in reducescatter allreduce allgather reduce; do for c in auto 524288; do
  echo "== $op chunk=$c"
  ( [ $c = auto ] || export FLAGCX_NET_CHUNK_SIZE=$c; XX_PROF=1 timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$op -b 1M -e 16M -f 4 -r 0 -m 1 --repeat 3 2>&1 | grep -v "^#" )
done; done
