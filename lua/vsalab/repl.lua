-- What `vsalab repl` prints (src/cli/repl.c calls these): the results of a
-- line typed at the prompt, and `help`.
--
--   M.print(...)  each value on its line: a query result (db:q rows, which
--                 hold .columns) as an aligned table; any other table one
--                 level deep ({1, 2, x = {...}}: its fields, nested tables
--                 by their size), a table with __tostring as that says;
--                 everything else through tostring (tensors summarise
--                 themselves).
--   M.help        a value: typed alone (`help`) or called (`help()`), it
--                 prints what the prompt offers.
local M = {}

-- Fields shown of one table before "... (N more)".
M.max_fields = 40

-- A value inside a table printed one level deep: strings quoted, a nested
-- table by its size, the rest through tostring.
local function inner(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "table" and not (getmetatable(v) and rawget(getmetatable(v), "__tostring")) then
    local n = 0
    for _ in next, v do n = n + 1 end
    return n == 0 and "{}" or string.format("{...%d}", n)
  end
  return tostring(v)
end

local function key_text(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return k end
  return "[" .. inner(k) .. "]"
end

-- A table one level deep: the array part in order, then the other keys
-- sorted by their text; raw reads only (an __index never runs here).
function M.show_table(t)
  local parts, seen, n = {}, {}, 0
  local len = 0
  while rawget(t, len + 1) ~= nil do len = len + 1 end
  for i = 1, len do
    seen[i] = true
    n = n + 1
    if n <= M.max_fields then parts[#parts + 1] = inner(rawget(t, i)) end
  end
  local keys = {}
  for k in next, t do
    if not (type(k) == "number" and seen[k]) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return key_text(a) < key_text(b) end)
  for _, k in ipairs(keys) do
    n = n + 1
    if n <= M.max_fields then parts[#parts + 1] = key_text(k) .. " = " .. inner(rawget(t, k)) end
  end
  if n > M.max_fields then parts[#parts + 1] = string.format("... (%d more)", n - M.max_fields) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

function M.print(...)
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    local mt = type(v) == "table" and getmetatable(v)
    if type(v) == "table" and type(rawget(v, "columns")) == "table" then
      if #v == 0 then print(string.format("(no rows; columns: %s)", table.concat(v.columns, ", ")))
      else require("vsalab.query").print_rows(v, v.columns, "table") end
    elseif type(v) == "table" and not (type(mt) == "table" and rawget(mt, "__tostring")) then
      print(M.show_table(v))
    else
      print(v)
    end
  end
end

M.text = [[
vsalab REPL: LuaJIT with the `vsalab` module loaded (the API: docs/lua-api.md).
  vsalab.<Tab>           the module's functions and modules; Tab completes any table's fields
  t = vsalab.zeros({2, 3})   tensors: zeros, full, empty, from_table; t:to('cuda'), t:to_table()
  t:<Tab>, t.<Tab>       a tensor's methods (t:fill(...)), its properties (t.shape, t.dtype)
  p = vsalab.problem.build{B = 1, H = 2, latent = {6, 7, 9}, D = 64, density = 0.5, device = 'cpu', seed = 1}
                         a problem's inputs and block lists, as the experiments build them
  db:q("SELECT id, script, status FROM run")   the results DB (--db), read-only, as a table
  vsalab.backends.available('cpu')             the backwards that run here
  =expr or expr          print a value (tables one level deep); statements run as typed
  Ctrl-C stops a running line, Ctrl-D leaves; `vsalab help` lists the commands.]]

M.help = setmetatable({}, {
  __tostring = function() return M.text end,
  __call = function() print(M.text) end,
})

return M
