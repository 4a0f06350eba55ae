-- build() never returns.
return {
  name = "endless_loop", op = "allreduce", chunks = 1,
  build = function(s)
    local x = 0
    while true do x = x + 1 end
  end,
}
