-- Printing: aligned tables and a progress line.
local core = require "vsalab.core"

local M = {}

local function fmt(v, f)
  if v == nil then return "-" end
  -- glibc prints a NaN with its sign bit ("-nan"): a NaN has no sign to show.
  if type(v) == "number" and v ~= v then return "nan" end
  if f and type(v) == "number" then return string.format(f, v) end
  if type(v) == "boolean" then return v and "yes" or "NO" end
  return tostring(v)
end

-- Print rows (tables) as an aligned text table. columns: list of
-- {key=, title=, fmt='%.3f'}; numbers right-aligned.
function M.table(rows, columns, out)
  out = out or io.stdout
  local cells, widths = {}, {}
  for j, c in ipairs(columns) do widths[j] = #(c.title or c.key) end
  for i, r in ipairs(rows) do
    cells[i] = {}
    for j, c in ipairs(columns) do
      local s = fmt(r[c.key], c.fmt)
      cells[i][j] = s
      if #s > widths[j] then widths[j] = #s end
    end
  end
  local function line(vals, numeric)
    local parts = {}
    for j, v in ipairs(vals) do
      local w = widths[j]
      parts[j] = numeric[j] and string.rep(" ", w - #v) .. v or v .. string.rep(" ", w - #v)
    end
    out:write(table.concat(parts, "  "), "\n")
  end
  local head, numeric, rule = {}, {}, {}
  for j, c in ipairs(columns) do
    head[j] = c.title or c.key
    numeric[j] = c.fmt ~= nil
    rule[j] = string.rep("-", widths[j])
  end
  line(head, numeric)
  line(rule, numeric)
  for _, r in ipairs(cells) do line(r, numeric) end
end

-- A progress line on stderr: "\r" rewrites on a terminal, plain lines else.
local tty = nil
-- Why points were skipped, counted in order of first sight: add(why)
-- counts one; text() -> "4 × timeout after 1 s; 2 × ragged only at 50%
-- (filtered by the sweep)" ("" when none). What a run that measured
-- nothing says (vsalab.experiment.run, the --devices coordinator).
function M.reasons()
  local order, count = {}, {}
  return {
    add = function(why)
      if not count[why] then order[#order + 1] = why; count[why] = 0 end
      count[why] = count[why] + 1
    end,
    text = function()
      local t = {}
      for i, why in ipairs(order) do t[i] = count[why] .. " × " .. why end
      return table.concat(t, "; ")
    end,
  }
end

-- A fraction as a percentage in plain decimals, whatever its size
-- (1.234 -> "123%", 0.0123 -> "1.2%", 0.000123 -> "0.01%"): "%.2g" gave
-- "1.2e+02%" for the noise of a loaded host's samples.
function M.percent(fraction)
  local p = 100 * fraction
  if p ~= p or p == math.huge or p == -math.huge then return tostring(p) .. "%" end
  local digits = math.abs(p) >= 10 and 0 or math.abs(p) >= 1 and 1 or 2
  return string.format("%." .. digits .. "f%%", p)
end

M.nothing_measured = "every point was skipped, nothing was measured: "

function M.progress(i, n, text)
  if tty == nil then tty = core.isatty(2) end
  local msg = string.format("[%d/%d] %s", i, n, text)
  if tty then
    io.stderr:write("\r\27[K", msg)
    if i == n then io.stderr:write("\n") end
  else
    io.stderr:write(msg, "\n")
  end
  io.stderr:flush()
end

return M
