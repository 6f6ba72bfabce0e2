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
