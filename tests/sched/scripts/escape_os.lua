-- Tries to run a command while loading.
os.execute("touch /tmp/flagcx-sandbox-escaped")
return { name = "escape_os", op = "allreduce", chunks = 1, build = function(s) end }
