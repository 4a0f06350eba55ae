#!/usr/bin/env bash
# Session 25 (CPU only, 16-core host): where the socket helpers' receive-side folds should start
# now that copies are fused into the reductions (session 24 chose 2 MiB messages before the fusion,
# when a reduce's root still copied its input into the accumulator first). Main plus
# minfold.patch (XX_MIN_FOLD, scratch knob: the smallest message folded, default 2 MiB); arms
# f2m (unset), f1m, f512k; the three reducing ops at 2 ranks over loopback TCP against MPICH,
# 256 KiB - 4 MiB, rounds interleaved.
# Bundle: ../session23-gpu/mk-bundle.sh <release build of main+minfold.patch> <same build>.
SIZES="-b 256K -e 4M -f 2"
source "$(dirname "$0")/lib.sh"
declare -A ARM=([f2m]="" [f1m]="XX_MIN_FOLD=1048576" [f512k]="XX_MIN_FOLD=524288")
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-150} ] && break
  for op in reduce allreduce reducescatter; do for a in f2m f1m f512k; do run $op $a $r; done; done
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
