-- The run row: opened on first use, closed by the host when the script ends.
--
-- vsalab.run() opens the results DB (vsalab.context.db_path, from --db) and
-- begins a run row capturing the environment: GPU, capability, SM count,
-- driver and runtime, host, pid, project revision, script, args, seed. Each
-- vsalab.log(row) commits one result row at once, so a run that dies keeps
-- every finished row (its status stays 'running', ended_at NULL). The host
-- calls vsalab.run_finish(status, err) after the script: 'finished',
-- 'failed' or 'interrupted'. Scripts that never log open no DB.
local core = require "vsalab.core"
local json = require "vsalab.json"

local M = {}
local state = nil -- {db=, id=}

local function context()
  local v = package.loaded.vsalab
  return (v and v.context) or {}
end

-- The environment of this run, as run-table columns.
function M.environment()
  local ctx = context()
  local env = {
    script = ctx.script, args = json.encode(ctx.args or {}),
    seed = ctx.seed, host = ctx.host, pid = ctx.pid,
    git_rev = core.git_rev, vsalab_version = core.version,
    runtime_version = core.runtime_version(),
    device_index = ctx.device,
  }
  local ok, avail = pcall(core.cuda_available)
  if ok and avail then
    local d = core.device_info()
    env.gpu_name, env.gpu_cc, env.sm_count = d.name, d.cc, d.sm_count
    env.driver_version = d.driver
  end
  return env
end

function M.current()
  if state then return state end
  local path = context().db_path or "results.db"
  local db = core.db_open(path)
  local id = db:begin_run(M.environment())
  state = {db = db, id = id, path = path}
  return state
end

-- Commit one result row (a table of result columns plus errors={...}).
function M.log(row)
  local r = M.current()
  local t = {}
  for k, v in pairs(row) do t[k] = v end
  t.run_id = r.id
  -- A failed check voids the speed figure: never store TFLOPS of a wrong output.
  if t.passed == false or t.passed == 0 then t.tflops = nil end
  if type(t.extra) == "table" then t.extra = json.encode(t.extra) end
  -- result_error keeps these per output; other keys (tol, sums) stay out.
  if t.errors then
    local errs = {}
    for name, e in pairs(t.errors) do
      errs[name] = {rel_l2 = e.rel_l2, max_abs = e.max_abs,
        nonfinite = e.nonfinite, norm_ratio = e.norm_ratio,
        passed = e.passed}
    end
    t.errors = errs
  end
  return r.db:log(t)
end

function M.finish(status, err)
  if not state then return end
  state.db:end_run(state.id, status, err)
  state.db:close()
  state = nil
end

return M
