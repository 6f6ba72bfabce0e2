-- Usage errors: the user's mistake (a bad script argument, a DB path that
-- cannot be opened, too many query values), not a bug in vsalab.
--
--   local usage = require "vsalab.usage"
--   usage.error("sweep: no axis 'foo' (axes: H, density)")
--
-- raises a table {usage = true, message = text} (tostring gives the text).
-- The host prints the message without a traceback and exits 2
-- (docs/cli.md, "Exit status"); pcall, tostring and string matching on it
-- work as on a plain message. usage.wrap(fn, ...) calls fn and turns a
-- plain string error into a usage error (for checks written with error()).
-- usage.did_you_mean(word, names) suggests the nearest name of a typo.
local M = {}

local mt = {__tostring = function(e) return e.message end}
mt.__concat = function(a, b) return tostring(a) .. tostring(b) end

function M.error(message)
  error(setmetatable({usage = true, message = tostring(message)}, mt), 0)
end

-- usage.fail(message): a runtime failure that is the user's to read, not a
-- bug in a script (an experiment that measured nothing): raises {plain =
-- true, message = text}; the host prints the message without a traceback
-- and exits 1.
function M.fail(message)
  error(setmetatable({plain = true, message = tostring(message)}, mt), 0)
end

-- Levenshtein distance between strings a and b (bytes; case counts).
function M.distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = {[0] = i}
    local ca = a:byte(i)
    for j = 1, #b do
      local cost = ca == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

-- " (did you mean 'NAME'?)" for the candidate nearest to word, when a
-- typo's distance away (at most 1 edit for short words, a third of the
-- word's length for longer ones; a case slip counts as none), else "".
-- candidates: a list of strings.
function M.did_you_mean(word, candidates)
  word = tostring(word)
  local best, best_d
  for _, c in ipairs(candidates or {}) do
    c = tostring(c)
    local d = c:lower() == word:lower() and 0 or M.distance(word, c)
    if c ~= word and (not best_d or d < best_d) then best, best_d = c, d end
  end
  if best and best_d <= math.max(1, math.floor(#word / 3)) then
    return " (did you mean '" .. best .. "'?)"
  end
  return ""
end

function M.is(e)
  return type(e) == "table" and e.usage == true
end

local function pass(ok, ...)
  if ok then return ... end
  local e = ...
  if M.is(e) then error(e, 0) end
  M.error(tostring(e):gsub("^[^:\n]*%.lua:%d+: ", ""))
end

function M.wrap(fn, ...)
  return pass(pcall(fn, ...))
end

return M
