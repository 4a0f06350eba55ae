#!/usr/bin/env bash
# Session 21 (GPU.md item 10): socket helper variants in one scratch binary, 2 ranks over TCP
# against MPICH, interleaved.  Bundle: git worktree add /tmp/sp 56cb6b4, git apply
# session20-gpu/helper-spin.patch and session21-gpu/helper-knobs.patch there, a release build
# (meson setup B --buildtype=release -Dcuda=disabled -Dtests=disabled -Dtorch=disabled), then
# docs/perf-data/session20-gpu/mk-bundle.sh /tmp/sp/B <any release build>.  Run with carry .carry.
# Arms: def = the library's rule (helpers for split messages, blocking); s50 = helpers poll a
# non-blocking socket 50 us before blocking; l0 = lane 0 stays with the engine thread (only
# lanes 1.. go to helpers); ns50 = s50 with the engine polling instead of sleeping; off = no helpers;
# s50m256 / s50m512 = s50 with helpers only for messages of >= 256 / 512 KiB; s20 = 20 us.
# Call 1 ran the default ARMS; call 2 ARMS="def s50 s50m256 s50m512 s20 off".
source "$(dirname "$0")/common.sh"
declare -A ARM=([def]="" [s50]="XX_HELPER_SPIN_US=50" [l0]="XX_LANE0_INLINE=1"
  [l0s50]="XX_LANE0_INLINE=1 XX_HELPER_SPIN_US=50" [ns50]="XX_ENGINE_NOSLEEP=1 XX_HELPER_SPIN_US=50"
  [off]="FLAGCX_SOCKET_HELPERS=0" [s50m256]="XX_HELPER_SPIN_US=50 XX_HELPER_MIN_BYTES=262144"
  [s50m512]="XX_HELPER_SPIN_US=50 XX_HELPER_MIN_BYTES=524288" [s20]="XX_HELPER_SPIN_US=20")
ARMS=${ARMS:-def s50 l0 l0s50 ns50 off}
for r in 1 2 3; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-420} ] && break
  for op in allreduce sendrecv allgather; do
    for a in $ARMS; do
      env ${ARM[$a]} timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$op -b 64K -e 16M -f 4 \
        -m 1 -r 0 --repeat 3 > $L/$op-$a-r$r.log 2>&1 || echo "FAIL $op $a r$r rc=$?"
    done
  done
  echo "round $r done at $((SECONDS-T0)) s"
done
# One line per op/arm/size: the median of the rounds' ratios (MPI/flagcx), then each round's.
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
