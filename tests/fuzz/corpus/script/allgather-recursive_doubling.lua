-- Recursive doubling allgather: log2(p) rounds in which partners swap every
-- block they have.  n not a power of two: the first 2*(n-p) ranks pair up,
-- the even one gives its block to its odd neighbour before and receives
-- everything from it after.
local function pow2below(n)
  local p = 1
  while p * 2 <= n do p = p * 2 end
  return p
end

return {
  name = "recursive_doubling",
  op = "allgather",
  description = "log2(n) rounds of exchanging all blocks held; small messages",
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
      s:copy(s.input(0), s.output(r))
      s:send(r + 1, s.input(0))
      s:stage()
      for k = 0, n - 1 do
        if k ~= r then s:recv(r + 1, s.output(k)) end
      end
      return
    end
    local function real(v) return v < rem and 2 * v + 1 or v + rem end
    -- the blocks a virtual rank brings: its own, and its folded partner's
    local function blocks(v)
      if v < rem then return { 2 * v, 2 * v + 1 } end
      return { v + rem }
    end
    local vr = r < 2 * rem and (r - 1) / 2 or r - rem
    s:copy(s.input(0), s.output(r))
    if r < 2 * rem then
      s:recv(r - 1, s.output(r - 1))
    end
    s:stage()
    local mask = 1
    while mask < p do
      local pv = bit.bxor(vr, mask)
      local mine, theirs = vr - vr % mask, pv - pv % mask
      for v = mine, mine + mask - 1 do
        for _, k in ipairs(blocks(v)) do s:send(real(pv), s.output(k)) end
      end
      for v = theirs, theirs + mask - 1 do
        for _, k in ipairs(blocks(v)) do s:recv(real(pv), s.output(k)) end
      end
      s:stage()
      mask = mask * 2
    end
    if r < 2 * rem then
      for k = 0, n - 1 do
        if k ~= r - 1 then s:send(r - 1, s.output(k)) end
      end
    end
  end,
}
