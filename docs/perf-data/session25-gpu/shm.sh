#!/usr/bin/env bash
# Session 25 (CPU only, 16-core host): every test_<op> over shared memory (FLAGCX_SHM_DISABLE=0)
# against MPICH on its default transports (UCX's shared memory on one host), 2 ranks, 64 KiB -
# 16 MiB, three rounds; issue 19's "every test_<op> >= 1x MPICH from 64 KiB over shm", measured
# until now only on the 2-core VM. Broadcast out of place (-I 0).
# Bundle: ../session23-gpu/mk-bundle.sh <release build of main> <same build>.
SIZES="-b 64K -e 16M -f 4"
source "$(dirname "$0")/lib.sh"
declare -A ARM=([shm]="-u UCX_TLS FLAGCX_SHM_DISABLE=0")
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-200} ] && break
  every_op shm $r
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
