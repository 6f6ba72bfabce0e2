-- The registry of backward implementations.
--
-- Each entry: {name=, description=, supported=function(device) -> ok, why,
-- run=function(p, opts) -> dq, dk, dv, bench_opts={...}}, where p is a
-- problem (vsalab.problem.build) and dq, dk carry sm_scale. Experiments and
-- the CASES runner iterate over backends.available(device), so a new kernel
-- plugs in everywhere by one register{} call.
local core = require "vsalab.core"

local M = {list = {}}

function M.register(b)
  assert(type(b.name) == "string", "backend needs a name")
  assert(type(b.run) == "function", "backend needs run(p, opts)")
  for i, e in ipairs(M.list) do
    if e.name == b.name then M.list[i] = b; return b end
  end
  M.list[#M.list + 1] = b
  return b
end

function M.get(name)
  for _, b in ipairs(M.list) do if b.name == name then return b end end
  error("no backward named '" .. tostring(name) .. "'", 2)
end

-- Backends that run on device ('cpu' or 'cuda'), in registration order.
function M.available(device)
  local out = {}
  for _, b in ipairs(M.list) do
    local ok = true
    if b.supported then ok = b.supported(device) end
    if ok then out[#out + 1] = b end
  end
  return out
end

M.register{
  name = "reference",
  description = "fp32 SIMT reference (two passes, deterministic), CPU or GPU",
  supported = function(device) return true end,
  -- Slow by design: one timed call is enough at big shapes.
  bench_opts = {warmup = 0, repeats = 1},
  run = function(p, opts)
    opts = opts or {}
    return core.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx,
      p.k2q_num, p.vbs, {sm_scale = p.sm_scale, out_dtype = opts.out_dtype})
  end,
}

return M
