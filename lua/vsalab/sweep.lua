-- Sweeps: the points an experiment measures, declared as axes.
--
--   local sweep = require "vsalab.sweep"
--   local sw = sweep.new{
--     axes = {
--       {"H", {40, 12}},                        -- a list
--       {"density", sweep.range(0.1, 0.5, 0.2)},-- start, stop (inclusive), step
--       {"tokens", sweep.pow2(12, 17)},         -- 2^12 .. 2^17
--     },
--     zip = {{"latent", "label"}, {{21,45,80}, "720p"}, {{21,30,52}, "480p"}},
--     fixed = {B = 1, D = 128},
--     skip = function(pt) if pt.H > 16 and pt.tokens > 65536 then return "too big" end end,
--     estimate = function(pt) return pt.H * pt.tokens^2 end,  -- optional: relative cost
--   }
--   sw:override(arg)   -- apply -a name=... from the command line
--   for _, pt in ipairs(sw:points()) do ... end
--
-- Points are the cartesian product of the axes (first axis slowest), times
-- each row of a zipped group (coupled parameters that move together), plus
-- the fixed parameters. Each point has a stable `hash` (FNV-1a of its
-- sorted key=value text: the same point gets the same hash in every run).
-- Command-line overrides use nvbench's grammar:
--   -a name=value   -a name=[v1,v2,...]   -a name=[start:stop]
--   -a name=[start:stop:step]   -a name[pow2]=[10:20]   (2^10 .. 2^20)
-- An override of an unknown axis, or of a zipped one, is an error.
local bit = require "bit"
local usage = require "vsalab.usage"

local M = {}
local Sweep = {}
Sweep.__index = Sweep

-- The most values one axis may take (a typo like [0:1e7:1e-9] must fail,
-- not fill the memory).
M.max_values = 100000

local function finite(x) return type(x) == "number" and x == x and x > -math.huge and x < math.huge end

-- The values of [start:stop:step], or nil and why (the range unnamed: the
-- caller names it as the user wrote it).
local function range_values(start, stop, step)
  if not (finite(start) and finite(stop) and finite(step)) then
    return nil, "bounds and step must be finite numbers"
  end
  if not (step > 0) then return nil, "step must be positive" end
  local t = {}
  -- Rounded to 12 significant digits, so 0.1 steps give 1.0, not
  -- 0.9999999999999998 (a point's hash depends on the exact value).
  local n = math.floor((stop - start) / step + 1e-9)
  if n + 1 > M.max_values then
    -- The count exact where it can be: %.4g said "1e+05 values, more than 100000".
    local count = n + 1 < 2 ^ 53 and string.format("%d", n + 1) or string.format("%.4g", n + 1)
    return nil, string.format("has %s values, more than %d", count, M.max_values)
  end
  for i = 0, n do t[#t + 1] = tonumber(string.format("%.12g", start + i * step)) end
  return t
end

function M.range(start, stop, step)
  step = step or 1
  local t, why = range_values(start, stop, step)
  if t then return t end
  local r = string.format("[%s:%s:%s]", tostring(start), tostring(stop), tostring(step))
  if why:find("^has ") then error("range: " .. r .. " " .. why, 0) end
  if why:find("^bounds") then error("range: " .. why .. ", got " .. r, 0) end
  error("range: " .. why, 0)
end

function M.pow2(lo, hi)
  if not (finite(lo) and finite(hi) and hi - lo < M.max_values) then
    error(string.format("pow2: exponents must be finite with at most %d values, got %s..%s",
      M.max_values, tostring(lo), tostring(hi)), 0)
  end
  local t = {}
  for e = lo, hi do t[#t + 1] = 2 ^ e end
  return t
end

local function fnv1a(s)
  local h = 2166136261
  for i = 1, #s do
    h = bit.bxor(h, s:byte(i))
    h = bit.tobit(h * 16777619 % 4294967296)
  end
  return bit.tohex(h)
end

local function value_text(v)
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = value_text(x) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  if type(v) == "number" then return string.format("%.17g", v) end
  return tostring(v)
end

-- The stable hash of a point (ignores the `hash` key itself).
-- block = 64 (the default block size) and layout = 'bhsd' (the default
-- layout) are left out, so a point keeps the hash (and problem seed) it
-- had before sweeps had a block or a layout axis.
local hash_defaults = {block = 64, layout = "bhsd"}
function M.hash(pt)
  local keys = {}
  for k in pairs(pt) do
    if k ~= "hash" and not (hash_defaults[k] ~= nil and pt[k] == hash_defaults[k]) then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = k .. "=" .. value_text(pt[k]) end
  return fnv1a(table.concat(parts, ";"))
end

function M.new(spec)
  local sw = setmetatable({axes = {}, zip = nil, fixed = spec.fixed or {}, skip = spec.skip,
    estimate = spec.estimate}, Sweep)
  assert(spec.estimate == nil or type(spec.estimate) == "function",
    "sweep: estimate must be a function(point) -> relative cost")
  for _, a in ipairs(spec.axes or {}) do
    assert(type(a[1]) == "string" and type(a[2]) == "table" and #a[2] > 0,
      "sweep: each axis is {name, {values...}}")
    sw.axes[#sw.axes + 1] = {name = a[1], values = a[2]}
  end
  -- The axes as declared, before any -a: what a script's --help lists.
  sw.declared = {}
  for i, ax in ipairs(sw.axes) do
    local l = {}
    for k, v in ipairs(ax.values) do l[k] = type(v) == "number" and string.format("%.15g", v) or tostring(v) end
    sw.declared[i] = ax.name .. "=[" .. table.concat(l, ",") .. "]"
  end
  if spec.zip then
    sw.zip = {names = spec.zip[1], rows = {}}
    for i = 2, #spec.zip do
      assert(#spec.zip[i] == #spec.zip[1], "sweep: a zip row needs one value per name")
      sw.zip.rows[#sw.zip.rows + 1] = spec.zip[i]
    end
  end
  return sw
end

-- Parse one override value in nvbench's grammar.
local function parse_values(text, pow2)
  local inner = text:match("^%[(.*)%]$")
  local vals = {}
  if not inner and text:find("[%[%]]") then
    error("sweep: unbalanced brackets in '" .. text .. "' (a list is [a,b,...], a range [start:stop:step])", 0)
  end
  -- Spaces around a value are no part of it ("-a 'lists=[random, vsa:2]'"),
  -- as in kernels=: kept, " vsa:2" hashed and filtered as another point.
  local function value(x)
    x = x:match("^%s*(.-)%s*$")
    if x == "" then error("sweep: an empty value in '" .. text .. "'", 0) end
    return tonumber(x) or x
  end
  if not inner then
    vals[1] = value(text)
  elseif inner:match("^%s*$") then
    error("sweep: no values in '" .. text .. "'", 0)
  else
    local a, b, c = inner:match("^([^:,]+):([^:,]+):?([^:,]*)$")
    -- A range starts with a number; [vsa:4] is a list of one name.
    if a and tonumber(a) then
      local start, stop, step = tonumber(a), tonumber(b), c == "" and 1 or tonumber(c)
      if not (start and stop and step and step > 0) then
        local why = not stop and "the end is not a number" or not step and "the step is not a number"
          or "the step must be positive"
        error("sweep: bad range '" .. text .. "': " .. why, 0)
      end
      local r, why = range_values(start, stop, step)
      if not r then error("sweep: bad range '" .. text .. "': " .. why, 0) end
      if #r == 0 then error("sweep: no values in '" .. text .. "' (a range counts up from its start to its end)", 0) end
      vals = r
    else
      for x in (inner .. ","):gmatch("([^,]*),") do vals[#vals + 1] = value(x) end
    end
  end
  if #vals == 0 then error("sweep: no values in '" .. text .. "'", 0) end
  for _, v in ipairs(vals) do
    if type(v) == "number" and not finite(v) then
      error("sweep: value " .. tostring(v) .. " in '" .. text .. "' is not a finite number", 0)
    end
    if pow2 and type(v) == "number" and v ~= math.floor(v) then
      error("sweep: pow2 exponent " .. tostring(v) .. " is not an integer", 0)
    end
  end
  local seen = {}
  for _, v in ipairs(vals) do -- the same point twice would be measured twice
    if seen[v] then error("sweep: value " .. tostring(v) .. " listed twice in '" .. text .. "'", 0) end
    seen[v] = true
  end
  if pow2 then
    for i, v in ipairs(vals) do
      if type(v) ~= "number" then error("sweep: pow2 needs numbers, got '" .. tostring(v) .. "'", 0) end
      if not (v >= -1074 and v <= 1023) then error("sweep: pow2 exponent " .. tostring(v) .. " out of range", 0) end
      vals[i] = 2 ^ v
    end
  end
  return vals
end

-- Problem-shape axes (vsalab.problem.build's B, H, Sq, Skv, density) take
-- what the build and the list builders accept (B, H in [1, 65535]; at most
-- 2^24 blocks of 64 tokens; density in (0, 1]). A value given with -a
-- outside that is a typo, refused by name and with its -a before any run
-- row (vsalab.experiment.check_point refuses a script's own density the
-- same way). Points that scripts and reruns build do not come through -a
-- and stay the build's to refuse (their runs end failed).
M.shape_axes = {
  B = {lo = 1, hi = 65535, what = "an integer in [1, 65535]"},
  H = {lo = 1, hi = 65535, what = "an integer in [1, 65535]"},
  Sq = {lo = 64, hi = 2^30, step = 64, what = "a multiple of 64 in [64, 2^30]"},
  Skv = {lo = 64, hi = 2^30, step = 64, what = "a multiple of 64 in [64, 2^30]"},
  -- Not an integer: problem.build's fraction of kv blocks each q block keeps.
  density = {fraction = true, what = "a number in (0, 1]"},
  -- Tokens per block: one of the sizes src/core/block_size.c lists.
  block = {set = require("vsalab.blocks").sizes,
    what = "a block size (" .. require("vsalab.blocks").text() .. ")"},
  -- Token layouts: vsalab.layouts.
  layout = {set = require("vsalab.layouts").names,
    what = "a layout (" .. require("vsalab.layouts").text() .. ")"},
}

local function check_shape(name, v, spec)
  local s = M.shape_axes[name]
  if not s then return end
  local ok
  if s.fraction then ok = type(v) == "number" and v > 0 and v <= 1
  elseif s.set then
    ok = false
    for _, x in ipairs(s.set) do ok = ok or v == x end
  else
    ok = type(v) == "number" and v == math.floor(v) and v >= s.lo and v <= s.hi and v % (s.step or 1) == 0
  end
  if not ok then
    error(string.format("argument '%s': expected %s, got %s (-a %s)", name, s.what,
      tostring(v), spec), 0)
  end
end

-- The sweep whose override returned these arguments, for exp.args: its
-- --help lists the sweep's axes, and `H=40` there wants `-a H=40`.
M.of_args = setmetatable({}, {__mode = "k"})

-- Apply "-a name=values" pairs found in argv (the script's arg table);
-- returns the arguments that are not overrides. A malformed override is a
-- usage error (vsalab.usage: exit 2, no traceback).
local override
function Sweep:override(argv)
  return usage.wrap(override, self, argv)
end

function override(self, argv)
  local rest = {}
  local seen = {} -- axis name -> the -a that set it
  local i = 1
  while argv and i <= #argv do
    local a = argv[i]
    local spec
    if a == "-a" or a == "--axis" then
      spec = argv[i + 1]
      if not spec then error("sweep: " .. a .. " needs name=values", 0) end
      i = i + 2
    elseif a:match("^%-a.") then
      spec = a:sub(3)
      i = i + 1
    else
      rest[#rest + 1] = a
      i = i + 1
    end
    if spec then
      local name, flag, vals = spec:match("^([%w_]+)(%[?%w*%]?)=(.+)$")
      if not name and spec:match("^[%w_]+%[?%w*%]?=$") then
        error("sweep: -a " .. spec .. " gives the axis no values (e.g. -a " .. spec .. "[v1,v2])", 0)
      end
      if not name then error("sweep: override '" .. spec .. "': expected name=values", 0) end
      if flag ~= "" and flag ~= "[pow2]" then
        error("sweep: unknown axis flag " .. flag .. " in -a " .. spec .. " (the only axis flag is [pow2], e.g. -a Sq[pow2]=[12:17])", 0)
      end
      local axis
      for _, ax in ipairs(self.axes) do if ax.name == name then axis = ax end end
      if not axis then
        local known = {}
        for _, ax in ipairs(self.axes) do known[#known + 1] = ax.name end
        error("sweep: no axis '" .. name .. "'" .. require("vsalab.usage").did_you_mean(name, known)
          .. " (axes: " .. table.concat(known, ", ") .. ")", 0)
      end
      -- Values without brackets are one value: a comma means a list was meant.
      if vals:find(",", 1, true) and not vals:find("[%[%]]") then
        error(string.format("sweep: -a %s: a list is written in brackets: -a '%s=[%s]'", spec, name .. flag, vals), 0)
      end
      -- Its values' errors name the axis and the -a given, as the checks below do.
      local okv, values = pcall(parse_values, vals, flag == "[pow2]")
      if not okv then
        error(tostring(values):gsub("^sweep: ", "sweep: axis '" .. name .. "': ", 1) .. " in -a " .. spec, 0)
      end
      -- A numeric axis takes numbers only: 'density=abc' fails here, by
      -- name, not deep inside the run.
      local numeric = #axis.values > 0
      for _, v in ipairs(axis.values) do numeric = numeric and type(v) == "number" end
      if numeric then
        for _, v in ipairs(values) do
          if type(v) ~= "number" then
            error(string.format("sweep: axis '%s' takes numbers, got '%s' in -a %s", name, tostring(v), spec), 0)
          end
        end
      end
      for _, v in ipairs(values) do check_shape(name, v, spec) end
      -- A second -a for one axis would silently replace the first: refused,
      -- as either reading (the union, the last) could be what was meant.
      if seen[name] then
        error(string.format("sweep: axis '%s' is set twice (-a %s, then -a %s); give its values in one "
          .. "list: -a '%s=[v1,v2]'", name, seen[name], spec, name), 0)
      end
      seen[name] = spec
      axis.values = values
    end
  end
  M.of_args[rest] = self
  return rest
end

-- All points (skipped ones included, with .skipped = reason), in order.
-- The most points one sweep may expand to.
M.max_points = 1000000

function Sweep:points()
  local out = {}
  local zrows = self.zip and self.zip.rows or {{}}
  local total = #zrows
  for _, ax in ipairs(self.axes) do total = total * #ax.values end
  if total > M.max_points then
    usage.error(string.format("sweep: %.0f points, more than %d (narrow an axis)", total, M.max_points))
  end
  local function rec(d, pt)
    if d > #self.axes then
      for _, zr in ipairs(zrows) do
        local p = {}
        for k, v in pairs(self.fixed) do p[k] = v end
        for k, v in pairs(pt) do p[k] = v end
        if self.zip then
          for j, name in ipairs(self.zip.names) do p[name] = zr[j] end
        end
        p.hash = M.hash(p)
        if self.skip then
          local why = self.skip(p)
          -- `return true` is a natural "skip it": the reason is printed and
          -- logged as text (a boolean reached io.write as it was).
          if why == true then p.skipped = "skipped by the sweep"
          elseif why then p.skipped = tostring(why) end
        end
        out[#out + 1] = p
      end
      return
    end
    local ax = self.axes[d]
    for _, v in ipairs(ax.values) do
      pt[ax.name] = v
      rec(d + 1, pt)
    end
    pt[ax.name] = nil
  end
  rec(1, {})
  return out
end

-- "N points to run, M skipped" (+ an estimate given seconds_per_point(pt)),
-- and the points.
function Sweep:describe(seconds_per_point)
  local pts = self:points()
  local run, skipped, est = 0, 0, 0
  for _, p in ipairs(pts) do
    if p.skipped then skipped = skipped + 1
    else
      run = run + 1
      if seconds_per_point then est = est + seconds_per_point(p) end
    end
  end
  local s = string.format("%d point%s to run, %d skipped", run, run == 1 and "" or "s", skipped)
  if seconds_per_point then s = s .. string.format(", about %.0f s", est) end
  return s, pts
end

return M
