return setmetatable({}, { __index = function(t, k) error("boom " .. k) end })
