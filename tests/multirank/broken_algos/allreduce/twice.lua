-- Broken on purpose: rank 0 adds rank 1's contribution twice.
return {
  name = "twice",
  op = "allreduce",
  chunks = 1,
  build = function(s)
    if s.rank == 0 then
      s:copy(s.input(0), s.output(0))
      s:stage()
      for peer = 1, s.nranks - 1 do
        s:recv_reduce(peer, s.output(0))
        s:stage()
      end
      if s.nranks > 1 then s:recv_reduce(1, s.output(0)) s:stage() end
      for peer = 1, s.nranks - 1 do s:send(peer, s.output(0)) end
    else
      s:send(0, s.input(0))
      if s.rank == 1 then s:stage() s:send(0, s.input(0)) end
      s:stage()
      s:recv(0, s.output(0))
    end
  end,
}
