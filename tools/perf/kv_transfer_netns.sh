#!/usr/bin/env bash
# kv_transfer between two "hosts": network namespaces joined by a veth pair
# (IPv6 ULA fd7e:ec::/64, nodad), each with its own hostname.  Needs root.
# usage: kv_transfer_netns.sh KV_TRANSFER_BINARY [kv_transfer options]
set -u
bin=$1; shift
tag=kv$$ dir=$(mktemp -d)
. "$(dirname "$0")/../netns-pair.sh"
cleanup() { netns_pair_down; rm -rf "$dir"; }
trap cleanup EXIT
netns_pair_up "$tag" || { echo "kv_transfer_netns: $why"; exit 1; }
export FLAGCX_SOCKET_FAMILY=AF_INET6
ip netns exec "$nsA" unshare -u sh -c "hostname decode-$tag; exec \"\$0\" \"\$@\"" \
  "$bin" --role decode --dir "$dir" "$@" &
pd=$!
ip netns exec "$nsB" unshare -u sh -c "hostname prefill-$tag; exec \"\$0\" \"\$@\"" \
  "$bin" --role prefill --dir "$dir" "$@"
rc=$?
wait $pd || rc=1
exit $rc
