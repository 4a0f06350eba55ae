-- Pairwise-exchange alltoall: n-1 rounds; in round i a rank sends its block
-- for rank r+i and receives the block from rank r-i.  Input chunk k is the
-- block for rank k; output chunk j is the block from rank j.
return {
  name = "pairwise",
  op = "alltoall",
  description = "n-1 rounds of one send and one receive; large messages",
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
