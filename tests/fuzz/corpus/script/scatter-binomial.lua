-- Binomial-tree scatter: the root sends each child the blocks of the child's
-- subtree (relative ranks [c, c + lowbit(c))); inner ranks keep their own
-- block and forward the rest from scratch.
return {
  name = "binomial",
  op = "scatter",
  description = "binomial tree; small messages",
  chunks = function(n) return n end,
  cost = {
    steps = function(n) return math.ceil(math.log(n) / math.log(2) - 1e-9) end,
    bytes = function(n) return (n - 1) / n * math.ceil(math.log(n) / math.log(2) - 1e-9) / 2 end,
  },
  build = function(s)
    local n, r, root = s.nranks, s.rank, s.root
    local v = (r - root) % n
    local real = function(u) return (u + root) % n end
    local mask = 1
    while mask < n and v % (mask * 2) == 0 do mask = mask * 2 end
    local from  -- where the blocks of my subtree are
    if v == 0 then
      s:copy(s.input(r), s.output(0))
      from = s.input
    else
      local parent = real(v - mask)
      s:recv(parent, s.output(0))
      for u = v + 1, math.min(v + mask, n) - 1 do s:recv(parent, s.scratch(real(u))) end
      s:stage()
      from = s.scratch
    end
    mask = mask / 2
    while mask >= 1 do
      local c = v + mask
      if c < n then
        for u = c, math.min(c + mask, n) - 1 do s:send(real(c), from(real(u))) end
      end
      mask = mask / 2
    end
  end,
}
