-- Minimal JSON encoder for DB columns (args, extra): nil, booleans, numbers,
-- strings, arrays (1..n) and string-keyed tables (keys sorted, so the text is
-- stable). NaN and infinities become null.
local M = {}

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
  if t == "nil" then return "null" end
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
    local n = #v
    if n > 0 or next(v) == nil then
      local parts = {}
      for i = 1, n do parts[i] = encode(v[i], depth + 1) end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do
      parts[#parts + 1] = encode_string(k) .. ":" .. encode(v[k], depth + 1)
    end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return encode_string(tostring(v))
end

function M.encode(v) return encode(v, 0) end

return M
