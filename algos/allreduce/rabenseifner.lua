-- Rabenseifner's allreduce: reduce-scatter by recursive halving, then
-- allgather by recursive doubling.  Each rank sends about 2 * (p-1)/p of the
-- message in 2*log2(p) steps: medium and large messages.
-- Non-powers of two: the first 2*(n-p) ranks fold in pairs first (the even
-- rank's input is added on its odd neighbour), the p remaining ranks run the
-- algorithm, and the odd ranks hand the result back at the end.
local function pow2below(n)
  local p = 1
  while p * 2 <= n do p = p * 2 end
  return p
end

return {
  name = "rabenseifner",
  op = "allreduce",
  description = "recursive-halving reduce-scatter + recursive-doubling allgather; medium and large messages",
  chunks = function(n) return pow2below(n) end,
  cost = {
    steps = function(n)
      local p = pow2below(n)
      return 2 * math.log(p) / math.log(2) + (p < n and 2 or 0)
    end,
    bytes = function(n)
      local p = pow2below(n)
      return 2 * (p - 1) / p + (p < n and 2 or 0)
    end,
  },
  build = function(s)
    local n, r, N = s.nranks, s.rank, s.chunks
    local p = N
    local rem = n - p
    if r < 2 * rem and r % 2 == 0 then
      for k = 0, N - 1 do s:send(r + 1, s.input(k)) end
      s:stage()
      for k = 0, N - 1 do s:recv(r + 1, s.output(k)) end
      return
    end
    -- An odd rank of a folded pair adds its neighbour's whole input first,
    -- so it needs all of its own in the output.  The other ranks copy only
    -- the half that the first halving round reduces into, and send the
    -- other half straight from the input (half the local copy).
    local folded = r < 2 * rem
    if folded or p == 1 then
      for k = 0, N - 1 do s:copy(s.input(k), s.output(k)) end
      s:stage()
    end
    local vr
    if folded then
      for k = 0, N - 1 do s:recv_reduce(r - 1, s.output(k)) end
      s:stage()
      vr = (r - 1) / 2
    else
      vr = r - rem
    end
    local function real(v) return v < rem and 2 * v + 1 or v + rem end
    -- recursive halving: keep the half of [lo, hi) that holds chunk vr
    local lo, hi = 0, p
    local mask = p / 2
    while mask >= 1 do
      local peer = real(bit.bxor(vr, mask))
      local mid = lo + mask
      local keepLo, keepHi, sendLo, sendHi
      if bit.band(vr, mask) == 0 then
        keepLo, keepHi, sendLo, sendHi = lo, mid, mid, hi
      else
        keepLo, keepHi, sendLo, sendHi = mid, hi, lo, mid
      end
      local from = s.output
      if mask == p / 2 and not folded then
        for k = keepLo, keepHi - 1 do s:copy(s.input(k), s.output(k)) end
        s:stage()
        from = s.input
      end
      for k = sendLo, sendHi - 1 do s:send(peer, from(k)) end
      for k = keepLo, keepHi - 1 do s:recv_reduce(peer, s.output(k)) end
      s:stage()
      lo, hi = keepLo, keepHi
      mask = mask / 2
    end
    -- recursive doubling: the block of size mask around vr doubles each round
    mask = 1
    while mask < p do
      local pv = bit.bxor(vr, mask)
      local mine = vr - vr % mask
      local theirs = pv - pv % mask
      for k = mine, mine + mask - 1 do s:send(real(pv), s.output(k)) end
      for k = theirs, theirs + mask - 1 do s:recv(real(pv), s.output(k)) end
      s:stage()
      mask = mask * 2
    end
    if r < 2 * rem then
      for k = 0, N - 1 do s:send(r - 1, s.output(k)) end
    end
  end,
}
