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
local core = require "vsalab.core"
local bench = require "vsalab.bench"
local check = require "vsalab.check"
local backends = require "vsalab.backends"
local problem = require "vsalab.problem"
local report = require "vsalab.report"
local run = require "vsalab.run"
local dispatch = require "vsalab.dispatch"

local usage = require "vsalab.usage"

local M = {}

-- Options every experiment takes (M.args applies them): plugin=PATH
-- loads a plug-in backward (plugin_symbol=, default vsalab_backward;
-- plugin_name=, default from the file name), peers=NAME[,NAME] registers
-- external peers (vsalab.backends.peer: triton, numpy, lua-ref).
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
    print("-a AXIS=[v1,v2,...] (any number) overrides an axis of the sweep; a bad one lists the axes")
  end
  io.stdout:flush()
  os.exit(0)
end

function M.args(argv, defaults)
  local o, common = {}, {}
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
    if not k then usage.error("argument '" .. a .. "': expected key=value") end
    if defaults and defaults[k] == nil and not M.common_args[k] then
      for _, ax in ipairs(sw and sw.axes or {}) do
        if ax.name == k then usage.error("argument '" .. k .. "': " .. k .. " is an axis of the sweep: give it as -a " .. a) end
      end
      local known = {}
      for name in pairs(defaults) do known[#known + 1] = name end
      for name in pairs(M.common_args) do known[#known + 1] = name end
      table.sort(known)
      usage.error("argument '" .. k .. "': unknown (known: " .. table.concat(known, ", ") .. ")")
    end
    local dst = (M.common_args[k] and not (defaults and defaults[k] ~= nil)) and common or o
    if k == "plugin" then
      dst[k] = v -- a path, never a number or a list
    elseif v:find(",") or type(defaults and defaults[k]) == "table" then
      local l = {}
      for x in v:gmatch("[^,]+") do l[#l + 1] = tonumber(x) or x end
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

local function shape_of(c, p)
  return string.format("B%d H%d S%d D%d %.0f%%%s%s", p.B, p.H, p.Sq, p.D,
    100 * p.density, c.ragged and " ragged" or "",
    p.lists ~= "random" and " " .. p.lists or "")
end

local function base_row(name, c, p)
  return {experiment = name, B = p.B, H = p.H, Sq = p.Sq, Skv = p.Skv,
    D = p.D, block = 64, density = p.density, topk = p.topk,
    ragged = c.ragged and 1 or 0, pairs = p.pairs}
end

local function timing(row, st)
  row.ms_median, row.ms_min, row.ms_max = st.median, st.min, st.max
  row.spread, row.samples = st.spread, st.samples
  row.ms_p20, row.ms_p80, row.rel_stddev = st.p20, st.p80, st.rel_stddev
  row.mode = st.mode or "hot"
end

-- Problem seed of a point: low 20 bits of the run seed, then low 20 bits of
-- the point hash (exact in a double, below 2^40).
function M.point_seed(run_seed, hash)
  return (run_seed % 2^20) * 2^20 + tonumber(hash, 16) % 2^20
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
      if not okg then
        local known = {}
        for _, b in ipairs(backends.list) do known[#known + 1] = b.name end
        usage.error("argument 'kernels': no backward '" .. name .. "' (known: "
          .. table.concat(known, ", ") .. "; or all / default alone; an external peer needs "
          .. "peers=NAME too)")
      end
      set[name] = true
    end
  end
  if with_reference then set.reference = true end
  return set
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

-- A point's `lists` in canonical form ('vsa:4', not 'vsa:4.0'), and absent
-- for random lists, so the points that existed before the lists axis keep
-- their hash (hence their seed and inputs). Raises on an unknown kind.
function M.normalise_lists(c)
  if c.lists == nil then return c end
  local ok, kind_or_err, _, name = pcall(problem.parse_lists, c.lists)
  if not ok then
    local msg = tostring(kind_or_err):gsub("^lists: ", "")
    usage.error("argument 'lists': " .. msg)
  end
  if name == "random" then name = nil end
  if name ~= c.lists then
    c.lists = name
    if c.hash then c.hash = require("vsalab.sweep").hash(M.point_of(c)) end
  end
  return c
end

-- A point's density that problem.build would reject (src/bindings/l_bsa.c: (0, 1]
-- unless topk is given), raised as a usage error naming the argument before
-- anything is built or logged: `-a density=2` is a typo, not a failed run.
-- (Other fields stay the build's to refuse: scripts and reruns build
-- failing points on purpose, and those runs must end `failed`.)
function M.check_point(c)
  if c.density ~= nil and c.topk == nil
      and not (type(c.density) == "number" and c.density > 0 and c.density <= 1) then
    usage.error(string.format("argument 'density': expected a number in (0, 1], got %s",
      tostring(c.density)))
  end
  return c
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
    local got = false
    for k = before + 1, #rows do
      local kernel = rows[k].kernel
      got = got or (kernel ~= "config" and (kernel ~= "invert" or e.only_kernel == "invert"))
    end
    if outcome == "done" then done = done + 1
    elseif got then measured = measured + 1
    elseif ok then skipped.add("no backward ran on " .. device .. " (none available for the point)") end
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
        density = c.density, topk = c.topk, ragged = c.ragged and 1 or 0,
        point_hash = M.hash_of(c), extra = {point = M.point_of(c)},
        -- (the timer's own "point timeout!" adds nothing to the reason)
        note = "skipped (" .. why .. ")" .. (first:find("point timeout!", 1, true) and "" or ": " .. first)}
      r.id = run.log(r)
      rows[#rows + 1] = r
      report.progress(i, n, "skipped (" .. why .. ")")
      skipped.add(why)
    end
  end
  M.summary(rows, e.anchors, e.gemm)
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

-- The fields of config c that define the point (what its hash covers).
function M.point_of(c)
  local meta = {skip = true, hash = true, skipped = true, only_kernel = true}
  local pt = {}
  for k, v in pairs(c) do if not meta[k] then pt[k] = v end end
  return pt
end

-- The stable hash of config c (the sweep's, or computed from its point).
function M.hash_of(c)
  return c.hash or require("vsalab.sweep").hash(M.point_of(c))
end

-- Power and thermal capping during a timed burst. The H200 holds 1980 MHz
-- for a short burst, but a backward at its power edge (sm90a-det at 16k)
-- meets the 700 W cap within tens of milliseconds, depending on how the
-- card's power controller stands when the burst starts: the same point then
-- times 1.49 to 1.64 ms in different processes (kernels/NOTES.md, "Timing
-- under the power cap"). NVML's violation counters say how long a limiter
-- held the clocks down during the burst. A burst capped for at least
-- cap_fraction of its time (shorter violations are routine under GPU Boost
-- and move a median by far less than compare's 2% floor) is timed again
-- after a pause (nvbench discards throttled samples the same way), at most
-- cap_retries times, unless it lasted over cap_retry_max_s: that much
-- back-to-back work meets the cap from a cool start too (16k calls from idle
-- held ~1680 MHz within 0.3 s). The least capped burst is kept; its row has
-- throttled = 1 when it was still capped.
M.cap_retries, M.cap_recovery_ms, M.cap_retry_max_s, M.cap_fraction = 2, 500, 0.25, 0.01

-- Milliseconds the power or thermal limit held the clocks below the
-- application clocks between NVML readings c0 and c1 (vsalab.gpu_clocks),
-- each counter's growth clamped at 0; nil when NVML gives neither counter.
function M.capped_ms(c0, c1)
  if not (c0 and c1) then return nil end
  local ms
  for _, k in ipairs{"power_capped_ms", "thermal_capped_ms"} do
    if c0[k] and c1[k] then ms = (ms or 0) + math.max(c1[k] - c0[k], 0) end
  end
  return ms and math.floor(ms * 100 + 0.5) / 100
end

-- Whether a limiter slowed the burst between readings c0 and c1: capped
-- for cap_fraction of its time by the counters, or, without counters, a
-- slowdown reason active at either end (NVML's instantaneous reasons).
function M.was_capped(c0, c1)
  local ms = M.capped_ms(c0, c1)
  if ms then
    local dt = c0.time_s and c1.time_s and c1.time_s - c0.time_s
    if not (dt and dt > 0) then return ms > 0 end
    return ms >= M.cap_fraction * 1000 * dt
  end
  return (c0 and c0.throttled or c1 and c1.throttled) and true or false
end

-- A peer's own NVML readings around its samples (timing.json's
-- extra.nvml = {before=, after=}, tests/peers/vsalab_peer.py nvml_reading)
-- in place of the counters vsalab read around the whole peer process, its
-- start-up included. Taken when both readings hold a finite time_s, in
-- order and inside vsalab's (one monotonic clock); then a counter comes from
-- the peer when both readings hold it as a finite number that grew by no
-- more than vsalab's own reading of it around the whole peer, and is dropped
-- otherwise (never mixed with vsalab's, which span another interval): the
-- counters only grow, so readings that say otherwise (swapped, another
-- GPU's, garbage) would log nonsense watts or capped time. The SM clock and
-- the reasons stay vsalab's. Returns c0, c1.
function M.peer_readings(c0, c1, nv)
  local r0, r1 = type(nv) == "table" and nv.before, type(nv) == "table" and nv.after
  if not (c0 and c1 and type(r0) == "table" and type(r1) == "table") then return c0, c1 end
  local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end
  -- The growth of counter k from x0 to x1: finite and >= 0, else nil.
  local function growth(x0, x1, k)
    local d = finite(x0[k]) and finite(x1[k]) and x1[k] - x0[k]
    return d and d >= 0 and d < math.huge and d or nil
  end
  local t, tv = growth(r0, r1, "time_s"), growth(c0, c1, "time_s")
  if not (t and t > 0 and tv and r0.time_s >= c0.time_s and r1.time_s <= c1.time_s) then return c0, c1 end
  local o0, o1 = {}, {}
  for k, v in pairs(c0) do o0[k] = v end
  for k, v in pairs(c1) do o1[k] = v end
  for _, k in ipairs{"energy_j", "power_capped_ms", "thermal_capped_ms"} do
    local d, dv = growth(r0, r1, k), growth(c0, c1, k)
    local ok = d and dv and d <= dv
    o0[k], o1[k] = ok and r0[k] or nil, ok and r1[k] or nil
  end
  o0.time_s, o1.time_s = r0.time_s, r1.time_s
  return o0, o1
end

-- Mean board power (W) between NVML readings c0 and c1 (vsalab.gpu_clocks),
-- or nil: NVML's energy counter moves in coarse steps, so only over 1 s or
-- more (a sustained burst, a long point).
function M.watts(c0, c1)
  if not (c0 and c1 and c0.energy_j and c1.energy_j and c0.time_s and c1.time_s) then return nil end
  local dt = c1.time_s - c0.time_s
  if dt < 1 then return nil end
  return math.floor((c1.energy_j - c0.energy_j) / dt + 0.5)
end

-- NVML readings for a point on `device`. VSALAB_TEST_CAPPED=ms[,ms...]
-- (tests only): CPU points read made-up counters instead, the power
-- counter growing by the next listed ms over each burst (the last repeats)
-- and each burst lasting 0.1 s, so a spec drives the retry path without a
-- GPU.
local fake = {reading = 0, power = 0, now = 0}
function M.clocks(device)
  if device ~= "cpu" then return core.gpu_clocks() end
  local list = os.getenv("VSALAB_TEST_CAPPED")
  if not list then return nil end
  fake.reading = fake.reading + 1
  if fake.reading % 2 == 0 then -- after burst reading / 2
    local ms, i = {}, fake.reading / 2
    for x in list:gmatch("[^,]+") do ms[#ms + 1] = tonumber(x) or 0 end
    fake.power, fake.now = fake.power + (ms[math.min(i, #ms)] or 0), fake.now + 0.1
  end
  return {sm_mhz = 1980, throttled = false, power_capped_ms = fake.power, time_s = fake.now}
end

-- Time burst() (it returns vsalab.bench stats) until NVML saw no capping
-- during it (M.was_capped), at most 1 + M.cap_retries times, pausing
-- M.cap_recovery_ms before each retry, and not retiming a burst that took
-- longer than M.cap_retry_max_s (sleep(ms): a sleep a signal ends;
-- clocks(): a vsalab.gpu_clocks reading or nil). Returns the least capped
-- burst's stats, the readings around it, the number of retries and whether
-- it was capped.
function M.time_uncapped(burst, clocks, sleep)
  sleep = sleep or function(ms) core.proc_poll({}, ms) end
  local best, retries
  for try = 0, M.cap_retries do
    if try > 0 then sleep(M.cap_recovery_ms) end
    retries = try
    local c0 = clocks()
    local st = burst()
    local c1 = clocks()
    local capped = M.was_capped(c0, c1)
    local ms = M.capped_ms(c0, c1) or 0
    if not best or ms < best.ms then best = {st = st, c0 = c0, c1 = c1, capped = capped, ms = ms} end
    if not capped then break end
    if not (c0 and c1 and c0.time_s and c1.time_s) or c1.time_s - c0.time_s > M.cap_retry_max_s then break end
  end
  return best.st, best.c0, best.c1, retries, best.capped
end

-- Timing options for one measurement: base (a backend's bench_opts) with
-- the run's --timing mode. 'graph' replays a captured call, so it applies
-- only to functions that reuse their buffers (graph_ok); others time 'hot'
-- and their row says so; nor is their stream held while they queue (they
-- allocate and free, which waits on the GPU). CPU points always time on
-- the host clock.
local function timing_opts(base, graph_ok, device)
  -- cold and graph need a GPU; hot and sustained (sampling) run anywhere.
  local mode = (package.loaded.vsalab.context or {}).timing
  if device == "cpu" and mode ~= "sustained" then mode = nil end
  local o = {}
  for k, v in pairs(base or {}) do o[k] = v end
  if mode and (mode ~= "graph" or graph_ok) then o.mode = mode end
  if not graph_ok then o.hold = false end
  return o
end

-- One configuration of run(): build, invert (timed), every backend.
-- Returns "done" when the run had measured it already.
function M.run_config(e, i, c, device, seed, rows, n)
  do
    local t0 = os.time()
    local hash = M.hash_of(c)
    local done = e.measured[hash] or {}
    local todo = {}
    for _, b in ipairs(backends.available(device)) do
      if not done[b.name] and not (c.skip and c.skip[b.name]) and not (e.kernels and not e.kernels[b.name])
          and not (c.only_kernel and c.only_kernel ~= b.name) then
        todo[#todo + 1] = b.name
      end
    end
    if c.only_kernel == "invert" and not done.invert then todo[#todo + 1] = "invert" end
    if (done.invert or (c.only_kernel and c.only_kernel ~= "invert")) and #todo == 0 then
      -- A rerun's kernel that does not run here is not a resumed point.
      local only = c.only_kernel and c.only_kernel ~= "invert" and not done[c.only_kernel] and c.only_kernel
      report.progress(i, n, only and (only .. " does not run on " .. device .. " here: nothing to measure")
        or "already measured in this run (resume)")
      return "done"
    end
    report.progress(i - 1, n, "building inputs " .. (c.label or ""))
    -- The problem is the point itself, less its display label and any
    -- other axis of the sweep's own that problem.build does not take.
    local spec = {}
    for _, k in ipairs(problem.fields) do spec[k] = c[k] end
    spec.device, spec.seed = device, M.point_seed(seed, hash)
    local p = problem.build(spec)
    local label = shape_of(c, p)

    -- Inversion (q2k -> k2q), kernel only, into the existing buffers.
    if not done.invert and not (c.only_kernel and c.only_kernel ~= "invert") then
      local st = bench.bench(function()
        core.invert_indices(p.q2k_idx, p.q2k_num, p.nkv,
          {out = {p.k2q_idx, p.k2q_num}, check = false})
      end, timing_opts(device == "cpu" and {warmup = 3, repeats = 3} or backends.kernel_bench_opts, true, device))
      local row = base_row(e.name, c, p)
      row.kernel = "invert"
      timing(row, st)
      row.note = "q2k -> k2q inversion, deterministic"
      row.extra = {seed = p.seed, point = M.point_of(c), lists = p.lists, sharing = p.sharing,
        clock = st.clock}
      row.point_hash = hash
      row.id = run.log(row)
      rows[#rows + 1] = row
    end

    -- VSALAB_FAULT_AT=i: an illegal-address fault at point i, to prove that
    -- a sticky CUDA error ends the run 'failed' with earlier rows intact.
    if device ~= "cpu" and tonumber(os.getenv("VSALAB_FAULT_AT") or "") == i then core.gpu_fault() end
    -- VSALAB_CRASH_AT=i: the process kills itself (SIGKILL) at point i, on
    -- any device: a worker that dies mid-point, for the --devices tests.
    if tonumber(os.getenv("VSALAB_CRASH_AT") or "") == i then core.proc_self_kill() end
    -- The reference before any backward runs: one that writes into its
    -- inputs then fails its check instead of moving the reference.
    local pre
    if e.check == "full" then
      pre = core.oracle{q = p.q, k = p.k, v = p.v, dO = p.dO,
        o = p.o, lse = p.lse, q2k_idx = p.q2k_idx, q2k_num = p.q2k_num,
        variable_block_sizes = p.vbs, sm_scale = p.sm_scale}
    else
      pre = check.spot_refs(p, e.check)
    end
    for _, b in ipairs(backends.available(device, p)) do
      if not (c.skip and c.skip[b.name]) and not (c.only_kernel and c.only_kernel ~= b.name)
          and not done[b.name] and not (e.kernels and not e.kernels[b.name]) then
        report.progress(i - 1, n, label .. ": " .. b.name .. " backward")
        -- With b.timed, a first call sizes the buffers (and scratch), they are
        -- NaN-filled again and the timed calls (kernel only) write them: the
        -- check then sees the timed calls' outputs. Otherwise the last timed
        -- call's own outputs are checked.
        local outs, bst, clk0, clk1
        local retries = 0
        local function clocks() return M.clocks(device) end
        -- A plug-in or peer that reports an error fails this point only
        -- ("backend NAME failed: ..."); a GPU fault still ends the run.
        local ran, err = pcall(function()
          if b.measure then
            -- Measured once: the readings bracket the whole peer (its start,
            -- its warm-up), too long and too costly to retime.
            clk0 = clocks()
            outs, bst = b.measure(p, timing_opts(b.bench_opts, b.capturable ~= false, device))
            clk1 = clocks()
            M.check_returned(b, outs, p)
            local ex = bst.peer and bst.peer.extra
            clk0, clk1 = M.peer_readings(clk0, clk1, type(ex) == "table" and ex.nvml)
          elseif b.timed then
            local dq, dk, dv = b.run(p)
            outs = {dq = dq, dk = dk, dv = dv}
            M.check_returned(b, outs, p)
            -- NaN again, so the check below sees what the timed calls wrote.
            for _, t in pairs(outs) do t:fill(0 / 0) end
            bst, clk0, clk1, retries = M.time_uncapped(function()
              return bench.bench(b.timed(p, outs), timing_opts(b.bench_opts, b.capturable ~= false, device))
            end, clocks)
          else
            -- Allocating calls (the reference): slow, timed once.
            clk0 = clocks()
            bst = bench.bench(function()
              if outs then for _, t in pairs(outs) do t:free() end end
              local dq, dk, dv = b.run(p)
              outs = {dq = dq, dk = dk, dv = dv}
              M.check_returned(b, outs, p)
            end, timing_opts(b.bench_opts, false, device))
            clk1 = clocks()
          end
        end)
        if not ran then
          M.backend_failed(e, c, p, b, hash, err, device, rows, label, i, n)
          goto next_backend
        end
        -- The mode when not the default burst: a sustained point's figure is a capped one.
        report.progress(i - 1, n, string.format("%s: %s %.4g ms, noise %.2g%% (%d %ssamples, %s)%s; checking",
          label, b.name, bst.median, 100 * bst.rel_stddev, bst.samples,
          (bst.mode and bst.mode ~= "hot") and (bst.mode .. " ") or "", bst.stop or "-", e.eta(i - 1)))
        local res
        if e.check == "full" then
          res = check.check_outputs(outs, pre)
          res.what = "all heads and blocks vs fp64 oracle"
        else
          res = check.spot_check(p, outs, e.check, pre)
          res.what = string.format("heads %s; %d q + %d kv blocks each vs fp64 oracle",
            table.concat(res.bh, ","), #res.q_blocks, #res.kv_blocks)
        end
        local r = base_row(e.name, c, p)
        r.kernel = b.name
        timing(r, bst)
        r.passed = res.passed and 1 or 0
        -- Never report the speed of a wrong output, nor of an emulation.
        r.tflops = res.passed and not b.emulated and bench.tflops(p.pairs, p.D, bst.median) or nil
        r.errors = res.errors
        r.note = b.emulated and ("emulated (checked, not a speed): " .. res.what) or res.what
        local capped = M.capped_ms(clk0, clk1)
        r.extra = {latent = p.latent, q_blocks = res.q_blocks, kv_blocks = res.kv_blocks,
          clock = bst.clock, seed = p.seed, point = M.point_of(c), stop = bst.stop,
          lists = p.lists, sharing = p.sharing, backend = b.origin, peer = bst.peer,
          capped_ms = capped, cap_retries = retries > 0 and retries or nil,
          watts = M.watts(clk0, clk1)}
        r.point_hash = hash
        -- SM clock around the burst and throttling (NVML, when present): a
        -- limiter that held the clocks down during it (M.was_capped).
        r.sm_clock_start_mhz = clk0 and clk0.sm_mhz or nil
        r.sm_clock_end_mhz = clk1 and clk1.sm_mhz or nil
        if clk0 and clk1 then r.throttled = M.was_capped(clk0, clk1) and 1 or 0 end
        r.id = run.log(r)
        rows[#rows + 1] = r
        report.progress(i - 1, n, string.format("%s: %s check %s%s", label, b.name,
          res.passed and "pass" or "FAIL", e.eta(i - 1)))
        for _, t in pairs(outs) do t:free() end
      end
      ::next_backend::
    end
    problem.free(p)
    collectgarbage()
    report.progress(i, n, string.format("%s done in %ds", label, os.time() - t0))
  end
end

-- outs as backend b returned them for p: dq, dk, dv tensors of p's q, k
-- and v shapes on p's device, else "backend NAME failed: ..." (the point
-- fails, as for a plug-in or a peer). A Lua backend's nil, number or
-- misshapen tensor ended the run with an internal error, and one that
-- returned dq alone passed its check on dq alone.
function M.check_returned(b, outs, p)
  for _, o in ipairs{{"dq", p.q}, {"dk", p.k}, {"dv", p.v}} do
    local t, want = outs[o[1]], o[2]
    if not core.is_tensor(t) then
      error(string.format("backend %s failed: it returned %s for %s, not a tensor", b.name, type(t), o[1]), 0)
    end
    local a, w = table.concat(t.shape, ","), table.concat(want.shape, ",")
    if a ~= w then
      error(string.format("backend %s failed: it returned %s of shape [%s], not [%s]", b.name, o[1], a, w), 0)
    end
    if t.device ~= want.device then
      error(string.format("backend %s failed: it returned %s on %s, not %s", b.name, o[1], t.device, want.device), 0)
    end
  end
end

-- A backend's error at a point: a plug-in or external peer that reported a
-- failure ("backend NAME failed: ...") gets a failed row with the message
-- and the sweep goes on. Anything else, or a GPU left faulted (the
-- device does not synchronise cleanly), is raised: the run ends failed.
function M.backend_failed(e, c, p, b, hash, err, device, rows, label, i, n)
  local msg = tostring(err)
  -- "backend NAME skipped: why": a peer whose library cannot take this
  -- point (lua/vsalab/external.lua): a row that says why, neither passed
  -- nor failed.
  local skipped = msg:match("backend " .. b.name:gsub("%p", "%%%0") .. " skipped: ([^\n]*)")
  if not skipped and not msg:find("backend " .. b.name .. " failed: ", 1, true) then error(err, 0) end
  if device ~= "cpu" then core.synchronize() end
  collectgarbage()
  local first = skipped and ("skipped: " .. skipped)
    or msg:gsub("^[^\n]-(backend " .. b.name:gsub("%p", "%%%0") .. " failed: )", "%1"):gsub("\n.*", "")
  local r = base_row(e.name, c, p)
  r.kernel = b.name
  r.passed = not skipped and 0 or nil
  r.note = first
  r.point_hash = hash
  r.extra = {seed = p.seed, point = M.point_of(c), lists = p.lists, sharing = p.sharing, backend = b.origin}
  r.id = run.log(r)
  rows[#rows + 1] = r
  report.progress(i - 1, n, label .. ": " .. b.name .. (skipped and " " or " FAILED: ") .. first)
end

function M.summary(rows, anchors, gemm)
  if #rows == 0 then return end -- nothing measured here (a resumed run complete already)
  local t, any_ragged, any_vsa, any_capped = {}, false, false, false
  for _, r in ipairs(rows) do
    any_ragged = any_ragged or r.ragged == 1 or r.ragged == true
    any_capped = any_capped or r.throttled == 1
    local x = type(r.extra) == "table" and r.extra or {}
    any_vsa = any_vsa or (x.lists ~= nil and x.lists ~= "random")
    local e = r.errors or {}
    local function err(k) return e[k] and e[k].rel_l2 end
    t[#t + 1] = {kernel = r.kernel, B = r.B, H = r.H, S = r.Sq, density = r.density,
      topk = r.topk, ms = r.ms_median, tflops = r.tflops,
      ragged = (r.ragged == 1 or r.ragged == true) and 1 or 0, -- as `show` and `compare` print it
      dq = err("dq"), dk = err("dk"), dv = err("dv"),
      ok = r.passed == nil and "-" or (r.passed == 1 and "pass" or "FAIL"),
      lists = x.lists or "random", sharing = x.sharing,
      gemm = (r.tflops and gemm) and (100 * r.tflops / gemm) or nil,
      anchor = anchors and anchors(r) or nil,
      capped = r.throttled ~= 1 and "-" or
        ((x.capped_ms or 0) > 0 and string.format("%.1f ms", x.capped_ms) or "yes")}
  end
  local cols = {
    {key = "kernel"}, {key = "B", fmt = "%d"}, {key = "H", fmt = "%d"}, {key = "S", fmt = "%d"},
    {key = "density", fmt = "%.3f"}, {key = "topk", fmt = "%d"},
    {key = "sharing", fmt = "%.3f"},
    {key = "ms", title = "ms (median)", fmt = "%.3f"},
    {key = "tflops", title = "TFLOPS", fmt = "%.4g"}, -- CPU rows are ~0.001
    {key = "gemm", title = "% GEMM", fmt = "%.0f"},
    {key = "dq", title = "dq rel L2", fmt = "%.2e"},
    {key = "dk", title = "dk rel L2", fmt = "%.2e"},
    {key = "dv", title = "dv rel L2", fmt = "%.2e"},
    {key = "ok", title = "check"}, {key = "anchor"},
  }
  -- Ragged lists (counts below top-k) change what a TFLOPS figure means:
  -- say which rows had them when any did.
  if any_ragged then table.insert(cols, 7, {key = "ragged", fmt = "%d"}) end
  -- Likewise the list kind (random or vsa:ℓ) when any point had VSA lists.
  if any_vsa then table.insert(cols, 7, {key = "lists"}) end
  -- A point timed under a power or thermal limit it could not wait out
  -- (M.time_uncapped): say so, before the check column.
  if any_capped then table.insert(cols, #cols - 1, {key = "capped"}) end
  print()
  report.table(t, cols)
end

return M
