#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces joined by a veth pair (IPv6
# ULA, nodad), each rank under `unshare -u` with its own hostname, so the
# ranks see two hosts and must use the socket transport.
# usage: two_hosts.sh BINARY [ARGS...]   each rank runs BINARY ARGS... RANK
#        (exit 77 = skipped, with the reason)
set -u
bin=$1
shift
args="$*"
tag=fx$$
nsA=${tag}a nsB=${tag}b
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
command -v unshare >/dev/null || skip "unshare is not installed"
cleanup() { ip netns del "$nsA" 2>/dev/null; ip netns del "$nsB" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$nsA" 2>/dev/null || skip "cannot create network namespaces here"
ip netns add "$nsB" || skip "cannot create a second namespace"
ip link add "${tag}0" type veth peer name "${tag}1" || skip "cannot create a veth pair"
ip link set "${tag}0" netns "$nsA" && ip link set "${tag}1" netns "$nsB" || exit 1
ip -n "$nsA" addr add fd7e:ec::1/64 dev "${tag}0" nodad
ip -n "$nsB" addr add fd7e:ec::2/64 dev "${tag}1" nodad
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set "${tag}0" up
ip -n "$nsB" link set "${tag}1" up
export FLAGCX_COMM_ID="[fd7e:ec::1]:29517" FLAGCX_SOCKET_FAMILY=AF_INET6 FLAGCX_TIMEOUT=30
FLAGCX_COMM_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export FLAGCX_COMM_SECRET
export FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=INIT
logA=$(mktemp) logB=$(mktemp)
ip netns exec "$nsA" unshare -u sh -c "hostname hosta-$tag; exec '$bin' $args 0" >"$logA" 2>&1 &
pa=$!
ip netns exec "$nsB" unshare -u sh -c "hostname hostb-$tag; exec '$bin' $args 1" >"$logB" 2>&1 &
pb=$!
ok=0
wait $pa || ok=1
wait $pb || ok=1
cat "$logA" "$logB"
grep -q "2 host(s)" "$logA" || { echo "FAIL: rank 0 did not see two hosts"; ok=1; }
grep -q "connected to 1 peer(s) over socket" "$logB" || { echo "FAIL: rank 1 did not use the socket transport"; ok=1; }
rm -f "$logA" "$logB"
exit $ok
