-- Sends a chunk and receives into it in the same stage.
return {
  name = "race", op = "allreduce", chunks = 1,
  build = function(s)
    local n, r = s.nranks, s.rank
    s:copy(s.input(0), s.output(0))
    s:stage()
    if n == 1 then return end
    s:send((r + 1) % n, s.output(0))
    s:recv_reduce((r - 1) % n, s.output(0))
  end,
}
