-- Ring allreduce that adds its own input a second time: rank 0's
-- contribution ends up counted twice.
return {
  name = "double_reduce", op = "allreduce", chunks = function(n) return n end,
  build = function(s)
    local n, r = s.nranks, s.rank
    for k = 0, n - 1 do s:copy(s.input(k), s.output(k)) end
    s:stage()
    if r == 0 then s:reduce(s.input(0), s.output(0)); s:stage() end
    for i = 0, n - 2 do
      s:send((r + 1) % n, s.output((r - i) % n))
      s:recv_reduce((r - 1) % n, s.output((r - i - 1) % n))
      s:stage()
    end
    for i = 0, n - 2 do
      s:send((r + 1) % n, s.output((r + 1 - i) % n))
      s:recv((r - i - 1 + 1) % n == r and (r - 1) % n or (r - 1) % n, s.output((r - i) % n))
      s:stage()
    end
  end,
}
