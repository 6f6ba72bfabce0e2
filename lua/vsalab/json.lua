-- Minimal JSON encoder for DB columns (args, extra): nil, booleans, numbers,
-- strings, arrays (1..n) and string-keyed tables (keys sorted, so the text is
-- stable). NaN and infinities become null.
local M = {}

-- A value that encodes as null inside arrays and objects.
M.null = setmetatable({}, {__tostring = function() return "null" end})

-- A finite number as the shortest of %.15g, %.16g and %.17g that reads back
-- as the same double: 0.1 stays 0.1, not 0.10000000000000001.
function M.shortest(v)
  for _, f in ipairs{"%.15g", "%.16g"} do
    local s = string.format(f, v)
    if tonumber(s) == v then return s end
  end
  return string.format("%.17g", v)
end

local escapes = {['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b',
  ['\f'] = '\\f', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t'}

-- s with each byte that is not part of a well-formed UTF-8 sequence
-- (RFC 3629: no overlongs, surrogates or code points past U+10FFFF)
-- replaced by U+FFFD, so the output is valid JSON whatever a DB column
-- holds (SQLite stores any bytes as TEXT).
local function utf8_clean(s)
  if not s:find("[\128-\255]") then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = s:byte(i)
    local len, lo, hi = 0, 0x80, 0xBF
    if c < 0x80 then len = 1
    elseif c >= 0xC2 and c <= 0xDF then len = 2
    elseif c >= 0xE0 and c <= 0xEF then
      len = 3
      if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then
      len = 4
      if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
    end
    local ok = len > 0 and i + len - 1 <= n
    for k = 1, len - 1 do
      if not ok then break end
      local b = s:byte(i + k)
      if k == 1 then ok = b >= lo and b <= hi else ok = b >= 0x80 and b <= 0xBF end
    end
    if ok then
      out[#out + 1] = s:sub(i, i + len - 1)
      i = i + len
    else
      out[#out + 1] = "\239\191\189"
      i = i + 1
    end
  end
  return table.concat(out)
end

local function encode_string(s)
  return '"' .. utf8_clean(s):gsub('[%c"\\]', function(c)
    return escapes[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function encode(v, depth)
  if depth > 32 then error("json: nesting deeper than 32", 0) end
  local t = type(v)
  -- (type first: a cdata pointer compared with M.null by == reads as NULL)
  if t == "nil" or (t == "table" and v == M.null) then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    if v == math.floor(v) and math.abs(v) < 2^53 then
      return string.format("%d", v)
    end
    return M.shortest(v)
  end
  if t == "string" then return encode_string(v) end
  if t == "table" then
    -- An array only when the keys are exactly 1..n; else an object.
    local n, count = #v, 0
    for _ in pairs(v) do count = count + 1 end
    if count == n then
      local parts = {}
      for i = 1, n do parts[i] = encode(v[i], depth + 1) end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys, seen = {}, {}
    for k in pairs(v) do
      -- Object keys are names: a table, function or userdata key would be
      -- written as its address.
      if type(k) ~= "string" and type(k) ~= "number" then
        error("json: cannot encode a " .. type(k) .. " as an object key", 0)
      end
      -- A number key as a number value is written (2^60 and 2^60 + 1024
      -- differ at 17 digits, not at tostring's 14).
      local name = type(k) == "number" and encode(k, depth + 1) or k
      if seen[name] then error("json: two keys both read as '" .. name .. "'", 0) end
      seen[name] = true
      keys[#keys + 1] = {name = name, key = k}
    end
    table.sort(keys, function(a, b) return a.name < b.name end)
    local parts = {}
    for _, e in ipairs(keys) do
      parts[#parts + 1] = encode_string(e.name) .. ":" .. encode(v[e.key], depth + 1)
    end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  -- A function, coroutine, userdata or cdata has no value to write
  -- ("function: builtin#29", "userdata: 0x..." are addresses, not data):
  -- an error, not a misleading string.
  error("json: cannot encode a " .. t, 0)
end

function M.encode(v) return encode(v, 0) end

-- JSON text -> Lua values, parsed by SQLite's JSON1 (json_each) on an
-- in-memory database: objects and arrays become tables (arrays 1-based),
-- null becomes nil. Raises on malformed text.
local function decode_at(db, text, path)
  local t = {}
  for _, r in ipairs(db:q("SELECT key, value, type FROM json_each(?, ?)", text, path)) do
    local key, v = r.key, r.value
    local sub = type(key) == "number" and string.format("%s[%d]", path, key)
      or (path .. "." .. '"' .. key .. '"')
    if r.type == "object" or r.type == "array" then v = decode_at(db, text, sub)
    elseif r.type == "true" then v = true
    elseif r.type == "false" then v = false
    elseif r.type == "null" then v = nil end
    t[type(key) == "number" and key + 1 or key] = v
  end
  return t
end

function M.decode(text)
  if type(text) ~= "string" then error("json: cannot parse a " .. type(text) .. " (expected JSON text)", 0) end
  if not text:find("%S") then error("json: cannot parse an empty text", 0) end
  -- SQLite reads up to a NUL: "[1]\0garbage" would parse as [1].
  if text:find("\0", 1, true) then error("json: cannot parse: a NUL byte in the text", 0) end
  local core = require "vsalab.core"
  local db = core.db_open(":memory:")
  local ok, res = pcall(function()
    local kind = db:q("SELECT json_type(?) AS t", text)[1].t
    if kind == "object" or kind == "array" then return decode_at(db, text, "$") end
    return db:q("SELECT json_extract(?, '$') AS v", text)[1].v
  end)
  db:close()
  -- SQLite's words without its internals (the in-memory DB, the SQL).
  if not ok then error("json: cannot parse: " .. tostring(res):gsub("^.-malformed JSON.*$", "malformed JSON"), 0) end
  return res
end

return M
