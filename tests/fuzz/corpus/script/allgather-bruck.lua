-- Bruck allgather: ceil(log2 n) rounds for any n.  In the round of distance
-- d a rank sends the blocks it has, r .. r+d-1, to rank r-d and receives
-- blocks r+d .. r+2d-1 from rank r+d (fewer in the last round).  Blocks go
-- straight to their final place in the output, so no rotation is needed.
return {
  name = "bruck",
  op = "allgather",
  description = "ceil(log2 n) rounds of doubling block sets; small messages, any n",
  chunks = function(n) return n end,
  cost = {
    steps = function(n) return math.ceil(math.log(n) / math.log(2) - 1e-9) end,
    bytes = function(n) return (n - 1) / n end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    s:copy(s.input(0), s.output(r))
    local have, d = 1, 1
    while have < n do
      local cnt = math.min(d, n - have)
      local to, from = (r - d) % n, (r + d) % n
      for j = 0, cnt - 1 do
        s:send(to, have == 1 and s.input(0) or s.output((r + j) % n))
        s:recv(from, s.output((r + d + j) % n))
      end
      s:stage()
      have = have + cnt
      d = d * 2
    end
  end,
}
