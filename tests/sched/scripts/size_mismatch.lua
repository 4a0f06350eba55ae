-- Sends chunk 0 and receives it as chunk 1, which differs in size for some
-- counts.
return {
  name = "size_mismatch", op = "allgather", chunks = function(n) return 2 * n end,
  build = function(s)
    local n, r = s.nranks, s.rank
    s:copy(s.input(0), s.output(2 * r))
    s:copy(s.input(1), s.output(2 * r + 1))
    s:stage()
    for i = 0, n - 2 do
      local src, dst = (r - i) % n, (r - i - 1) % n
      s:send((r + 1) % n, s.output(2 * src))
      s:send((r + 1) % n, s.output(2 * src + 1))
      s:recv((r - 1) % n, s.output(2 * dst + 1))
      s:recv((r - 1) % n, s.output(2 * dst))
      s:stage()
    end
  end,
}
