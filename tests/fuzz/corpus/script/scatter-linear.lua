-- Linear scatter: the root sends every rank its block.
return {
  name = "linear",
  op = "scatter",
  description = "the root sends to every rank; large messages or few ranks",
  chunks = function(n) return n end,
  cost = {
    steps = function(n) return n - 1 end,
    bytes = function(n) return (n - 1) / n end,
  },
  build = function(s)
    local n, r, root = s.nranks, s.rank, s.root
    if r ~= root then
      s:recv(root, s.output(0))
      return
    end
    s:copy(s.input(r), s.output(0))
    for k = 0, n - 1 do
      if k ~= root then s:send(k, s.input(k)) end
    end
  end,
}
