-- A script with a syntax error on line 4.
return {
  name = "syntax_error", op = "allreduce", chunks = 1,
  build = function(s) s:copy(s.input(0) s.output(0)) end,
}
