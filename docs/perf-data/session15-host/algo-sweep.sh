#!/bin/bash
# interleaved algorithm sweep, 2 ranks
cd /work/main
export UCX_NET_DEVICES=lo
for round in 1 2 3; do
 for tr in socket shm; do
  if [ $tr = socket ]; then E="FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self"; else E=""; fi
  for I in 1 0; do
   for pair in broadcast:binomial broadcast:chain reduce:binomial reduce:chain allreduce:rabenseifner allreduce:ring; do
    op=${pair%%:*}; a=${pair##*:}
    env $E timeout 150 mpiexec -n 2 build-perf/tools/perf/test_$op -b 256K -e 16M -f 4 -m 1 -r 0 --repeat 3 -I $I -a $a 2>&1 | grep -v '^#' | awk -v r=$round -v tr=$tr -v I=$I -v op=$op -v a=$a '{print r, tr, "I="I, op, a, $1, $6, $11, $14}'
   done
  done
 done
done
