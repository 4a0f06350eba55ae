-- Recursive doubling allreduce: log2(p) rounds in which partners exchange
-- their whole buffer and add it.  Few steps, whole message each step: small
-- messages.  With n not a power of two, the first 2*(n-p) ranks pair up:
-- even ones hand their input to their odd neighbour and get the result back
-- at the end (p = the largest power of two <= n).
local function pow2below(n)
  local p = 1
  while p * 2 <= n do p = p * 2 end
  return p
end

return {
  name = "recursive_doubling",
  op = "allreduce",
  description = "log2(n) whole-buffer exchanges; small messages",
  chunks = 1,
  cost = {
    steps = function(n)
      local p = pow2below(n)
      return math.log(p) / math.log(2) + (p < n and 2 or 0)
    end,
    bytes = function(n)
      local p = pow2below(n)
      return math.log(p) / math.log(2) + (p < n and 2 or 0)
    end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    local p = pow2below(n)
    local rem = n - p
    local buf, tmp = s.output(0), s.scratch(0)
    local vr  -- rank among the p that do the doubling, nil if folded away
    if r < 2 * rem and r % 2 == 0 then
      s:send(r + 1, s.input(0))
      s:stage()
      s:recv(r + 1, buf)
      return
    end
    s:copy(s.input(0), buf)
    s:stage()
    if r < 2 * rem then
      s:recv_reduce(r - 1, buf)
      s:stage()
      vr = (r - 1) / 2
    else
      vr = r - rem
    end
    local mask = 1
    while mask < p do
      local pv = bit.bxor(vr, mask)
      local peer = pv < rem and 2 * pv + 1 or pv + rem
      s:send(peer, buf)
      s:recv(peer, tmp)
      s:stage()
      s:reduce(tmp, buf)
      s:stage()
      mask = mask * 2
    end
    if r < 2 * rem then s:send(r - 1, buf) end
  end,
}
