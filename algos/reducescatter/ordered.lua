-- Rank-ordered reduce-scatter by owners: rank r owns chunk r (its output
-- block).  Every rank sends chunk q of its input to owner q and receives the
-- n-1 other contributions to its own chunk into scratch (plain receives, no
-- arithmetic), then one fold adds the n contributions in rank order, its own
-- input chunk at position r: ((x0 + x1) + x2) + ... bit for bit.  The block
-- chunks all hold `count` elements, so scratch chunk q (rank q's
-- contribution) has the size of chunk r.  Bytes per rank: (n-1)/n of the
-- message each way, as a ring; one step.
return {
  name = "ordered",
  op = "reducescatter",
  description = "owners fold the contributions in rank order; deterministic mode",
  fold_order = "rank",
  chunks = function(n) return n end,
  cost = {
    steps = 1,
    bytes = function(n) return (n - 1) / n end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    local src = {}
    for q = 0, n - 1 do
      if q ~= r then
        s:send(q, s.input(q))
        s:recv(q, s.scratch(q))
      end
      src[q + 1] = q == r and s.input(r) or s.scratch(q)
    end
    s:stage()
    s:fold(s.output(0), src)
  end,
}
