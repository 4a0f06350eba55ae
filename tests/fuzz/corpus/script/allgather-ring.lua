-- Ring allgather: n-1 steps, each passing one block to the right.
-- Output chunk k is rank k's block.
return {
  name = "ring",
  op = "allgather",
  description = "n-1 steps around a ring; large messages",
  chunks = function(n) return n end,
  cost = {
    steps = function(n) return n - 1 end,
    bytes = function(n) return (n - 1) / n end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    local right, left = (r + 1) % n, (r - 1) % n
    s:copy(s.input(0), s.output(r))
    for i = 0, n - 2 do
      s:send(right, i == 0 and s.input(0) or s.output((r - i) % n))
      s:recv(left, s.output((r - i - 1) % n))
      s:stage()
    end
  end,
}
