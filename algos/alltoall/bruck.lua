-- Bruck alltoall: ceil(log2 n) rounds for any n.  A rank's block for rank
-- r+j travels j hops in binary: in the round of distance 2^k it moves when
-- bit k of j is set.  Each rank keeps one slot per j; a slot that is still
-- travelling sits in scratch(j) or in output(r-j), its final place,
-- alternately, so that no round reads and writes the same chunk and the
-- last move lands in the output.
local function popcount(j)
  local c = 0
  while j > 0 do c = c + j % 2; j = math.floor(j / 2) end
  return c
end

return {
  name = "bruck",
  op = "alltoall",
  description = "ceil(log2 n) rounds, about half the data each; small messages",
  chunks = function(n) return n end,
  cost = {
    steps = function(n) return math.ceil(math.log(n) / math.log(2) - 1e-9) end,
    bytes = function(n) return math.ceil(math.log(n) / math.log(2) - 1e-9) / 2 end,
  },
  build = function(s)
    local n, r = s.nranks, s.rank
    s:copy(s.input(r), s.output(r))
    local where, left = {}, {}  -- left[j]: moves still to come for slot j
    for j = 1, n - 1 do
      where[j] = s.input((r + j) % n)
      left[j] = popcount(j)
    end
    local d = 1
    while d < n do
      local to, from = (r + d) % n, (r - d) % n
      for j = 1, n - 1 do
        if bit.band(j, d) ~= 0 then
          left[j] = left[j] - 1  -- after this one
          local dst = left[j] % 2 == 0 and s.output((r - j) % n) or s.scratch(j)
          s:send(to, where[j])
          s:recv(from, dst)
          where[j] = dst
        end
      end
      s:stage()
      d = d * 2
    end
  end,
}
