-- The arguments of an experiment script (part of vsalab.experiment, which
-- re-exports everything here): its key=value arguments and their --help,
-- the options every experiment takes (plugin=, peers=), integer checks,
-- and the set of kernels it times (kernels=).
local backends = require "vsalab.backends"
local usage = require "vsalab.usage"

local M = {}

-- Options every experiment takes (M.args applies them): plugin=PATH
-- loads a plug-in backward (plugin_symbol=, default vsalab_backward;
-- plugin_name=, default from the file name), peers=NAME[,NAME] registers
-- external peers (vsalab.backends.peer: triton, cudnn_bsa, fa4, numpy, lua-ref).
M.common_args = {plugin = true, plugin_symbol = true, plugin_name = true, peers = true}

local function apply_common(c)
  local backends = require "vsalab.backends"
  if c.plugin then
    -- A plug-in that cannot be loaded is the user's mistake: exit 2, no
    -- traceback, naming the argument (not backends.load's fields).
    local plugin = require "vsalab.plugin"
    local path, symbol = tostring(c.plugin), c.plugin_symbol and tostring(c.plugin_symbol)
    local name = c.plugin_name and tostring(c.plugin_name)
    if path == "" then usage.error("argument 'plugin': expected the path of a shared library (plugin=build/libmine.so)") end
    if name and not name:match(plugin.name_pattern) then
      usage.error("argument 'plugin_name': letters, digits and _ . : - only, got '" .. name .. "'")
    end
    local derived = plugin.default_name(path, symbol)
    if not name and not derived:match(plugin.name_pattern) then
      usage.error("argument 'plugin': the backend name from its file name, '" .. derived
        .. "', is not letters, digits and _ . : - only: give plugin_name=NAME")
    end
    local taken = backends.reserved(name or derived)
    if taken and name then usage.error("argument 'plugin_name': " .. taken) end
    if taken then
      usage.error("argument 'plugin': the backend name from its file name, " .. taken:gsub(": pick another name$", "")
        .. ": give plugin_name=NAME")
    end
    usage.wrap(backends.load, {path = path, symbol = symbol, name = name})
  elseif c.plugin_symbol or c.plugin_name then
    usage.error("argument 'plugin_symbol'/'plugin_name': give plugin=PATH too")
  end
  if c.peers then
    local names = type(c.peers) == "table" and c.peers or {c.peers}
    for _, n in ipairs(names) do
      local okp, e = pcall(backends.peer, tostring(n))
      if not okp then
        usage.error("argument 'peers': " .. tostring(e):gsub("^[^:\n]*%.lua:%d+: ", ""):gsub("^peers: ", ""))
      end
      -- Asked for by name: a file or python module it lacks is the user's
      -- to provide, not a warning before a run that times nothing for it.
      local why = require("vsalab.external").missing(tostring(n))
      if why then usage.error("argument 'peers': " .. why) end
    end
  end
end

-- Parse script arguments "key=value" (values: numbers or comma lists); a
-- malformed or unknown one is a usage error (exit 2, no traceback).
-- `vsalab run SCRIPT --help`: the script's own header comment (its
-- usage), then its arguments and their defaults; exit 0 before anything
-- runs (no DB, no GPU).
local function script_help(defaults, sw)
  local ctx = package.loaded.vsalab.context or {}
  local f = ctx.script and io.open(ctx.script)
  if f then
    for line in f:lines() do
      local text = line:match("^%-%-+ ?(.*)$")
      if not text and not line:match("^#!") then break end
      if text then print(text) end
    end
    f:close()
  end
  local names = {}
  for k in pairs(defaults or {}) do names[#names + 1] = k end
  table.sort(names)
  print("arguments (key=value, after the script), with their defaults:")
  for _, k in ipairs(names) do
    local v = defaults[k]
    local text = tostring(v)
    if type(v) == "table" then
      local parts = {}
      for i, x in ipairs(v) do parts[i] = tostring(x) end
      text = table.concat(parts, ",")
    end
    print(string.format("  %s=%s", k, text))
  end
  print("and every experiment's: plugin=PATH, plugin_symbol=NAME, plugin_name=NAME, peers=NAME[,NAME];")
  -- sw: the script's sweep, when its arguments came through sw:override.
  if sw and #sw.declared > 0 then
    print("the sweep's axes, with their defaults (-a AXIS=[v1,v2,...] overrides one; any number):")
    for _, line in ipairs(sw.declared) do print("  " .. line) end
  else
    print("(no sweep: this script takes no -a AXIS=[...])")
  end
  io.stdout:flush()
  os.exit(0)
end

function M.args(argv, defaults)
  local o, common = {}, {}
  local given = {} -- key -> the key=value that set it
  -- The script's sweep, when argv is what its sw:override returned.
  local sw = argv and require("vsalab.sweep").of_args[argv]
  for k, v in pairs(defaults or {}) do o[k] = v end
  for _, a in ipairs(argv or {}) do
    if a == "--help" or a == "-h" then script_help(defaults, sw) end
    local k, v = a:match("^([%w_]+)=(.*)$")
    if not k and a:match("^%-%-") then
      usage.error("argument '" .. a .. "': vsalab's options go before the script "
        .. "(vsalab run [options] SCRIPT [key=value ...])")
    end
    if not k and a == "-a" and not sw then
      usage.error("argument '-a': this script has no sweep, so no axis to override (--help lists its arguments)")
    end
    if not k then usage.error("argument '" .. a .. "': expected key=value") end
    if defaults and defaults[k] == nil and not M.common_args[k] then
      for _, ax in ipairs(sw and sw.axes or {}) do
        if ax.name == k then usage.error("argument '" .. k .. "': " .. k .. " is an axis of the sweep: give it as -a " .. a) end
      end
      local known = {}
      for name in pairs(defaults) do known[#known + 1] = name end
      for name in pairs(M.common_args) do known[#known + 1] = name end
      table.sort(known)
      usage.error("argument '" .. k .. "': unknown" .. usage.did_you_mean(k, known)
        .. " (known: " .. table.concat(known, ", ") .. ")")
    end
    -- A second key=value for one key replaced the first unsaid (as a
    -- second -a did): a list is one argument, kernels=a,b.
    if given[k] then
      usage.error(string.format("argument '%s': given twice ('%s', then '%s'); a list is one argument: %s=a,b",
        k, given[k], a, k))
    end
    given[k] = a
    local dst = (M.common_args[k] and not (defaults and defaults[k] ~= nil)) and common or o
    if k == "plugin" then
      dst[k] = v -- a path, never a number or a list
    elseif v:find(",") or type(defaults and defaults[k]) == "table" then
      local l = {}
      for x in (v .. ","):gmatch("([^,]*),") do
        -- "kernels=," or "a,,b": an empty element is a typo, not a no-op.
        if not x:find("%S") then
          usage.error("argument '" .. k .. "': empty element in '" .. v .. "' (a list is a,b,c)")
        end
        l[#l + 1] = tonumber(x) or x
      end
      dst[k] = l
    else
      dst[k] = tonumber(v) or v
    end
  end
  apply_common(common)
  return o
end

-- An integer key=value argument in [lo, hi] (hi: none when nil). Counts
-- such as check_heads are first read deep in a GPU run, after its inputs
-- are built: a word or a 0 must fail here, where --check sees it.
function M.int_arg(a, name, lo, hi)
  local v = a[name]
  if not (type(v) == "number" and v == math.floor(v) and v >= lo and v <= (hi or 2^53)) then
    usage.error(string.format("argument '%s': expected an integer %s, got '%s'", name,
      hi and string.format("in [%d, %d]", lo, hi) or string.format(">= %d", lo),
      type(v) == "table" and table.concat(v, ",") or tostring(v)))
  end
  return v
end

-- The kernels an experiment times, from its `kernels=` argument: nil or
-- "default" the native backward of the device (backends.pick: sm90a on
-- an H100/H200, the reference elsewhere) and the known peers asked for
-- with peers=NAME; "all" every backward available
-- (variants and the reference included: nil is returned); otherwise a name
-- or a list of names (each must be registered). with_reference adds the
-- reference as a timed row. Returns a set {name = true} or nil (all).
function M.kernel_set(device, spec, with_reference)
  if spec == "all" then return nil end
  local set = {}
  if spec == nil or spec == "default" then
    local ok, b = pcall(backends.pick, device == "cpu" and "cpu" or "cuda", {D = 128})
    set[ok and b.name or "reference"] = true
    -- Known peers registered (peers=NAME) were asked for by name: they
    -- join the default set, beside the native backward.
    local known = require("vsalab.external").peers
    for _, r in ipairs(backends.list) do
      if r.origin and r.origin.kind == "external" and known[r.name] then set[r.name] = true end
    end
  else
    local names = type(spec) == "table" and spec or {spec}
    for _, raw in ipairs(names) do
      local name = tostring(raw):match("^%s*(.-)%s*$")
      if name == "all" or name == "default" then
        usage.error("argument 'kernels': '" .. name .. "' stands alone; it cannot be listed with names")
      end
      local okg = pcall(backends.get, name)
      -- The deterministic variants became the defaults (2026-12-04):
      -- sm90a-det is sm90a, sm90a-v4-det sm90a-v4.
      local was = not okg and name:match("^(sm90a.-)%-det$")
      if was and pcall(backends.get, was) then
        usage.error("argument 'kernels': '" .. name .. "' is now '" .. was .. "' (fixed-point dQ, the "
          .. "same bits every run, is the default; the fp32 mode is '" .. was .. "-fp32')")
      end
      if not okg then
        local known = {}
        for _, b in ipairs(backends.list) do known[#known + 1] = b.name end
        usage.error("argument 'kernels': no backward '" .. name .. "'" .. usage.did_you_mean(name, known) .. " (known: "
          .. table.concat(known, ", ") .. "; or all / default alone; an external peer needs "
          .. "peers=NAME too)")
      end
      set[name] = true
    end
  end
  if with_reference then set.reference = true end
  return set
end

return M
