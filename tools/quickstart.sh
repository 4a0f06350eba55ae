#!/usr/bin/env bash
# Quick start: install what is missing, build, run the demo (4 ranks), then the
# allreduce benchmark against MPICH (2 ranks, launched by mpiexec).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build
echo
build/tools/flagcx-demo -n 4
echo
if [ -x build/tools/perf/test_allreduce ] && command -v mpiexec >/dev/null; then
  export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"  # MPICH's UCX: this host only
  mpiexec -n 2 build/tools/perf/test_allreduce -b 1K -e 64M -f 4 -m 1
else
  echo "quickstart: no MPICH here (libmpich-dev, mpich), so no benchmark; see tools/perf"
fi
