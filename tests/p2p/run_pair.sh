#!/usr/bin/env bash
# Runs p2p_pair's two processes (the target and the initiator) and checks
# how the bytes went.
# usage: run_pair.sh MODE P2P_PAIR_BINARY     (exit 77 = skipped, with the reason)
#   default  one host, the default path (cross-memory attach where permitted)
#   tcp      one host, FLAGCX_SHM_DISABLE=1: every byte through the TCP lanes
#   netns    two network namespaces joined by a veth pair (IPv6 ULA, nodad),
#            each under `unshare -u` with its own hostname: two hosts
#   secret   FLAGCX_P2P_SECRET differs: the connection is refused
#   killed   the target is killed (SIGKILL) midway: every later call fails
set -u
mode=$1
bin=$2
skip() { echo "SKIP: $*"; exit 77; }
dir=$(mktemp -d)
pids=()
tag=fp$$
nsA=${tag}a nsB=${tag}b
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  if [ "$mode" = netns ]; then ip netns del "$nsA" 2>/dev/null; ip netns del "$nsB" 2>/dev/null; fi
  rm -rf "$dir"
}
trap cleanup EXIT
export FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=P2P FLAGCX_TIMEOUT=${FLAGCX_TIMEOUT:-20}
runT=() runI=()
case $mode in
  default) ;;
  tcp) export FLAGCX_SHM_DISABLE=1 ;;
  secret) ;;
  killed) ;;
  netns)
    [ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
    command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
    command -v unshare >/dev/null || skip "unshare is not installed"
    ip netns add "$nsA" 2>/dev/null || skip "cannot create network namespaces here"
    ip netns add "$nsB" || skip "cannot create a second namespace"
    ip link add "${tag}0" type veth peer name "${tag}1" || skip "cannot create a veth pair"
    ip link set "${tag}0" netns "$nsA" && ip link set "${tag}1" netns "$nsB" || exit 1
    ip -n "$nsA" addr add fd7e:ec::1/64 dev "${tag}0" nodad
    ip -n "$nsB" addr add fd7e:ec::2/64 dev "${tag}1" nodad
    for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
    ip -n "$nsA" link set "${tag}0" up
    ip -n "$nsB" link set "${tag}1" up
    export FLAGCX_SOCKET_FAMILY=AF_INET6
    runT=(ip netns exec "$nsA" unshare -u sh -c "hostname hosta-$tag; exec \"\$0\" \"\$@\"")
    runI=(ip netns exec "$nsB" unshare -u sh -c "hostname hostb-$tag; exec \"\$0\" \"\$@\"")
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
tmode=all imode=all
[ "$mode" = secret ] && tmode=refused imode=refused
[ "$mode" = killed ] && imode=killed
if [ "$mode" = secret ]; then
  FLAGCX_P2P_SECRET=alpha "${runT[@]}" "$bin" target "$dir" "$tmode" >"$dir/t.log" 2>&1 &
else
  "${runT[@]}" "$bin" target "$dir" "$tmode" >"$dir/t.log" 2>&1 &
fi
pt=$!
pids+=("$pt")
if [ "$mode" = secret ]; then
  FLAGCX_P2P_SECRET=beta "${runI[@]}" "$bin" initiator "$dir" "$imode" >"$dir/i.log" 2>&1 &
else
  "${runI[@]}" "$bin" initiator "$dir" "$imode" >"$dir/i.log" 2>&1 &
fi
pi=$!
pids+=("$pi")
ok=0
if [ "$mode" = killed ]; then
  # Kill the target once the initiator says so; then let the initiator see it.
  for _ in $(seq 600); do [ -e "$dir/ready-to-kill" ] && break; sleep 0.1; done
  [ -e "$dir/ready-to-kill" ] || { echo "FAIL: the initiator never got ready"; ok=1; }
  kill -9 "$pt"; wait "$pt" 2>/dev/null
  echo 1 > "$dir/killed"
  wait "$pi" || ok=1
else
  wait "$pt" || ok=1
  wait "$pi" || ok=1
fi
echo "---- target"; cat "$dir/t.log"
echo "---- initiator"; cat "$dir/i.log"
expect() { grep -q "$2" "$dir/$1" || { echo "FAIL: $1 lacks \"$2\""; ok=1; }; }
case $mode in
  default)
    expect i.log "connected to .*same host"
    # Cross-memory attach where the kernel permits it (see docs/P2P.md).
    if grep -q "CMA out 1" "$dir/i.log"; then echo "path: cross-memory attach"; else echo "path: TCP (CMA not permitted here)"; fi ;;
  tcp) expect i.log "connected to .*same host.*CMA out 0 in 0" ;;
  netns) expect i.log "connected to .*other host.*CMA out 0 in 0"
         expect i.log "connection is other host" ;;
  secret) expect t.log "refused a connection"
          expect i.log "refused as expected: ok" ;;
  killed) expect i.log "every call failed after the kill: ok" ;;
esac
[ $ok = 0 ] && echo "PASS ($mode)"
exit $ok
