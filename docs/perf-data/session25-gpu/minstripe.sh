#!/usr/bin/env bash
# Session 25 (CPU only, 16-core host): the smallest stripe of a message split over the socket
# lanes (kMinStripe, 64 KiB since session 20, when slices were 512 KiB). A 512 KiB exchange (the
# allgather at 1 MiB, 2 ranks) took ~120 us against ~67 us one way (gather 1 MiB). Main plus
# minstripe.patch (XX_MIN_STRIPE, scratch knob); arms s64 (unset), s128, s256, s512 (a 512 KiB
# message one stripe); 2 ranks over loopback TCP against MPICH, 256 KiB - 2 MiB, interleaved.
# Bundle: ../session23-gpu/mk-bundle.sh <release build of main+minstripe.patch> <same build>.
SIZES="-b 256K -e 2M -f 2"
source "$(dirname "$0")/lib.sh"
declare -A ARM=([s64]="" [s128]="XX_MIN_STRIPE=131072" [s256]="XX_MIN_STRIPE=262144" [s512]="XX_MIN_STRIPE=524288")
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-150} ] && break
  for op in allgather sendrecv allreduce reducescatter; do for a in s64 s128 s256 s512; do run $op $a $r; done; done
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
