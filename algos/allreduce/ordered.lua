-- Rank-ordered allreduce: the reduce-scatter of reducescatter/ordered.lua,
-- then every owner sends its finished chunk straight to every other rank.
-- Rank r owns chunk r: it receives the n-1 other contributions to chunk r
-- into scratch and folds the n of them in rank order (its own input chunk at
-- position r): ((x0 + x1) + x2) + ... bit for bit.  Chunks differ in size by
-- up to one element, and only scratch chunks k with k mod n == r have chunk
-- r's size, so scratch spans n-1 copies of the data space: the contribution
-- of rank q lands in copy j (j = q, or q-1 above r).  Each rank names only
-- chunk r of each copy, and the executor allocates only the chunks a rank
-- names (packed scratch): (n-1)/n of the message.  The output is written
-- only by the fold and the gather, so an in-place call needs no copy of its
-- input.  The gather is direct, not a ring: the same (n-1)/n of the message
-- per rank, in one step instead of n-1, over the connections the exchange
-- already uses.
return {
  name = "ordered",
  op = "allreduce",
  description = "owners fold in rank order, then send their chunks to all; deterministic mode",
  fold_order = "rank",
  chunks = function(n) return n end,
  scratch_copies = function(n) return math.max(1, n - 1) end,
  requires = { max_ranks = 1024 },  -- scratch_copies * chunks <= 2^20
  cost = {
    steps = function(n) return n > 1 and 2 or 1 end,
    bytes = function(n) return 2 * (n - 1) / n end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    local src = {}
    for q = 0, n - 1 do
      if q == r then
        src[q + 1] = s.input(r)
      else
        local slot = s.scratch((q < r and q or q - 1) * n + r)
        s:send(q, s.input(q))
        s:recv(q, slot)
        src[q + 1] = slot
      end
    end
    s:stage()
    s:fold(s.output(r), src)
    s:stage()
    for q = 0, n - 1 do
      if q ~= r then
        s:send(q, s.output(r))
        s:recv(q, s.output(q))
      end
    end
  end,
}
