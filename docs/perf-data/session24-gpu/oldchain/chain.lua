-- Pipelined chain broadcast: ranks form a chain from the root and the
-- message travels in C chunks, so every link is busy at once.  Relative rank
-- v receives chunk k at time k+v-1 and forwards it at time k+v.
local function nchunks(n) return math.max(8, 2 * n) end

return {
  name = "chain",
  op = "broadcast",
  description = "pipelined chain; large messages",
  chunks = nchunks,
  cost = {
    steps = function(n) return n - 2 + nchunks(n) end,
    bytes = function(n) return (n - 2 + nchunks(n)) / nchunks(n) end,
  },
  build = function(s)
    local n, r, root, C = s.nranks, s.rank, s.root, s.chunks
    local v = (r - root) % n
    local nxt, prev = (r + 1) % n, (r - 1) % n
    if v == 0 then
      for k = 0, C - 1 do s:copy(s.input(k), s.output(k)) end
      if n == 1 then return end
      for k = 0, C - 1 do
        s:send(nxt, s.input(k))
        s:stage()
      end
      return
    end
    for t = v - 1, v + C - 1 do
      local rk, sk = t - v + 1, t - v
      if rk < C then s:recv(prev, s.output(rk)) end
      if sk >= 0 and v < n - 1 then s:send(nxt, s.output(sk)) end
      s:stage()
    end
  end,
}
