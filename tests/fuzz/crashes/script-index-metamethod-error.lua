local mt = { __index = function(t, k) return k end, __gc = function() while true do end end }
setmetatable(_G, mt)
return setmetatable({ name = "meta", op = "scatter" }, { __index = function(t, k) error("boom " .. k) end })
