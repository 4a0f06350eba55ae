-- Every rank receives from its left neighbour before it sends to its right
-- one, in separate stages: nobody ever sends.
return {
  name = "deadlock", op = "allreduce", chunks = 1,
  build = function(s)
    local n, r = s.nranks, s.rank
    s:copy(s.input(0), s.output(0))
    s:stage()
    if n == 1 then return end
    s:recv_reduce((r - 1) % n, s.output(0))
    s:stage()
    s:send((r + 1) % n, s.input(0))
  end,
}
