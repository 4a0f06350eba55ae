return { name = "spin", op = "allreduce", chunks = 1,
  build = function(s) while true do end end }
