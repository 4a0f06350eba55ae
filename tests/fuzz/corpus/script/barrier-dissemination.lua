-- Dissemination barrier: ceil(log2 n) rounds of empty messages; in round k
-- a rank signals rank r+2^k and waits for rank r-2^k.  After the last round
-- every rank has heard, through some chain, from every other.
return {
  name = "dissemination",
  op = "barrier",
  description = "ceil(log2 n) rounds of zero-byte messages",
  chunks = 1,
  cost = {
    steps = function(n) return math.ceil(math.log(n) / math.log(2) - 1e-9) end,
    bytes = 0,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    local d = 1
    while d < n do
      s:send((r + d) % n, s.scratch(0))
      s:recv((r - d) % n, s.scratch(0))
      s:stage()
      d = d * 2
    end
  end,
}
