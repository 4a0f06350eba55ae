#!/usr/bin/env bash
# Session 21, device call 4: helpers that poll before blocking (session20-gpu/helper-spin.patch,
# XX_HELPER_SPIN_US 20 / 50) against blocking helpers (def), on top of the kMinSplit rule (messages
# under 512 KiB whole).  Bundle: a worktree at f1ba0ce with helper-spin.patch applied, a
# release build, session20-gpu/mk-bundle.sh <that build> <any>.  allreduce 7 rounds (256 KiB-16 MiB),
# sendrecv and allgather 3 rounds, arms interleaved.
source "$(dirname "$0")/common.sh"
declare -A ARM=([def]="" [s20]="XX_HELPER_SPIN_US=20" [s50]="XX_HELPER_SPIN_US=50")
run() { # op arm round
  env ${ARM[$2]} timeout 60 $M/bin/mpiexec.hydra -n 2 $M/main/tools/perf/test_$1 -b 256K -e 16M -f 4 -m 1 \
    -r 0 --repeat 3 > $L/$1-$2-r$3.log 2>&1 || echo "FAIL $1 $2 r$3 rc=$?"
}
for r in 1 2 3 4 5 6 7; do
  [ $((SECONDS-T0)) -gt ${BUDGET:-330} ] && break
  for a in def s20 s50; do run allreduce $a $r; done
  if [ $r -le 3 ]; then for op in sendrecv allgather; do for a in def s20 s50; do run $op $a $r; done; done; fi
  echo "round $r done at $((SECONDS-T0)) s"
done
python3 docs/perf-data/session21-gpu/summarize.py $L
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
