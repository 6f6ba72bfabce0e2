-- One point of an experiment run (part of vsalab.experiment, which
-- re-exports everything here): build its inputs, time the inversion, then
-- time and check every backward picked, logging a row for each.
local core = require "vsalab.core"
local bench = require "vsalab.bench"
local check = require "vsalab.check"
local backends = require "vsalab.backends"
local problem = require "vsalab.problem"
local report = require "vsalab.report"
local run = require "vsalab.run"
local identity = require "vsalab.experiment_identity"
local power = require "vsalab.power_cap"

local M = {}

local function shape_of(c, p)
  -- Block 64 (the default) is left out of the label, as before the axis.
  return string.format("B%d H%d S%d D%d%s%s %.0f%%%s%s", p.B, p.H, p.Sq, p.D,
    (p.block or 64) ~= 64 and " blk" .. p.block or "",
    (p.layout or "bhsd") ~= "bhsd" and " " .. p.layout or "",
    100 * p.density, c.ragged and " ragged" or "",
    p.lists ~= "random" and " " .. p.lists or "")
end

local function base_row(name, c, p)
  return {experiment = name, B = p.B, H = p.H, Sq = p.Sq, Skv = p.Skv,
    D = p.D, block = p.block, density = p.density, topk = p.topk,
    ragged = c.ragged and 1 or 0, pairs = p.pairs, layout = p.layout or "bhsd"}
end

local function timing(row, st)
  row.ms_median, row.ms_min, row.ms_max = st.median, st.min, st.max
  row.spread, row.samples = st.spread, st.samples
  row.ms_p20, row.ms_p80, row.rel_stddev = st.p20, st.p80, st.rel_stddev
  row.mode = st.mode or "hot"
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
    local hash = identity.hash_of(c)
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
    spec.device, spec.seed = device, identity.point_seed(seed, hash)
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
      row.extra = {seed = p.seed, point = identity.point_of(c), lists = p.lists, sharing = p.sharing,
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
        variable_block_sizes = p.vbs, sm_scale = p.sm_scale, layout = p.layout}
    else
      pre = check.spot_refs(p, e.check)
    end
    -- A plug-in or peer asked for, or a kernel named in kernels=, that
    -- does not take this point (a block size, a head dim) gets a skipped
    -- row saying why, not silence.
    for _, b in ipairs(backends.list) do
      if (b.origin or (e.kernels and e.kernels[b.name])) and b.supported
          and not (e.kernels and not e.kernels[b.name])
          and not (c.skip and c.skip[b.name]) and not (c.only_kernel and c.only_kernel ~= b.name)
          and not done[b.name] then
        local ok, why = b.supported(device, p)
        if not ok then
          M.backend_failed(e, c, p, b, hash, "backend " .. b.name .. " skipped: "
            .. (why ~= nil and tostring(why) or "it does not take this point (its supported() gave no reason)"),
            device, rows, label, i, n)
        end
      end
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
        local function clocks() return power.clocks(device) end
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
            clk0, clk1 = power.peer_readings(clk0, clk1, type(ex) == "table" and ex.nvml)
          elseif b.timed then
            local dq, dk, dv = b.run(p)
            outs = {dq = dq, dk = dk, dv = dv}
            M.check_returned(b, outs, p)
            -- NaN again, so the check below sees what the timed calls wrote.
            for _, t in pairs(outs) do t:fill(0 / 0) end
            bst, clk0, clk1, retries = power.time_uncapped(function()
              return bench.bench(b.timed(p, outs), timing_opts(b.bench_opts, b.capturable ~= false, device))
            end, clocks)
            if b.check_outs then b.check_outs(outs) end -- a plug-in's guard zones
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
        report.progress(i - 1, n, string.format("%s: %s %.4g ms, noise %s (%d %ssamples, %s)%s; checking",
          label, b.name, bst.median, report.percent(bst.rel_stddev), bst.samples,
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
        r.tflops = res.passed and not b.emulated and bench.tflops(p.pairs, p.D, bst.median, p.block) or nil
        r.errors = res.errors
        r.note = b.emulated and ("emulated (checked, not a speed): " .. res.what) or res.what
        local capped = power.capped_ms(clk0, clk1)
        r.extra = {latent = p.latent, q_blocks = res.q_blocks, kv_blocks = res.kv_blocks,
          clock = bst.clock, seed = p.seed, point = identity.point_of(c), stop = bst.stop,
          lists = p.lists, sharing = p.sharing, backend = b.origin, peer = bst.peer,
          deterministic = b.deterministic_dq,
          capped_ms = capped, cap_retries = retries > 0 and retries or nil,
          watts = power.watts(clk0, clk1)}
        r.point_hash = hash
        -- SM clock around the burst and throttling (NVML, when present): a
        -- limiter that held the clocks down during it (power.was_capped).
        r.sm_clock_start_mhz = clk0 and clk0.sm_mhz or nil
        r.sm_clock_end_mhz = clk1 and clk1.sm_mhz or nil
        if clk0 and clk1 then r.throttled = power.was_capped(clk0, clk1) and 1 or 0 end
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
  r.extra = {seed = p.seed, point = identity.point_of(c), lists = p.lists, sharing = p.sharing, backend = b.origin}
  r.id = run.log(r)
  rows[#rows + 1] = r
  report.progress(i - 1, n, label .. ": " .. b.name .. (skipped and " " or " FAILED: ") .. first)
end

return M
