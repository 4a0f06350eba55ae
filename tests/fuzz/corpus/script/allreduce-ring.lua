-- Ring allreduce: a reduce-scatter around the ring (n-1 steps, each rank
-- adds one chunk from its left neighbour), then an allgather around the ring
-- (n-1 steps).  Bandwidth-optimal: each rank sends 2(n-1)/n of the message.
-- The input is copied to the output one chunk at a time, a stage ahead of
-- the step that reduces into it, so the copies overlap the communication.
return {
  name = "ring",
  op = "allreduce",
  description = "reduce-scatter then allgather around a ring; large messages",
  chunks = function(n) return n end,
  cost = {
    steps = function(n) return 2 * (n - 1) end,
    bytes = function(n) return 2 * (n - 1) / n end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    if n == 1 then
      s:copy(s.input(0), s.output(0))
      return
    end
    local right, left = (r + 1) % n, (r - 1) % n
    s:copy(s.input((r - 1) % n), s.output((r - 1) % n))
    s:stage()
    -- reduce-scatter: at step i send chunk r-i, add chunk r-i-1 from the left
    for i = 0, n - 2 do
      local out = (r - i) % n
      s:send(right, i == 0 and s.input(out) or s.output(out))
      s:recv_reduce(left, s.output((r - i - 1) % n))
      if i + 2 <= n - 1 then
        local nxt = (r - i - 2) % n
        s:copy(s.input(nxt), s.output(nxt))
      end
      s:stage()
    end
    -- rank r now holds the reduced chunk r+1; pass the finished chunks on
    for i = 0, n - 2 do
      s:send(right, s.output((r + 1 - i) % n))
      s:recv(left, s.output((r - i) % n))
      s:stage()
    end
  end,
}
