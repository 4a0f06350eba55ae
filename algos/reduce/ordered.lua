-- Rank-ordered reduce by owners: rank r owns chunk r, receives the n-1 other
-- contributions to it into scratch, folds the n of them in rank order (its
-- own input chunk at position r): ((x0 + x1) + x2) + ... bit for bit, and
-- sends the result to the root, which folds its own chunk straight into its
-- output.  As in allreduce/ordered.lua, scratch spans n-1 copies of the data
-- space so that each contribution has a slot of its chunk's size, and the
-- executor allocates only the n-1 chunks a rank names.  Built
-- for root 0 like every rooted script; relabelling to another root keeps the
-- fold in rank order (a fold_order script's folds of n sources rotate with
-- the ranks).
return {
  name = "ordered",
  op = "reduce",
  description = "owners fold in rank order, then send their chunks to the root; deterministic mode",
  fold_order = "rank",
  chunks = function(n) return n end,
  scratch_copies = function(n) return math.max(1, n - 1) end,
  requires = { max_ranks = 1024 },  -- scratch_copies * chunks <= 2^20
  cost = {
    steps = function(n) return n > 1 and 2 or 1 end,
    bytes = function(n) return 2 * (n - 1) / n end,
  },
  build = function(s)
    local n, r, root = s.nranks, s.rank, s.root
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
    -- The root folds into its output; the others into their first slot,
    -- rank 0's contribution (a fold may write one of its own sources).
    local dst = r == root and s.output(r) or src[1]
    s:fold(dst, src)
    if n == 1 then return end
    s:stage()
    if r == root then
      for q = 0, n - 1 do
        if q ~= r then s:recv(q, s.output(q)) end
      end
    else
      s:send(root, dst)
    end
  end,
}
