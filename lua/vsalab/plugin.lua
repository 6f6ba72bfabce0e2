-- Plug-in backwards: a shared library built against include/vsalab_plugin.h,
-- dlopened and registered as a backend (docs/peers.md, "Plug-in backends").
--
-- load{path=, symbol='vsalab_backward', name=, supported=function(device, p)
--   -> ok, why, description=, bench_opts=, user_data=} -> the backend.
-- Raises naming the problem: a missing file, a library without
-- vsalab_plugin_abi or built for another ABI version, a missing symbol.
-- The backend's run(p) validates and canonicalises p's lists (each row
-- ascending, q2k the transpose of k2q: the ABI's promise), NaN-fills fresh
-- bf16 outputs inside guard zones and calls the plug-in (a write outside an
-- output fails the point); timed(p, outs) reuses outs and lists
-- made once, so a CAPTURABLE plug-in's timed call queues only its own work,
-- and check_outs(outs) checks the zones once the timed calls are done.
-- A plug-in's error raises "backend NAME failed: MESSAGE (code N)": an
-- experiment logs the point as failed with that message and goes on.
local core = require "vsalab.core"
local paths = require "vsalab.paths"

local M = {}

M.default_symbol = "vsalab_backward"

-- Guard zones around each output of a checked call: GUARD bf16 elements
-- (4 KB) before and after it, filled with GUARD_VALUE. A plug-in that
-- writes past (or before) an output would corrupt vsalab's memory unseen;
-- a changed guard fails the point instead, naming the output. (Writes
-- further out than a zone go unseen: a zone is a tripwire, not a fence.)
M.GUARD = 2048
local GUARD_VALUE = -12352 -- exactly a bf16; no plausible gradient

-- Each guarded output (a view) -> {buf = the whole buffer, n = its
-- elements}: the timed calls write the outputs a checked call returned,
-- and check_outs finds their zones from the views. Weak keys: an output
-- freed or dropped takes its entry along.
local zones = setmetatable({}, {__mode = "k"})

-- A NaN-filled bf16 output of `shape` on dev inside its guard zones:
-- returns the output (a view) and the whole buffer.
local function guarded(shape, dev)
  local n = 1
  for _, x in ipairs(shape) do n = n * x end
  local buf = core.empty({n + 2 * M.GUARD}, {dtype = "bf16", device = dev}):fill(GUARD_VALUE)
  local out = buf:narrow(1, M.GUARD + 1, n):reshape(shape):fill(0 / 0)
  zones[out] = {buf = buf, n = n}
  return out, buf, n
end

-- Raise "backend NAME failed: wrote outside OUT ..." when a zone changed
-- (`when`: which calls, e.g. " in its timed calls").
local function check_guards(name, out, buf, n, when)
  for _, side in ipairs{{"before", 1}, {"after", M.GUARD + n + 1}} do
    local zone = buf:narrow(1, side[2], M.GUARD):to("cpu"):to_table()
    local changed = 0
    for _, x in ipairs(zone) do if x ~= GUARD_VALUE then changed = changed + 1 end end
    if changed > 0 then
      error(string.format("backend %s failed: wrote outside %s%s: %d of the %d bf16 elements %s it changed",
        name, out, when or "", changed, M.GUARD, side[1]), 0)
    end
  end
end

-- The SHA-256 of the library file (coreutils' sha256sum), or nil: stored
-- with each row's backend, so `vsalab rerun` can say when the library it
-- loads again is not the one that was measured. Read from stdin: for a
-- file name with a backslash or a newline sha256sum escapes its line
-- ("\HASH  NAME"), which hid the hash.
function M.file_sha256(path)
  local h = io.popen("sha256sum 2>/dev/null < '" .. tostring(path):gsub("'", "'\\''") .. "'")
  if not h then return nil end
  local line = h:read("*l")
  h:close()
  return line and line:match("^(%x+)")
end

-- "build/libmine.so" -> "mine"
local function stem(path)
  local base = path:match("([^/]+)$") or path
  return (base:gsub("^lib", ""):gsub("%.so[%.%d]*$", ""):gsub("%.dylib$", ""))
end

-- The backend name a plug-in gets without name=: "build/libmine.so" ->
-- "mine", or "mine.SYMBOL" for another symbol than the default.
function M.default_name(path, symbol)
  return (symbol or M.default_symbol) == M.default_symbol and stem(path) or stem(path) .. "." .. symbol
end

M.name_pattern = "^[%w_.:%-]+$"

-- The ABI's lists from p's: q2k by inverting k2q (validates every row),
-- k2q by inverting that back (ascending q blocks, width nq).
local function canonical(p)
  local qi, qn = core.invert_indices(p.k2q_idx, p.k2q_num, p.nq)
  local ki, kn = core.invert_indices(qi, qn, p.nkv)
  return qi, qn, ki, kn
end

-- vbs must lie in [0, block]: the plug-in indexes keys by it.
local function check_vbs(p)
  local v = p.vbs:to("cpu"):to_table()
  local block = p.block or 64
  for j, x in ipairs(v) do
    if x < 0 or x > block then
      error(string.format("variable_block_sizes: entry %d is %d, expected [0, %d]", j - 1, x, block), 0)
    end
  end
end

-- "64, 128" from a list.
local function listed(t)
  local words = {}
  for i, x in ipairs(t) do words[i] = tostring(x) end
  return table.concat(words, ", ")
end

function M.load(o)
  if type(o) ~= "table" then error("backends.load: expected a table {path=, symbol=, name=}", 2) end
  local known = {path = true, symbol = true, name = true, supported = true, description = true,
    bench_opts = true, user_data = true}
  for k in pairs(o) do
    if not known[k] then error("backends.load: unknown field '" .. tostring(k) .. "' (takes path, symbol, name, supported, description, bench_opts, user_data)", 2) end
  end
  if type(o.path) ~= "string" or o.path == "" then error("backends.load: field 'path' must name a shared library", 2) end
  local symbol = o.symbol or M.default_symbol
  if type(symbol) ~= "string" then error("backends.load: field 'symbol' must be a string", 2) end
  if o.supported ~= nil and type(o.supported) ~= "function" then
    error("backends.load: field 'supported' must be a function(device, p) -> ok, why", 2)
  end
  if o.user_data ~= nil and type(o.user_data) ~= "userdata" then
    error("backends.load: field 'user_data' must be a light userdata", 2)
  end
  local name = o.name or M.default_name(o.path, symbol)
  if type(name) ~= "string" or not name:match(M.name_pattern) then
    error("backends.load: field 'name' must be letters, digits and _ . : - (got " .. tostring(name) .. ")", 2)
  end
  local taken = require("vsalab.backends").reserved(name)
  if taken then error("backends.load: field 'name': " .. taken, 2) end
  local pl = core.plugin_open(o.path, symbol, name)
  local info = pl:info()
  local takes_block, takes_layout = {}, {}
  for _, b in ipairs(info.blocks) do takes_block[b] = true end
  for _, l in ipairs(info.layouts) do takes_layout[l] = true end
  local backends = require "vsalab.backends"
  local b = {
    name = name,
    description = o.description or string.format("plug-in %s:%s (ABI %d%s%s%s; blocks %s; %s)", o.path,
      symbol, info.abi_version, info.cpu and ", cpu" or "", info.cuda and ", cuda" or "",
      info.capturable and ", capturable" or "", listed(info.blocks), listed(info.layouts)),
    plugin = pl,
    -- A plug-in that may allocate or synchronise is neither captured nor
    -- timed on a held stream.
    capturable = info.capturable,
    -- What `vsalab rerun` needs to load it again.
    origin = {kind = "plugin", path = paths.absolute(o.path), symbol = symbol, name = name,
      sha256 = M.file_sha256(o.path)},
    bench_opts = o.bench_opts or backends.kernel_bench_opts,
    supported = function(device, p)
      -- The block sizes and layouts the library declared (ABI version 1:
      -- 64 and bhsd); the others get a skipped row.
      if p and p.block and not takes_block[p.block] then
        return false, string.format("block %s: not supported by this kernel (the plug-in takes %s)",
          tostring(p.block), listed(info.blocks))
      end
      if p and p.layout and not takes_layout[p.layout] then
        return false, string.format("layout %s: not supported by this kernel (the plug-in takes %s)",
          tostring(p.layout), listed(info.layouts))
      end
      if device == "cpu" and not info.cpu then return false, name .. " is a CUDA plug-in" end
      if device ~= "cpu" and not info.cuda then return false, name .. " is a CPU plug-in" end
      if o.supported then return o.supported(device, p) end
      return true
    end,
  }
  local ud = o.user_data
  b.run = function(p)
    check_vbs(p)
    local qi, qn, ki, kn = canonical(p)
    local dev = p.q.device
    local dq, bq, nq = guarded(p.q.shape, dev)
    local dk, bk, nk = guarded(p.k.shape, dev)
    local dv, bv = guarded(p.k.shape, dev)
    pl:backward(p.dO, p.q, p.k, p.v, p.o, p.lse, qi, qn, ki, kn, p.vbs, dq, dk, dv, p.sm_scale, ud,
      p.layout)
    for _, t in ipairs{qi, qn, ki, kn} do t:free() end
    check_guards(name, "dq", bq, nq)
    check_guards(name, "dk", bk, nk)
    check_guards(name, "dv", bv, nk)
    return dq, dk, dv
  end
  b.timed = function(p, outs)
    local qi, qn, ki, kn = canonical(p)
    return function()
      pl:backward(p.dO, p.q, p.k, p.v, p.o, p.lse, qi, qn, ki, kn, p.vbs, outs.dq, outs.dk,
        outs.dv, p.sm_scale, ud, p.layout)
    end
  end
  -- After the timed calls (vsalab.experiment): the zones around outs (the
  -- outputs run returned) unchanged, else raise as run does, naming the
  -- output. Outputs run did not make have no zones and are skipped.
  b.check_outs = function(outs)
    for _, out in ipairs{"dq", "dk", "dv"} do
      local z = outs[out] and zones[outs[out]]
      if z then check_guards(name, out, z.buf, z.n, " in its timed calls") end
    end
  end
  return backends.register(b)
end

return M
