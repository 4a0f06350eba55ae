-- Recursive halving reduce-scatter: log2(p) rounds; in each a rank sends the
-- half of its blocks its partner keeps and adds the half it keeps.  n not a
-- power of two: the first 2*(n-p) ranks fold in pairs (the even rank's input
-- is added on its odd neighbour, which later returns the even rank's block).
-- Virtual rank v stands for ranks 2v and 2v+1 when folded, else v + (n-p).
local function pow2below(n)
  local p = 1
  while p * 2 <= n do p = p * 2 end
  return p
end

return {
  name = "recursive_halving",
  op = "reducescatter",
  description = "log2(n) halving rounds; small and medium messages",
  chunks = function(n) return n end,
  cost = {
    steps = function(n)
      local p = pow2below(n)
      return math.log(p) / math.log(2) + (p < n and 2 or 0)
    end,
    bytes = function(n) return (n - 1) / n + (pow2below(n) < n and 1 or 0) end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    local p = pow2below(n)
    local rem = n - p
    if r < 2 * rem and r % 2 == 0 then
      for k = 0, n - 1 do s:send(r + 1, s.input(k)) end
      s:stage()
      s:recv(r + 1, s.output(0))
      return
    end
    local function real(v) return v < rem and 2 * v + 1 or v + rem end
    local function each(v0, v1, f)  -- every block of virtual ranks [v0, v1)
      for v = v0, v1 - 1 do
        if v < rem then f(2 * v); f(2 * v + 1) else f(v + rem) end
      end
    end
    for k = 0, n - 1 do s:copy(s.input(k), s.scratch(k)) end
    s:stage()
    local vr
    if r < 2 * rem then
      for k = 0, n - 1 do s:recv_reduce(r - 1, s.scratch(k)) end
      s:stage()
      vr = (r - 1) / 2
    else
      vr = r - rem
    end
    local lo, hi, mask = 0, p, p / 2
    while mask >= 1 do
      local peer = real(bit.bxor(vr, mask))
      local mid = lo + mask
      local keepLo, keepHi, sendLo, sendHi = lo, mid, mid, hi
      if bit.band(vr, mask) ~= 0 then keepLo, keepHi, sendLo, sendHi = mid, hi, lo, mid end
      each(sendLo, sendHi, function(k) s:send(peer, s.scratch(k)) end)
      each(keepLo, keepHi, function(k) s:recv_reduce(peer, s.scratch(k)) end)
      s:stage()
      lo, hi, mask = keepLo, keepHi, mask / 2
    end
    s:copy(s.scratch(r), s.output(0))
    if r < 2 * rem then s:send(r - 1, s.scratch(r - 1)) end
  end,
}
