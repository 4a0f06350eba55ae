#!/usr/bin/env bash
# kv_transfer between two "hosts": network namespaces joined by a veth pair
# (IPv6 ULA fd7e:ec::/64, nodad), each with its own hostname.  Needs root.
# usage: kv_transfer_netns.sh KV_TRANSFER_BINARY [kv_transfer options]
set -u
bin=$1; shift
tag=kv$$ nsA=kv$$a nsB=kv$$b dir=$(mktemp -d)
cleanup() { ip netns del "$nsA" 2>/dev/null; ip netns del "$nsB" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
ip netns add "$nsA" && ip netns add "$nsB" || exit 1
ip link add "${tag}0" type veth peer name "${tag}1" || exit 1
ip link set "${tag}0" netns "$nsA" && ip link set "${tag}1" netns "$nsB" || exit 1
ip -n "$nsA" addr add fd7e:ec::1/64 dev "${tag}0" nodad
ip -n "$nsB" addr add fd7e:ec::2/64 dev "${tag}1" nodad
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set "${tag}0" up
ip -n "$nsB" link set "${tag}1" up
export FLAGCX_SOCKET_FAMILY=AF_INET6
ip netns exec "$nsA" unshare -u sh -c "hostname decode-$tag; exec \"\$0\" \"\$@\"" \
  "$bin" --role decode --dir "$dir" "$@" &
pd=$!
ip netns exec "$nsB" unshare -u sh -c "hostname prefill-$tag; exec \"\$0\" \"\$@\"" \
  "$bin" --role prefill --dir "$dir" "$@"
rc=$?
wait $pd || rc=1
exit $rc
