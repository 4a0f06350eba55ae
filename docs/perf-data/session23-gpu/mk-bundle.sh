#!/bin/bash
# Like session20-gpu/mk-bundle.sh, with every tools/perf/test_<op> of both builds.
#   mk-bundle.sh <release build under test> <baseline release build>
set -e
bash "$(dirname "$0")/../session20-gpu/mk-bundle.sh" "$1" "$2"
for t in allreduce broadcast allgather reducescatter reduce gather scatter alltoall alltoallv sendrecv; do
  cp "$2/tools/perf/test_$t" /tmp/mb/base/tools/perf/
done
tar czf .carry/mpi-bench.tgz -C /tmp mb; ls -la .carry/mpi-bench.tgz
