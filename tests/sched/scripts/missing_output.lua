-- An allgather that forgets to place its own block in the output.
return {
  name = "missing_output", op = "allgather", chunks = function(n) return n end,
  build = function(s)
    local n, r = s.nranks, s.rank
    for i = 0, n - 2 do
      s:send((r + 1) % n, i == 0 and s.input(0) or s.output((r - i) % n))
      s:recv((r - 1) % n, s.output((r - i - 1) % n))
      s:stage()
    end
  end,
}
