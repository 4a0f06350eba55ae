-- Pairwise-exchange alltoallv: as the alltoall one; chunk k is the block for
-- (input) or from (output) rank k, with the sizes of the call's counts.
return {
  name = "pairwise",
  op = "alltoallv",
  description = "n-1 rounds of one send and one receive",
  chunks = function(n) return n end,
  cost = {
    steps = function(n) return n - 1 end,
    bytes = function(n) return (n - 1) / n end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    s:copy(s.input(r), s.output(r))
    for i = 1, n - 1 do
      s:send((r + i) % n, s.input((r + i) % n))
      s:recv((r - i) % n, s.output((r - i) % n))
      s:stage()
    end
  end,
}
