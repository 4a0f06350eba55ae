-- Linear gather: every rank sends its block straight to the root.
return {
  name = "linear",
  op = "gather",
  description = "every rank sends to the root; large messages or few ranks",
  chunks = function(n) return n end,
  cost = {
    steps = function(n) return n - 1 end,
    bytes = function(n) return (n - 1) / n end,
  },
  build = function(s)
    local n, r, root = s.nranks, s.rank, s.root
    if r ~= root then
      s:send(root, s.input(0))
      return
    end
    s:copy(s.input(0), s.output(r))
    for k = 0, n - 1 do
      if k ~= root then s:recv(k, s.output(k)) end
    end
  end,
}
