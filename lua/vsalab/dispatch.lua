-- Which sweep points this process measures, and in what order.
--
--   for i, c in dispatch.each(name, configs, estimate) do ... end
--
-- i is the point's position in configs (1-based), c the point. Alone, a
-- process takes every point in order (under --shard I/N: the points of
-- its slice, lua/vsalab/shard.lua). Under `vsalab run --devices` it is a
-- worker (vsalab.run.worker()): it sends the coordinator its plan (every
-- point's hash, estimated cost and definition) and then asks for one point
-- at a time, so each point goes to whichever GPU is free and the longest
-- go first (lua/vsalab/devices.lua holds the other side).
--
-- Protocol, lines over the worker's socket (fields separated by tabs):
--   worker: plan SEQ NAME N, then N lines "K HASH ESTIMATE POINT_JSON", end
--   worker: next SEQ             (also: the previous point is done)
--   coordinator: point K | done | abort WHY
-- SEQ counts the experiment runs of the script (1, 2, ...), so a script
-- that runs two sweeps is split sweep by sweep.
local core = require "vsalab.core"
local json = require "vsalab.json"
local run = require "vsalab.run"

local M = {}

local seq = 0
local inbuf = ""

local function send(fd, s)
  local ok, why = core.proc_write(fd, s)
  if not ok then error("worker: the coordinator is gone (" .. tostring(why) .. ")", 0) end
end

-- One line from the coordinator (blocking; a signal interrupts the read
-- and is raised by the interrupt hook when Lua runs again).
local function recv(fd)
  while not inbuf:find("\n", 1, true) do
    local s = core.proc_read(fd)
    if s == nil then error("worker: the coordinator is gone (end of its socket)", 0) end
    inbuf = inbuf .. s
  end
  local line, rest = inbuf:match("^([^\n]*)\n(.*)$")
  inbuf = rest
  return line
end

-- The default cost of a point, for longest-first: work grows with batch,
-- heads, head size and the selected fraction of the square of tokens.
function M.cost(c)
  local tokens = c.Sq
  if not tokens and type(c.latent) == "table" then
    tokens = 1
    for _, v in ipairs(c.latent) do tokens = tokens * v end
  end
  local skv = c.Skv or tokens or 1
  return (c.B or 1) * (c.H or 1) * (c.D or 128) * (tokens or 1) * skv * (c.density or 1)
end

function M.each(name, configs, estimate)
  -- --shard I/N: this slice only (experiment.run has already taken it, to
  -- count and print it; taking it twice changes nothing).
  configs = require("vsalab.shard").select((package.loaded.vsalab.context or {}).shard, configs)
  local w = run.worker()
  if not w then
    local i = 0
    return function()
      i = i + 1
      if configs[i] then return i, configs[i] end
    end
  end
  seq = seq + 1
  local my = seq
  local lines = {string.format("plan\t%d\t%s\t%d\n", my, name, #configs)}
  local point_of = require("vsalab.experiment").point_of
  for k, c in ipairs(configs) do
    local est = estimate and estimate(c) or M.cost(c)
    lines[#lines + 1] = string.format("%d\t%s\t%.17g\t%s\n", k, require("vsalab.experiment").hash_of(c),
      tonumber(est) or 0, json.encode(point_of(c)))
  end
  lines[#lines + 1] = "end\n"
  send(w.fd, table.concat(lines))
  return function()
    send(w.fd, string.format("next\t%d\n", my))
    local line = recv(w.fd)
    local k = line:match("^point\t(%d+)$")
    if k then
      k = tonumber(k)
      if not configs[k] then error("worker: the coordinator sent point " .. k .. " of " .. #configs, 0) end
      return k, configs[k]
    end
    if line == "done" then return nil end
    local why = line:match("^abort\t(.*)$")
    error("worker: " .. (why or ("unexpected message from the coordinator: " .. line)), 0)
  end
end

return M
