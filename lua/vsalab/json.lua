-- Minimal JSON encoder for DB columns (args, extra): nil, booleans, numbers,
-- strings, arrays (1..n) and string-keyed tables (keys sorted, so the text is
-- stable). NaN and infinities become null.
local M = {}

-- A value that encodes as null inside arrays and objects.
M.null = setmetatable({}, {__tostring = function() return "null" end})

local escapes = {['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b',
  ['\f'] = '\\f', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t'}

local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return escapes[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function encode(v, depth)
  if depth > 32 then error("json: nesting deeper than 32", 0) end
  local t = type(v)
  if t == "nil" or v == M.null then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    if v == math.floor(v) and math.abs(v) < 2^53 then
      return string.format("%d", v)
    end
    return string.format("%.17g", v)
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
      local name = tostring(k)
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
  return encode_string(tostring(v))
end

function M.encode(v) return encode(v, 0) end

return M
