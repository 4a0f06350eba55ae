local function f(n) return f(n + 1) + 1 end
return { name = "rec", op = "reduce", chunks = 1, build = function(s) f(1) end }
