-- Pipelined chain reduce: partial sums flow along a chain that ends at the
-- root, in C chunks.  Relative distance d = (r - root) mod n; rank n-1 starts,
-- rank d receives chunk k at time k+n-2-d, adds it and forwards it at time
-- k+n-1-d.
local function nchunks(n) return math.max(8, 2 * n) end

return {
  name = "chain",
  op = "reduce",
  description = "pipelined chain to the root; large messages",
  chunks = nchunks,
  cost = {
    steps = function(n) return n - 2 + nchunks(n) end,
    bytes = function(n) return (n - 2 + nchunks(n)) / nchunks(n) end,
  },
  build = function(s)
    local n, r, root, C = s.nranks, s.rank, s.root, s.chunks
    local d = (r - root) % n
    local toward, from = (r - 1) % n, (r + 1) % n
    if n == 1 then
      for k = 0, C - 1 do s:copy(s.input(k), s.output(k)) end
      return
    end
    if d == n - 1 then  -- the head of the chain just sends its input
      for k = 0, C - 1 do
        s:send(toward, s.input(k))
        s:stage()
      end
      return
    end
    local acc = d == 0 and s.output or s.scratch
    for k = 0, C - 1 do s:copy(s.input(k), acc(k)) end
    s:stage()
    for t = n - 2 - d, n - 1 - d + C - 1 do
      local rk, sk = t - (n - 2 - d), t - (n - 1 - d)
      if rk < C then s:recv_reduce(from, acc(rk)) end
      if d > 0 and sk >= 0 then s:send(toward, acc(sk)) end
      s:stage()
    end
  end,
}
