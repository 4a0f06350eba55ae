-- Tries to load a module.
local ffi = require("ffi")
return { name = "escape_require", op = "allreduce", chunks = 1, build = function(s) end }
