-- Binomial-tree reduce: the mirror of the binomial broadcast.  A rank adds
-- its children's partial sums one at a time (children nearer first), then
-- sends its own to its parent.  Inner ranks accumulate in scratch, the root
-- in its output.
return {
  name = "binomial",
  op = "reduce",
  description = "binomial tree, whole message per hop; small messages",
  chunks = 1,
  cost = {
    steps = function(n) return math.ceil(math.log(n) / math.log(2) - 1e-9) end,
    bytes = function(n) return math.ceil(math.log(n) / math.log(2) - 1e-9) end,
  },
  build = function(s)
    local n, r, root = s.nranks, s.rank, s.root
    local v = (r - root) % n
    local acc = v == 0 and s.output(0) or s.scratch(0)
    local mask = 1
    local children = {}
    while mask < n and v % (mask * 2) == 0 do
      if v + mask < n then children[#children + 1] = (v + mask + root) % n end
      mask = mask * 2
    end
    if #children == 0 and v == 0 then  -- a single rank
      s:copy(s.input(0), acc)
      return
    end
    if #children == 0 then
      s:send((v - mask + root) % n, s.input(0))  -- a leaf
      return
    end
    s:copy(s.input(0), acc)
    s:stage()
    for _, c in ipairs(children) do
      s:recv_reduce(c, acc)
      s:stage()
    end
    if v ~= 0 then s:send((v - mask + root) % n, acc) end
  end,
}
