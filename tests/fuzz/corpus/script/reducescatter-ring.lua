-- Ring reduce-scatter: n-1 steps; at step i a rank passes its partial sum of
-- chunk r-i-1 to the right and adds its input to the partial sum of chunk
-- r-i-2 arriving from the left.  The last chunk to arrive is its own, which
-- lands in the output.  Partial sums live in scratch; the input chunk each
-- step needs is copied a stage ahead.
return {
  name = "ring",
  op = "reducescatter",
  description = "n-1 steps around a ring; large messages",
  chunks = function(n) return n end,
  cost = {
    steps = function(n) return n - 1 end,
    bytes = function(n) return (n - 1) / n end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    local right, left = (r + 1) % n, (r - 1) % n
    s:copy(s.input(r), s.output(0))
    if n > 2 then s:copy(s.input((r - 2) % n), s.scratch((r - 2) % n)) end
    s:stage()
    for i = 0, n - 2 do
      local out = (r - i - 1) % n
      s:send(right, i == 0 and s.input(out) or s.scratch(out))
      if i == n - 2 then
        s:recv_reduce(left, s.output(0))
      else
        s:recv_reduce(left, s.scratch((r - i - 2) % n))
      end
      if i + 1 <= n - 3 then
        local nxt = (r - i - 3) % n
        s:copy(s.input(nxt), s.scratch(nxt))
      end
      s:stage()
    end
  end,
}
