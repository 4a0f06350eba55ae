#!/bin/bash
cd /work/main
export UCX_NET_DEVICES=lo
for round in 1 2 3; do
 for tr in socket shm; do
  if [ $tr = socket ]; then E="FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self"; else E=""; fi
  for I in 0 1; do
   for op in broadcast reduce; do
    for v in old new; do
     T=""; [ $v = old ] && T="FLAGCX_TUNING_FILE=/tmp/s15/tuning-old.yaml"
     env $E $T timeout 150 mpiexec -n 2 build-perf/tools/perf/test_$op -b 64K -e 16M -f 4 -m 1 -r 0 --repeat 3 -I $I 2>&1 | awk -v r=$round -v tr=$tr -v I=$I -v op=$op -v a=$v 'NF>=14 && $1 ~ /^[0-9]+$/ {print r, tr, "I="I, op, a, $1, $6, $11, $14}'
    done
   done
  done
 done
done
