-- Sends to a rank that does not exist.
return {
  name = "bad_peer", op = "allreduce", chunks = 1,
  build = function(s)
    s:copy(s.input(0), s.output(0))
    s:send(s.nranks, s.output(0))
  end,
}
