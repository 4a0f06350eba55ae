-- Binomial-tree broadcast: ceil(log2 n) rounds; a rank that has the data
-- sends it to the ranks 2^k away.  v is the rank relative to the root.
return {
  name = "binomial",
  op = "broadcast",
  description = "binomial tree, whole message per hop; small messages",
  chunks = 1,
  cost = {
    steps = function(n) return math.ceil(math.log(n) / math.log(2) - 1e-9) end,
    bytes = function(n) return math.ceil(math.log(n) / math.log(2) - 1e-9) end,
  },
  build = function(s)
    local n, r, root = s.nranks, s.rank, s.root
    local v = (r - root) % n
    local src = s.output(0)
    local mask = 1
    if v == 0 then
      s:copy(s.input(0), s.output(0))
      src = s.input(0)
      while mask < n do mask = mask * 2 end
    else
      while v % (mask * 2) == 0 do mask = mask * 2 end  -- mask = lowest set bit of v
      s:recv((v - mask + root) % n, s.output(0))
      s:stage()
    end
    mask = mask / 2
    while mask >= 1 do
      if v + mask < n then s:send((v + mask + root) % n, src) end
      mask = mask / 2
    end
  end,
}
