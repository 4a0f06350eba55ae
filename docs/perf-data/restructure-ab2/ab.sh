#!/usr/bin/env bash
# Issue 12's before/after check with the current benchmark method (docs/PERFORMANCE.md):
# the same harness source (main's tools/perf) compiled twice with the same flags, once against
# the tree before the restructure (eb27c2d: its headers and its release libflagcx.so) and once
# against main's; 2 ranks over shm, 4 ops, 1 KiB .. 32 MiB x8, 3 runs each, before and after
# interleaved run by run.
#   usage: ab.sh BEFORE_TREE AFTER_TREE AFTER_BUILD OUT
set -uo pipefail
before=$1 after=$2 abuild=$3 out=$4
src=$(cd "$(dirname "$0")/../../../tools/perf" && pwd)
mkdir -p "$out/bin"
build() {  # build TAG INCLUDE LIBDIR
  local tag=$1 inc=$2 lib=$3 o="$out/bin/$1"
  mkdir -p "$o"
  for f in harness calls options verify; do
    g++ -std=c++20 -O2 -c "$src/$f.cc" -I"$inc" $(pkg-config --cflags mpich) -o "$o/$f.o" || return 1
  done
  for op in allreduce allgather alltoall broadcast; do
    g++ -std=c++20 -O2 -DPERF_OP="\"$op\"" "$src/main.cc" "$o"/*.o -I"$inc" \
      $(pkg-config --cflags --libs mpich) -L"$lib" -lflagcx -Wl,-rpath,"$lib" -o "$o/test_$op" || return 1
  done
}
if [ -z "${AB_RUN_ONLY:-}" ]; then   # AB_RUN_ONLY=1: binaries already built in OUT/bin
  build before "$before/include" "$before/build" || exit 1
  build after "$after/include" "$abuild" || exit 1
fi
[ -n "${AB_BUILD_ONLY:-}" ] && exit 0
export UCX_NET_DEVICES=lo FLAGCX_TIMEOUT=60
for run in 1 2 3; do
  for op in allreduce allgather alltoall broadcast; do
    root=""; [ $op = broadcast ] && root="-r 0"
    for tag in before after; do
      echo "$tag $op $run load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
      timeout 600 mpiexec -n 2 "$out/bin/$tag/test_$op" -b 1K -e 32M -f 8 --repeat 3 -W 200 -T 100 $root \
        -J "$out/$tag-$op-$run.json" > "$out/$tag-$op-$run.txt" 2>&1
    done
  done
done
echo "end load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
