-- vsalab: the Lua side of the library.
--
-- The C core (vsalab.core: tensors, cuRAND, builders, inversion, reference
-- kernels, oracle, compare, timing, SQLite) is re-exported here unchanged;
-- the pure-Lua modules add statistics, checks, the backward registry, the
-- CASES runner, run bookkeeping and printing. docs/lua-api.md documents the API.
local core = require "vsalab.core"

local M = {}
for k, v in pairs(core) do M[k] = v end

local bench = require "vsalab.bench"
M.bench = bench.bench
M.stats = bench.stats
M.tflops = bench.tflops
M.pair_flops = bench.pair_flops

local check = require "vsalab.check"
M.check = check
M.check_outputs = check.check_outputs
M.cosine = check.cosine

local run = require "vsalab.run"
M.run = run.current
M.log = run.log
M.run_finish = run.finish

M.backends = require "vsalab.backends"

-- The device of tensor t (argument `what` of fn), raising a named error for
-- a non-tensor or a freed one.
local function device_of(fn, what, t)
  if not core.is_tensor(t) then error(fn .. ": " .. what .. " must be a tensor, got " .. type(t), 3) end
  local ok, dev = pcall(function() return t.device end)
  if not ok then error(fn .. ": " .. what .. ": " .. tostring(dev):gsub("^[^:]*%.lua:%d+: ", ""), 3) end
  return dev
end

-- block_of(k, vbs, opts) -> block, why: the block size the backward will
-- see, Skv (k's token dimension: 3 in bhsd, 2 in bshd, from opts.layout)
-- over vbs's length, as the references derive it. why is nil when backward
-- takes that size, else says why not (vbs's length does not divide Skv,
-- or the size is not in the block table). block is nil when k or vbs is
-- missing or malformed (the backward itself then names the bad argument).
-- Raises nothing for a live k and vbs (a freed one: its own error).
-- backward and backward_supported both derive it here, so they agree.
local blocks = require "vsalab.blocks"
local function block_of(k, vbs, opts)
  local sdim = type(opts) == "table" and opts.layout == "bshd" and 2 or 3
  if not (core.is_tensor(k) and k.ndim == 4 and core.is_tensor(vbs) and vbs.ndim == 1 and vbs.shape[1] > 0) then
    return nil
  end
  local block = k.shape[sdim] / vbs.shape[1]
  if block ~= math.floor(block) then
    return block, string.format("vbs has %d entries, which do not divide k's %d tokens into blocks",
      vbs.shape[1], k.shape[sdim])
  end
  if not blocks.supported(block) then
    return block, string.format("block %d (k's tokens over vbs's length) is not supported (supported: %s)",
      block, blocks.text())
  end
  return block
end

-- backward_supported(name, q [, k [, vbs [, opts]]]) -> ok, why: can
-- backward `name` ('reference', 'sm90a', 'sm90a-v5', 'sm100a', ...) take
-- these tensors on their device? The block size comes from k and vbs as in
-- backward (64 when they are not given), the layout from opts.layout.
-- Decided from shapes, dtypes and the device, never tensor contents: what
-- backward would refuse on those grounds is `false, why` here too.
function M.backward_supported(name, q, k, vbs, opts)
  if not pcall(M.backends.get, name) then
    local known = {}
    for _, b in ipairs(M.backends.list) do known[#known + 1] = b.name end
    error("backward_supported: name: no backward '" .. tostring(name) .. "' (known: "
      .. table.concat(known, ", ") .. ")", 2)
  end
  local qdev = device_of("backward_supported", "q", q)
  local device = qdev == "cpu" and "cpu" or "cuda"
  if opts ~= nil and type(opts) ~= "table" then return false, "opts must be a table, got " .. type(opts) end
  local layouts = require "vsalab.layouts"
  local layout = opts and opts.layout or layouts.default
  if not layouts.supported(layout) then
    return false, "layout '" .. tostring(layout) .. "' is not supported (supported: " .. layouts.text() .. ")"
  end
  local dims, sdim = layouts.dims(layout), layout == "bshd" and 2 or 3
  local function tensor4(what, t)
    if t.dtype ~= "bf16" or t.ndim ~= 4 then return what .. " must be a bf16 " .. dims .. " tensor" end
  end
  local why = tensor4("q", q)
  if why then return false, why end
  local block = 64
  if k ~= nil then
    local kdev = device_of("backward_supported", "k", k)
    if kdev ~= qdev then return false, "k is on " .. kdev .. ", q on " .. qdev end
    why = tensor4("k", k)
    if why then return false, why end
    if vbs ~= nil then
      local vdev = device_of("backward_supported", "vbs", vbs)
      if vdev ~= qdev then return false, "vbs is on " .. vdev .. ", q on " .. qdev end
      if vbs.dtype ~= "i32" or vbs.ndim ~= 1 or vbs.shape[1] == 0 then
        return false, "vbs must be a non-empty i32 vector, one entry a kv block"
      end
      block, why = block_of(k, vbs, opts)
      if why then return false, why end
    end
  elseif vbs ~= nil then
    return false, "vbs given without k (the block size is k's token count over vbs's length)"
  end
  for what, t in pairs{q = q, k = k} do
    if t.shape[sdim] % block ~= 0 then
      return false, string.format("%s: %d tokens (dim %d in %s) is not a multiple of block %d", what,
        t.shape[sdim], sdim, layout, block)
    end
  end
  return M.backends.supported(name, device, {D = q.shape[4], block = block, layout = layout})
end

-- backward(dO, q, k, v, o, lse, k2q_idx, k2q_num, vbs [, opts]) -> dq, dk,
-- dv, name: the native kernel for the device (sm90a on compute capability
-- 9.0, sm100a on 10.x: compiled and emulated, never run on Blackwell here)
-- when it takes these shapes and this block size, the reference otherwise;
-- `name` says which one ran.
function M.backward(dO, q, k, v, o, lse, k2q_idx, k2q_num, vbs, opts)
  local device = device_of("backward", "q", q) == "cpu" and "cpu" or "cuda"
  -- A block size backward does not take still goes to pick: the native
  -- kernels refuse it, so the reference runs and names the bad vbs.
  local block = block_of(k, vbs, opts)
  local b = M.backends.pick(device, {D = q.shape[4], block = block,
    layout = type(opts) == "table" and opts.layout or nil})
  local fn = b.name == "reference" and core.backward_ref or core["backward_" .. b.name]
  -- Called here, the binding's error took this line's position ("init.lua:80:
  -- dO: ..."): raised at backward's caller instead, naming backward.
  local ok, dq, dk, dv = pcall(fn, dO, q, k, v, o, lse, k2q_idx, k2q_num, vbs, opts)
  if not ok then error("backward: " .. tostring(dq), 2) end
  return dq, dk, dv, b.name
end
M.problem = require "vsalab.problem"
M.report = require "vsalab.report"
M.json = require "vsalab.json"
M.sweep = require "vsalab.sweep"

-- Lazily loaded: the case runner is only needed by tests; the experiment
-- flow (vsalab.experiment.run, as docs/experiments.md names it) by scripts that
-- sweep, and it requires modules that read vsalab.context.
local lazy = {cases = "vsalab.cases", experiment = "vsalab.experiment"}
setmetatable(M, {__complete = {"cases", "experiment"}, __index = function(t, k)
  if lazy[k] then
    local c = require(lazy[k])
    rawset(t, k, c)
    return c
  end
end})

return M
