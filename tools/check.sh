#!/usr/bin/env bash
# The test command: install what is missing, build, run the quick suite.
#   tools/check.sh            quick suite in build/
#   tools/check.sh --full     also the full suite
#   tools/check.sh --asan     also the quick suite under address+undefined
#                             (build-asan/); any report fails the run
#   tools/check.sh --sanitize --asan, and the multi-rank tests under thread
#                             (build-tsan/)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
full=0
asan=0
tsan=0
for a in "$@"; do
  case "$a" in
    --full) full=1 ;;
    --asan) asan=1 ;;
    --sanitize) asan=1; tsan=1 ;;
    *) echo "usage: tools/check.sh [--full] [--asan] [--sanitize]" >&2; exit 2 ;;
  esac
done
[ -f build/build.ninja ] || meson setup build
ninja -C build
export UCX_NET_DEVICES=lo
meson test -C build --suite quick --print-errorlogs --num-processes 2
if [ "$full" = 1 ]; then
  meson test -C build --suite full --print-errorlogs --num-processes 1
fi
if [ "$asan" = 1 ]; then
  # Address + undefined behaviour: the whole quick suite.  Child ranks leave
  # with _exit(), so LeakSanitizer only judges the test processes themselves.
  # -O1, not the release build's -O3: the sanitizers' usual level, and it
  # compiles the ASan build 2.5x faster (the test sources most: 47 s -> 17 s
  # for tests/sched/sched_test.cc).  No CUDA: its tests need a GPU and skip
  # here, while nvcc took 4 min of CPU in this build.
  asan_opts=(-Db_sanitize=address,undefined -Db_lundef=false -Doptimization=1 -Dcuda=disabled)
  if [ -f build-asan/build.ninja ]; then
    meson configure build-asan "${asan_opts[@]}"
  else
    meson setup build-asan "${asan_opts[@]}"
  fi
  ninja -C build-asan
  export LSAN_OPTIONS=suppressions=$PWD/tests/common/lsan.supp
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
    meson test -C build-asan --suite quick --no-suite perf --no-suite waits --print-errorlogs --num-processes 1 \
      --timeout-multiplier 3
  # The perf tools run under mpiexec: MPICH unloads its UCX modules at
  # MPI_Finalize, and LeakSanitizer then reports their allocations with no
  # module to name (nothing to suppress).  Leak checking is off for them only.
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0 \
    meson test -C build-asan --suite perf --print-errorlogs --num-processes 1 \
      --timeout-multiplier 3
fi
if [ "$tsan" = 1 ]; then
  # Thread: the multi-rank tests (mr-*, net-* transports, rel-*) and the host
  # streams (unit-host-adapter).  Ranks are forked before the rendezvous
  # thread starts (tests/common/harness.h), but a test process may still
  # hold threads of earlier tests, hence die_after_fork=0.
  # report_thread_leaks=0: kill tests make ranks leave with live
  # communicators on purpose (their threads are never joined); rel-leaks
  # checks thread counts after 100 communicators instead.
  [ -f build-tsan/build.ninja ] || meson setup build-tsan -Db_sanitize=thread
  ninja -C build-tsan
  mapfile -t mr_tests < <(meson test -C build-tsan --list --suite quick 2>/dev/null |
    sed -n 's#^.* / \(\(mr\|net\|rel\)-.*\)$#\1#p' | grep -v '^net-framing$')
  mr_tests+=(unit-host-adapter)  # host streams: threads, no ranks
  TSAN_OPTIONS=halt_on_error=1:die_after_fork=0:second_deadlock_stack=1:report_thread_leaks=0 \
    meson test -C build-tsan --print-errorlogs --num-processes 1 --timeout-multiplier 4 \
      "${mr_tests[@]}"
fi
