-- Hierarchical allreduce for G = ranks_per_host ranks on each of H hosts
-- (ranks numbered host by host): a ring reduce-scatter inside each host, a
-- ring allreduce between the ranks of equal local index on every host (each
-- on its own 1/G of the data), and a ring allgather inside each host.  Only
-- 1/G of the message crosses the network from each rank.
-- Chunk c = b*H + j: block b (one per local rank) cut into H pieces.
return {
  name = "hierarchical",
  op = "allreduce",
  description = "intra-host reduce-scatter, inter-host ring allreduce, intra-host allgather",
  requires = function(n, g)
    if n % g ~= 0 then return false, "needs the same number of ranks on every host" end
    return true
  end,
  chunks = function(n) return n end,
  cost = {
    steps = function(n, g) return 2 * (g - 1) + 2 * (n / g - 1) end,
    bytes = function(n, g)
      local h = n / g
      return 2 * (g - 1) / g + 2 * (h - 1) / n
    end,
  },
  build = function(s)
    local n, r, G = s.nranks, s.rank, s.ranks_per_host
    local H = n / G
    local li, hi = r % G, math.floor(r / G)
    for k = 0, n - 1 do s:copy(s.input(k), s.output(k)) end
    s:stage()
    local function block(b, f)  -- every chunk of block b
      for j = 0, H - 1 do f(s.output((b % G) * H + j)) end
    end
    local right, left = hi * G + (li + 1) % G, hi * G + (li - 1) % G
    -- 1. reduce-scatter inside the host: local rank li ends with block li+1
    for i = 0, G - 2 do
      block(li - i, function(c) s:send(right, c) end)
      block(li - i - 1, function(c) s:recv_reduce(left, c) end)
      s:stage()
    end
    -- 2. ring allreduce of block ob across hosts
    local ob = (li + 1) % G
    local up, down = ((hi + 1) % H) * G + li, ((hi - 1) % H) * G + li
    local function piece(j) return s.output(ob * H + j % H) end
    for i = 0, H - 2 do
      s:send(up, piece(hi - i))
      s:recv_reduce(down, piece(hi - i - 1))
      s:stage()
    end
    for i = 0, H - 2 do
      s:send(up, piece(hi + 1 - i))
      s:recv(down, piece(hi - i))
      s:stage()
    end
    -- 3. allgather inside the host
    for i = 0, G - 2 do
      block(li + 1 - i, function(c) s:send(right, c) end)
      block(li - i, function(c) s:recv(left, c) end)
      s:stage()
    end
  end,
}
