# Sourced: two "hosts" on one machine, network namespaces $nsA and $nsB joined
# by a veth pair with IPv6 ULAs fd7e:ec::1 (A) and fd7e:ec::2 (B), nodad.
# netns_pair_up TAG: creates them (names from TAG) or returns 1 with $why set;
# netns_pair_down: removes them.  Needs root, iproute2 and unshare.
netns_pair_up() {
  local tag=$1
  nsA=${tag}a nsB=${tag}b
  [ "$(id -u)" -eq 0 ] || { why="needs root to create network namespaces"; return 1; }
  command -v ip >/dev/null || { why="iproute2 (ip) is not installed"; return 1; }
  command -v unshare >/dev/null || { why="unshare is not installed"; return 1; }
  ip netns add "$nsA" 2>/dev/null || { why="cannot create network namespaces here"; return 1; }
  ip netns add "$nsB" || { why="cannot create a second namespace"; return 1; }
  ip link add "${tag}0" type veth peer name "${tag}1" || { why="cannot create a veth pair"; return 1; }
  ip link set "${tag}0" netns "$nsA" && ip link set "${tag}1" netns "$nsB" || { why="cannot move the veth ends"; return 1; }
  ip -n "$nsA" addr add fd7e:ec::1/64 dev "${tag}0" nodad
  ip -n "$nsB" addr add fd7e:ec::2/64 dev "${tag}1" nodad
  ip -n "$nsA" link set lo up && ip -n "$nsB" link set lo up
  ip -n "$nsA" link set "${tag}0" up && ip -n "$nsB" link set "${tag}1" up
}
netns_pair_down() {
  ip netns del "$nsA" 2>/dev/null
  ip netns del "$nsB" 2>/dev/null
  return 0
}
