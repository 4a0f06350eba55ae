-- Tries to open a file from build().
return {
  name = "escape_io", op = "allreduce", chunks = 1,
  build = function(s) local f = io.open("/etc/passwd") end,
}
