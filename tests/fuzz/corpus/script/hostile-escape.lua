local ok = pcall(function() return io.open("/etc/passwd") end)
local f = load or loadstring
local g = getfenv and getfenv(0)
return { name = "esc", op = "broadcast", chunks = function(n) return os.time() end,
  build = function(s) require("ffi") end }
