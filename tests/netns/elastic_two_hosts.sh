#!/usr/bin/env bash
# Recovery across two "hosts" (tools/netns-pair.sh): ranks 0 and 1 in one
# network namespace, 2 and 3 in the other, each host with its own hostname
# (shm inside a host, sockets between them).  Rank 3, on the other host from
# the survivors' first rank, dies of SIGKILL mid-loop; ranks 0-2 shrink with
# FLAGCX_SHRINK_ABORT and go on (tests/netns/elastic_prog.c).
# usage: elastic_two_hosts.sh ELASTIC_PROG      (exit 77 = skipped, with the reason)
set -u
bin=$1
tag=fe$$
skip() { echo "SKIP: $*"; exit 77; }
. "$(dirname "$0")/../../tools/netns-pair.sh"
trap netns_pair_down EXIT
netns_pair_up "$tag" || skip "$why"
export FLAGCX_COMM_ID="[fd7e:ec::1]:29519" FLAGCX_SOCKET_FAMILY=AF_INET6 FLAGCX_TIMEOUT=10
FLAGCX_COMM_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export FLAGCX_COMM_SECRET
export FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=INIT
dir=$(mktemp -d)
pids=()
for r in 0 1 2 3; do
  if [ "$r" -lt 2 ]; then ns=$nsA host=hosta-$tag; else ns=$nsB host=hostb-$tag; fi
  ip netns exec "$ns" unshare -u sh -c "hostname $host; exec '$bin' $r 4 3" >"$dir/$r.log" 2>&1 &
  pids+=($!)
done
ok=0
for r in 0 1 2 3; do
  wait "${pids[$r]}"
  st=$?
  want=0
  [ "$r" -eq 3 ] && want=$((128 + 9))
  [ "$st" -eq "$want" ] || { echo "FAIL: rank $r exited with $st, want $want"; ok=1; }
done
cat "$dir"/*.log
grep -q "2 host(s)" "$dir/0.log" || { echo "FAIL: rank 0 did not see two hosts"; ok=1; }
for r in 0 1 2; do
  grep -q "rank $r: recovered on 3 ranks" "$dir/$r.log" || { echo "FAIL: rank $r did not recover"; ok=1; }
done
rm -rf "$dir"
exit $ok
