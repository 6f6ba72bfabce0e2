-- The main-job flow shared by experiments/*.lua.
--
-- run{name=, device='cuda', sweep=sw (vsalab.sweep) or configs={...},
--     check=..., seed=, anchors=, kernels=, estimate=fn(point) -> cost}
-- kernels: the backward names to time and check ({name=true,...}, see
-- M.kernel_set); nil: every backward available on the device.
-- (estimate: a point's relative cost, for longest-first under --devices;
-- the sweep's own `estimate`, else vsalab.dispatch.cost).
-- For each point {B, H, D, latent={T,H,W} | Sq, density | topk, ragged,
-- lists='random' | 'vsa:ℓ'}:
--   build inputs with cuRAND and random top-k lists (or VSA-like lists from
--   correlated q, k: vsalab.problem), invert them (timed),
--   run the reference forward, then every backward available on the device:
--   time it (vsalab.bench, CUDA events), check it against the fp64 oracle
--   (check = 'full', or a spot check on sampled heads and blocks:
--   {bh=, q_blocks=, kv_blocks=}, see vsalab.check.spot_check), and commit a
--   result row. A failed check voids the row's speed figure (tflops NULL).
-- Each point's problem seed derives from the run seed and the point's stable
-- hash (not its position), so any row's inputs can be rebuilt alone.
-- Prints a progress line per step and a summary table; returns the rows.
--
-- The parts, each re-exported here: vsalab.experiment_args (what to sweep:
-- the script's arguments, kernels=), vsalab.experiment_identity (a point's hash, seed
-- and canonical fields), vsalab.experiment_point (running one point),
-- vsalab.power_cap (NVML readings, the retry under the power cap),
-- vsalab.experiment_summary (the closing table).
local core = require "vsalab.core"
local backends = require "vsalab.backends"
local report = require "vsalab.report"
local run = require "vsalab.run"
local dispatch = require "vsalab.dispatch"

local usage = require "vsalab.usage"

local M = {}
for _, part in ipairs{"experiment_args", "experiment_identity", "experiment_point", "power_cap",
    "experiment_summary"} do
  for k, v in pairs(require("vsalab." .. part)) do M[k] = v end
end

-- vsalab run --check: the arguments checked out; end the process with exit
-- 0 before anything needs the machine (a GPU), measures or opens the DB.
-- What slurm-sweep.sh runs on the login node before it submits anything.
local function check_done(name, what)
  io.stderr:write(name, ": --check: the arguments check out (", what, "); nothing was run\n")
  io.stderr:flush()
  os.exit(0)
end

local function checking()
  return (package.loaded.vsalab.context or {}).check
end

-- Stop (a usage error: exit 2, no traceback) unless a CUDA device is here:
-- "wan720p needs a CUDA device: no NVIDIA GPU or driver found". Under
-- --check the script's arguments were read by now: it stops there, exit 0.
function M.require_gpu(name)
  if checking() then check_done(name, "stopped before its GPU work") end
  local ok, why = core.cuda_available()
  if not ok then
    usage.error(name .. " needs a CUDA device: " .. tostring(why):gsub("^no CUDA device: ", ""))
  end
end

function M.run(e)
  local device = e.device or "cuda"
  -- What the tensors take (src/bindings/l_args.c): smoke's device=gpu is a typo,
  -- refused before --check says the arguments check out.
  if not (device == "cpu" or device == "cuda" or tostring(device):match("^cuda:%d+$")) then
    usage.error(string.format("argument 'device': expected cpu, cuda or cuda:N, got '%s'", tostring(device)))
  end
  local skipped = report.reasons()
  local desc, pts
  if e.sweep then
    desc, pts = e.sweep:describe()
    e.configs = {}
    for _, p in ipairs(pts) do
      if not p.skipped then e.configs[#e.configs + 1] = p end
    end
  end
  -- A bad -a value is refused before the plan is printed. So are two
  -- sweep points that become one when their lists are named canonically
  -- (-a lists=[vsa:2,vsa:2.0]): the same inputs measured twice, two rows
  -- of one point hash, of which compare and --resume see one.
  local seen = {}
  for _, c in ipairs(e.configs) do
    local given = c.lists
    M.check_point(M.normalise_lists(c))
    local h = e.sweep and M.hash_of(c)
    if h and seen[h] and seen[h] ~= (given or "random") then
      usage.error(string.format("argument 'lists': '%s' and '%s' are one list kind, so the sweep "
        .. "would measure its points twice: give each once", tostring(seen[h]), tostring(given)))
    end
    if h then seen[h] = given or "random" end
  end
  if pts then
    io.stderr:write(e.name, ": ", desc, "\n")
    for _, p in ipairs(pts) do
      if p.skipped then
        io.stderr:write("  skip ", p.hash, ": ", p.skipped, "\n")
        skipped.add(tostring(p.skipped) .. " (filtered by the sweep)")
      end
    end
  end
  local planned = #e.configs
  -- --shard I/N: this slice of the points only (lua/vsalab/shard.lua).
  local shard = (package.loaded.vsalab.context or {}).shard
  if shard then
    local all = #e.configs
    e.configs = require("vsalab.shard").select(shard, e.configs)
    io.stderr:write(string.format("%s: shard %d/%d: %d of %d points\n", e.name, shard.index,
      shard.count, #e.configs, all))
  end
  -- kernels= picked by name: each must run here, or the run would time
  -- nothing for it and still exit 0.
  local function check_kernels()
    if not e.kernels then return end
    for name in pairs(e.kernels) do
      local ok, why = backends.supported(name, device)
      -- It must also take at least one point's block size, layout and head
      -- dim (sm90a-v5 takes 128 only): otherwise --check passed and the run
      -- measured nothing for it. Points it alone cannot take get a skipped
      -- row saying why (experiment_point.lua).
      if ok and #e.configs > 0 then
        local first_why
        for _, c in ipairs(e.configs) do
          -- The point's fields (H, Sq, ...) with the defaults problem.build
          -- gives the three every kernel checks.
          local pok, pwhy = backends.supported(name, device, setmetatable(
            {block = c.block or 64, layout = c.layout or "bhsd", D = c.D or 128}, {__index = c}))
          if pok then first_why = nil break end
          first_why = first_why or pwhy
        end
        if first_why then ok, why = false, tostring(first_why) .. " (at every point of this run)" end
      end
      if not ok then
        -- A CUDA kernel named for an experiment's CPU points: say how to
        -- move them (on a host without a GPU, require_gpu then says so).
        if device == "cpu" and tostring(why):find("runs on CUDA tensors", 1, true) then
          -- device=cuda is the way only where a GPU is: say both at once.
          local gpu, no_gpu = core.cuda_available()
          why = string.format("%s runs on CUDA tensors and %s's points are on the CPU (%s)", name, e.name,
            gpu and "give device=cuda" or "and this host has no CUDA device: "
              .. tostring(no_gpu):gsub("^no CUDA device: ", ""))
        end
        usage.error("argument 'kernels': " .. name .. " cannot run here: " .. tostring(why))
      end
    end
  end
  -- CPU points need no GPU to know a CUDA kernel cannot take them: --check
  -- says so too (it passed, and the run then stopped with exit 2).
  if device == "cpu" then check_kernels() end
  -- A kernel of one block size (sm90a-v5: 128) named for points of
  -- another: known without a GPU, so --check says so on any host (after
  -- the CPU points' check: a device it cannot use is the first thing to fix).
  -- backends.fits is the kernel's own static check (its supported() asks
  -- it too), so the two cannot disagree.
  for name in pairs(e.kernels or {}) do
    local fit, why, need = #e.configs == 0, nil, nil
    for _, c in ipairs(e.configs) do
      local ok, w, n = backends.fits(name, c)
      if ok then fit = true break end
      why, need = why or w, need or n
    end
    if not fit then
      if need and need.block then
        usage.error(string.format("argument 'kernels': %s takes block %d only, and no point of this run "
          .. "has it (give -a block=[%d])", name, need.block, need.block))
      end
      usage.error("argument 'kernels': " .. tostring(why) .. " (at every point of this run)")
    end
  end
  if checking() then
    check_done(e.name, string.format("%d point%s to run", #e.configs, #e.configs == 1 and "" or "s"))
  end
  if device ~= "cpu" then
    M.require_gpu(e.name)
  else
    local timing = (package.loaded.vsalab.context or {}).timing
    if timing == "cold" or timing == "graph" then
      io.stderr:write(e.name, ": --timing ", timing, " applies to GPU points; these CPU points ",
        "time on the host clock (their rows say mode=hot)\n")
    end
  end
  if device ~= "cpu" then check_kernels() end
  -- Backends asked for by plugin= or peers= that cannot run here: say why.
  for _, b in ipairs(backends.list) do
    if b.origin and b.supported then
      local ok, why = b.supported(device)
      if not ok then io.stderr:write(e.name, ": ", b.name, " unavailable: ", tostring(why), "\n") end
      if e.kernels and not e.kernels[b.name] then
        io.stderr:write(e.name, ": ", b.name, " is registered but not picked by kernels=; ",
          "name it there to time it\n")
      end
    end
  end
  local seed = e.seed or 1
  local rows = {}
  local n = #e.configs
  local started = os.time()
  e.eta = function(i) -- "ETA 3m12s" from the time the finished points took
    if i <= 0 then return "" end
    local left = (os.time() - started) / i * (n - i)
    return string.format(", ETA %dm%02ds", math.floor(left / 60), math.floor(left % 60))
  end
  -- --resume: what the run already holds, per point hash and kernel.
  e.measured = run.measured(e.name)
  -- The bf16 GEMM ceiling in this run, so every figure has its % of it.
  if device ~= "cpu" and e.gemm ~= false and not (e.measured.gemm and e.measured.gemm.gemm_bf16) then
    local ok, g = pcall(core.gemm_ceiling)
    if ok then
      e.gemm = g.tflops
      run.log{experiment = e.name, kernel = "gemm_bf16", B = 1, Sq = g.n, Skv = g.n, D = g.n,
        ms_median = g.ms, tflops = g.tflops, point_hash = "gemm", mode = "hot",
        note = string.format("cuBLAS bf16 GEMM %d^3, fp32 accumulation: the ceiling", g.n)}
      io.stderr:write(string.format("%s: bf16 GEMM ceiling %.0f TFLOPS (n=%d)\n", e.name, g.tflops, g.n))
    else
      io.stderr:write(e.name, ": no GEMM ceiling measured: ", tostring(g), "\n")
    end
  end
  local timeout = (package.loaded.vsalab.context or {}).point_timeout
  -- Every point here, or under --devices the ones the coordinator hands
  -- this worker (lua/vsalab/dispatch.lua), longest first.
  local estimate = e.estimate or (e.sweep and e.sweep.estimate)
  local measured = 0 -- points that logged a backward (or, for a rerun of one, an inversion)
  local done = 0 -- points this run had measured already (--resume, a rerun's other kernels)
  for i, c in dispatch.each(e.name, e.configs, estimate) do
    if e.only_kernel then c.only_kernel = e.only_kernel end
    -- The timer is armed and disarmed inside the protected call, so a
    -- timeout can only be raised where it is caught.
    local before, outcome = #rows, nil
    local ok, err = pcall(function()
      if timeout then core.set_point_timeout(timeout) end
      outcome = M.run_config(e, i, c, device, seed, rows, n)
      if timeout then core.set_point_timeout(0) end
    end)
    -- Measured: a backward's row (or the inversion's, for a rerun of
    -- one), even when the point was given up on after it.
    -- A backend's skipped row (a plug-in or peer that does not take the
    -- point) is not a measurement: a run of only those must not pass.
    local got, skip_note = false, nil
    for k = before + 1, #rows do
      local kernel, note = rows[k].kernel, rows[k].note
      local skip_row = rows[k].passed == nil and type(note) == "string" and note:find("^skipped: ") ~= nil
      if skip_row then skip_note = skip_note or (kernel .. " " .. note) end
      got = got or (kernel ~= "config" and not skip_row and (kernel ~= "invert" or e.only_kernel == "invert"))
    end
    if outcome == "done" then done = done + 1
    elseif got then measured = measured + 1
    elseif ok then skipped.add(skip_note or ("no backward ran on " .. device .. " (none available for the point)")) end
    if timeout then core.set_point_timeout(0) end
    if not ok then
      -- Out of memory or the point timeout: log the point as skipped and go
      -- on. Anything else (a sticky CUDA error, an interrupt, a bug) ends
      -- the run, with every row measured so far already committed.
      local msg = tostring(err)
      local why
      if msg:find("cudaErrorMemoryAllocation", 1, true) or msg:find("out of host memory", 1, true) then
        why = "out of memory"
      elseif msg:find("point timeout!", 1, true) then
        why = string.format("timeout after %g s", timeout)
      else
        error(err, 0)
      end
      collectgarbage()
      -- The message without the hook's source position, so every skipped
      -- row reads the same whatever Lua line the timer interrupted.
      local first = msg:gsub("\n.*", ""):gsub("^[^:]*%.lua:%d+: ", "")
      local r = {experiment = e.name, kernel = "config", B = c.B, H = c.H, D = c.D,
        layout = c.layout, density = c.density, topk = c.topk, ragged = c.ragged and 1 or 0,
        point_hash = M.hash_of(c), extra = {point = M.point_of(c)},
        -- (the timer's own "point timeout!" adds nothing to the reason)
        note = "skipped (" .. why .. ")" .. (first:find("point timeout!", 1, true) and "" or ": " .. first)}
      r.id = run.log(r)
      rows[#rows + 1] = r
      report.progress(i, n, "skipped (" .. why .. ")")
      skipped.add(why)
    end
  end
  if shard and #e.configs == 0 then
    -- Where the table would be: an empty slice is said, not shown empty.
    print(string.format("%s: shard %d/%d holds none of the sweep's %d point%s (points go to shards by "
      .. "their hash): nothing to measure here; the other shards measure them", e.name, shard.index,
      shard.count, planned, planned == 1 and "" or "s"))
  else
    M.summary(rows, e.anchors, e.gemm)
  end
  -- Nothing measured: every point skipped (out of memory, the point
  -- timeout, no backward for it here) or filtered out. Such a run must not
  -- pass as finished with exit 0: it ends `failed` (exit 1) saying why,
  -- its skip rows kept. Not judged here in a --devices worker (the
  -- coordinator judges the whole run) nor in a shard whose own slice came
  -- up empty or skipped (the others may have measured): only a sweep with
  -- no point to run fails every shard.
  if measured == 0 and done == 0 and not run.worker() then
    local why = planned == 0 and #skipped.text() == 0 and "the experiment has no points" or skipped.text()
    if not (shard and planned > 0) then
      usage.fail(e.name .. ": " .. report.nothing_measured .. why)
    elseif #e.configs > 0 then
      io.stderr:write(string.format("%s: shard %d/%d: every point of this slice was skipped (%s); "
        .. "the other shards may have measured theirs\n", e.name, shard.index, shard.count, why))
    end
  end
  return rows
end

return M
