-- A user's allreduce script for UserAlgorithms.PickedUpVerifiedAndRun
-- (coll_test.cc): found through FLAGCX_ALGO_PATH, verified, forced by
-- FLAGCX_ALGO.  Star: every rank sends to rank 0, which adds them in turn and
-- sends the sum back.
return {
  name = "star",
  op = "allreduce",
  description = "star: reduce at rank 0, then send the sum to all",
  chunks = 1,                       -- the whole buffer is one chunk
  cost = {
    steps = function(n) return 2 * (n - 1) end,
    bytes = function(n) return 2 * (n - 1) end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    if r ~= 0 then
      s:send(0, s.input(0))         -- my contribution to rank 0
      s:stage()
      s:recv(0, s.output(0))        -- the sum, when it is ready
      return
    end
    s:copy(s.input(0), s.output(0)) -- rank 0 starts from its own input
    s:stage()
    for peer = 1, n - 1 do          -- one at a time: each adds into output
      s:recv_reduce(peer, s.output(0))
      s:stage()
    end
    for peer = 1, n - 1 do          -- all sends may run together
      s:send(peer, s.output(0))
    end
  end,
}
