return { name = "bad", op = "allgather", chunks = function(n) return -1 end,
  build = function(s)
    s:send(s.rank + 1000, s.input(99))
    s:recv(-1, s.output(-5))
    s:copy(s.input(0), s.input(0))
    s:send(0/0, s.output(1e300))
    s:stage(); s:stage()
  end }
