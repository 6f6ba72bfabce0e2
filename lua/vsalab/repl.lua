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

-- The __tostring of v's metatable, if any. A protected metatable
-- (__metatable = "locked") is what getmetatable returns: not a table.
local function tostring_method(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__tostring") or nil
end

-- tostring(v), or what went wrong when its __tostring raises or returns
-- no string: one bad value must not hide the rest of a table.
local function safe_tostring(v)
  local ok, s = pcall(tostring, v)
  if ok and (type(s) == "string" or type(s) == "number") then return tostring(s) end
  return string.format("<%s: __tostring %s>", type(v),
    ok and ("returned a " .. type(s)) or ("raised: " .. tostring(s)))
end

-- A value inside a table printed one level deep: strings quoted, a nested
-- table by its size, the rest through tostring.
local function inner(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "table" and not tostring_method(v) then
    local n = 0
    for _ in next, v do n = n + 1 end
    return n == 0 and "{}" or string.format("{...%d}", n)
  end
  return safe_tostring(v)
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

-- A query result (db:q rows): its .columns a non-empty list of names.
-- Any other table with a `columns` field is shown as a table.
local function is_rows(v)
  local c = rawget(v, "columns")
  if type(c) ~= "table" or #c == 0 then return false end
  for _, name in ipairs(c) do
    if type(name) ~= "string" then return false end
  end
  -- Rows of SQL values: text, numbers, booleans, NULL (nil).
  local sql = {string = true, number = true, boolean = true, ["nil"] = true}
  for _, row in ipairs(v) do
    if type(row) ~= "table" then return false end
    for _, name in ipairs(c) do
      if not sql[type(rawget(row, name))] then return false end
    end
  end
  return true
end

function M.print(...)
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) == "table" and is_rows(v) then
      if #v == 0 then print(string.format("(no rows; columns: %s)", table.concat(v.columns, ", ")))
      else require("vsalab.query").print_rows(v, v.columns, "table") end
    elseif type(v) == "table" and not tostring_method(v) then
      print(M.show_table(v))
    else
      print(safe_tostring(v))
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
  for _, b in ipairs(vsalab.backends.available('cpu')) do print(b.name) end
                         the backwards that run here
  =expr or expr          print a value (tables one level deep); statements run as typed
  Ctrl-C stops a running line, Ctrl-D leaves; `vsalab help` lists the commands.]]

M.help = setmetatable({}, {
  __tostring = function() return M.text end,
  __call = function() print(M.text) end,
})

return M
