-- Binomial-tree gather: a rank collects the blocks of its subtree (relative
-- ranks [v, v + lowbit(v))) from its children, then sends them all to its
-- parent.  Inner ranks collect in scratch, the root in its output.
return {
  name = "binomial",
  op = "gather",
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
    local store = v == 0 and s.output or s.scratch
    local mask = 1
    local children = {}
    while mask < n and v % (mask * 2) == 0 do
      if v + mask < n then children[#children + 1] = mask end
      mask = mask * 2
    end
    if #children == 0 and v == 0 then  -- a single rank
      s:copy(s.input(0), store(r))
      return
    end
    if #children == 0 then
      s:send(real(v - mask), s.input(0))
      return
    end
    s:copy(s.input(0), store(r))
    for _, m in ipairs(children) do
      for u = v + m, math.min(v + 2 * m, n) - 1 do s:recv(real(v + m), store(real(u))) end
    end
    s:stage()
    if v ~= 0 then
      for u = v, math.min(v + mask, n) - 1 do s:send(real(v - mask), store(real(u))) end
    end
  end,
}
