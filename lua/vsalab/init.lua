-- vsalab: the Lua side of the library.
--
-- The C core (vsalab.core: tensors, cuRAND, builders, inversion, reference
-- kernels, oracle, compare, timing, SQLite) is re-exported here unchanged;
-- the pure-Lua modules add statistics, checks, the backward registry, the
-- CASES runner, run bookkeeping and printing. README.md documents the API.
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
M.problem = require "vsalab.problem"
M.report = require "vsalab.report"
M.json = require "vsalab.json"

-- Lazily loaded: the case runner is only needed by tests.
setmetatable(M, {__index = function(t, k)
  if k == "cases" then
    local c = require "vsalab.cases"
    rawset(t, k, c)
    return c
  end
end})

return M
