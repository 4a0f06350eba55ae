-- build() keeps every string it makes.
return {
  name = "memory_hog", op = "allreduce", chunks = 1,
  build = function(s)
    local t = {}
    for i = 1, 1e9 do t[i] = string.rep("x", 1000) .. i end
  end,
}
