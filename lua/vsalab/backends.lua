-- The registry of backward implementations.
--
-- Each entry: {name=, description=, supported=function(device, p) -> ok, why,
-- run=function(p, opts) -> dq, dk, dv (fresh, NaN-poisoned outputs),
-- timed=function(p, outs) -> fn (optional: a closure that reruns the kernel
-- into outs without allocating or poisoning, for kernel-only timing),
-- bench_opts={...}}, where p is a problem (vsalab.problem.build) and dq, dk
-- include sm_scale. Experiments and the CASES runner iterate over
-- backends.available(device, p), so a new kernel plugs in everywhere by one
-- register{} call. Kernels from outside vsalab come in the same way:
-- load{} (a plug-in library, lua/vsalab/plugin.lua), external{} (another
-- process, lua/vsalab/external.lua) and peer(name) (a known external peer).
-- Optional fields they use: capturable (false: not timed on a held stream
-- nor in a CUDA graph), measure(p, bench_opts) -> outs, stats (the backend
-- times itself), origin (how `vsalab rerun` loads it again).
local core = require "vsalab.core"

local M = {list = {}}

-- Timing of the native kernels and the inversion: bursts of at least 20
-- samples, then until the noise is <= 0.5% (nvbench's target) or 0.1 s.
-- Not nvbench's 0.5 s minimum and 15 s cap: back-to-back backwards at 16k
-- tokens and up pull the H200 from 1980 to 1710-1800 MHz (power) within
-- 0.5 s, so long points measure a throttled chip and never meet the noise
-- target (device runs of 2026-11-29: 2% noise, 15 s a point; at 16k the
-- samples split between 1.57 ms and 1.73 ms). The Triton peer
-- (tests/gpu/triton_peer.py) is timed the same way: 20-sample bursts. Even
-- a burst can meet the power cap; the experiments time such a burst again
-- (vsalab.experiment.time_uncapped).
M.kernel_bench_opts = {warmup = 3, min_samples = 20, min_time = 0, max_time = 0.1}

function M.register(b)
  assert(type(b.name) == "string", "backend needs a name")
  assert(type(b.run) == "function", "backend needs run(p, opts)")
  for i, e in ipairs(M.list) do
    if e.name == b.name then M.list[i] = b; return b end
  end
  M.list[#M.list + 1] = b
  return b
end

-- Remove backend `name` from the registry (a no-op when absent).
function M.unregister(name)
  for i, e in ipairs(M.list) do
    if e.name == name then table.remove(M.list, i); return true end
  end
  return false
end

-- Why `name` cannot be given to a backend loaded from outside vsalab (a
-- plug-in, an external command), or nil: it is one of vsalab's own
-- backwards (registered below), whose rows it would take over unseen
-- (plugin_name=reference measured the plug-in as 'reference'), or the
-- kernel of rows that are no backward.
M.row_kernels = {invert = "the inversion's rows", gemm_bf16 = "the GEMM ceiling's rows",
  config = "the rows of skipped points"}
local builtin = {}
function M.reserved(name)
  if builtin[name] then return "'" .. name .. "' is vsalab's own backward: pick another name" end
  if M.row_kernels[name] then return "'" .. name .. "' names " .. M.row_kernels[name] .. ": pick another name" end
  return nil
end

function M.load(o) return require("vsalab.plugin").load(o) end
function M.external(o) return require("vsalab.external").external(o) end
function M.peer(name) return require("vsalab.external").peer(name) end

-- How the plug-in library a row's extra.backend names (origin) differs
-- from the file at its path now, or nil when it is the one measured (or
-- the row stored no hash, or names no plug-in): "changed since it was
-- measured (sha256 X then, Y now)". Read before the library is loaded:
-- another library's constructors would run at dlopen. A file that cannot
-- be hashed now (no sha256sum) counts as changed: it cannot be shown the same.
function M.plugin_changed(origin)
  if type(origin) ~= "table" or origin.kind ~= "plugin" or type(origin.sha256) ~= "string" then return nil end
  local f = io.open(origin.path, "rb")
  if not f then return nil end -- missing: loading it says so
  f:close()
  local now = require("vsalab.plugin").file_sha256(origin.path)
  if now == origin.sha256 then return nil end
  return string.format("changed since it was measured (sha256 %s then, %s now)", origin.sha256:sub(1, 12),
    now and now:sub(1, 12) or "unknown: sha256sum failed")
end

-- Load again a backend that a row's extra.backend describes (its origin).
-- (vsalab rerun asks plugin_changed first.)
function M.restore(origin)
  if type(origin) ~= "table" then return nil end
  for _, b in ipairs(M.list) do if b.name == origin.name then return b end end
  if origin.kind == "plugin" then
    return M.load{path = origin.path, symbol = origin.symbol, name = origin.name}
  elseif origin.kind == "external" then
    if require("vsalab.external").peers[origin.name] then return M.peer(origin.name) end
    return M.external{name = origin.name, cmd = origin.cmd}
  end
end

function M.get(name)
  for _, b in ipairs(M.list) do if b.name == name then return b end end
  error("no backward named '" .. tostring(name) .. "'", 2)
end

-- ok, why: can backend `name` run on device ('cpu' or 'cuda') for problem
-- p (optional)? Decided from shapes, dtypes and the device only.
function M.supported(name, device, p)
  local b = M.get(name)
  if b.supported then return b.supported(device, p) end
  return true
end

-- fits(b, p) -> ok, why, need: can backend b (a name or a registered
-- record) take point p (a problem or an experiment's point: its block,
-- default 64, and layout, default 'bhsd'; nil: any point)? Decided from
-- what the record declares alone (only_block: the one block size it
-- takes), never from the device: experiments ask it before any GPU work,
-- so --check says so on any host, and the record's supported() asks it
-- first. On false, need holds the point fields that would fit ({block =
-- 128}), for a hint. No built-in declares a layout it refuses: plug-ins
-- and peers check theirs in supported(). Raises "no backward named 'x'"
-- for an unknown name.
function M.fits(b, p)
  if type(b) ~= "table" then b = M.get(b) end
  if b.only_block and p and (p.block or 64) ~= b.only_block then
    return false, b.name .. " takes block " .. b.only_block .. " only, got " .. tostring(p.block or 64),
      {block = b.only_block}
  end
  return true
end

-- Backends that run on device for problem p (optional), in registration order.
function M.available(device, p)
  local out = {}
  for _, b in ipairs(M.list) do
    if (b.supported == nil) or b.supported(device, p) then out[#out + 1] = b end
  end
  return out
end

-- The backward to use on device for p: the native kernel of the device's
-- architecture when it takes p, the reference otherwise.
function M.pick(device, p)
  for _, name in ipairs{"sm100a", "sm90a"} do
    if M.supported(name, device, p) then return M.get(name) end
  end
  return M.get("reference")
end

local function cuda_cc()
  local ok, why = core.cuda_available()
  if not ok then return nil, why end
  return core.device_info().cc
end

M.register{
  name = "reference",
  description = "fp32 SIMT reference (two passes, deterministic), CPU or GPU",
  supported = function(device) return true end,
  -- Slow by design (4.6 s a call at Wan 720P H40 25%): at least 3 samples,
  -- then until the noise target or 0.25 s, so `vsalab compare` has a spread to
  -- judge by. The warm-up call grows the shared device scratch that timed()
  -- calls use, so the timed calls (or a graph capture) allocate nothing.
  bench_opts = {warmup = 1, min_samples = 3, min_time = 0, max_time = 0.25},
  run = function(p, opts)
    opts = opts or {}
    return core.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx,
      p.k2q_num, p.vbs, {sm_scale = p.sm_scale, out_dtype = opts.out_dtype, layout = p.layout})
  end,
  timed = function(p, outs)
    -- Into run()'s buffers, unpoisoned; run() validated the lists and vbs,
    -- so nothing is read back: on CUDA the call neither allocates nor
    -- synchronises (the two inversions, Delta, dk/dv, dq, bf16 conversion).
    local opts = {sm_scale = p.sm_scale, out_dtype = outs.dq.dtype,
      out = {outs.dq, outs.dk, outs.dv}, poison = false, validate = false, layout = p.layout}
    return function()
      core.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx,
        p.k2q_num, p.vbs, opts)
    end
  end,
}

-- The native kernels take every size of the block table (vsalab.blocks,
-- from src/core/block_size.c; kernels.h: a size they lack is
-- cudaErrorInvalidValue, so a new table entry needs its kernels first).
local blocks = require "vsalab.blocks"
local function block_supported(p)
  if p and p.block and not blocks.supported(p.block) then
    return false, "block " .. tostring(p.block) .. ": not supported by this kernel"
  end
  return true
end

local function sm90a_supported(name, device, p)
  if device == "cpu" then return false, name .. " runs on CUDA tensors" end
  local bok, bwhy = block_supported(p)
  if not bok then return false, bwhy end
  local cc, why = cuda_cc()
  if not cc then return false, why end
  if cc ~= "9.0" then return false, name .. " needs compute capability 9.0, this GPU is " .. cc end
  if p and p.D ~= 128 then return false, name .. " takes head dim 128, got " .. tostring(p.D) end
  return true
end

-- A native backward: core[fn](dO, ..., vbs, opts) with the fixed options
-- `kernel_opts` (version, deterministic, emulate). `run` makes fresh,
-- NaN-poisoned outputs; `timed` reruns the kernel into run()'s buffers.
local function native(b, fn, kernel_opts)
  local function call(p, extra)
    local opts = {sm_scale = p.sm_scale, layout = p.layout}
    for k, v in pairs(kernel_opts) do opts[k] = v end
    for k, v in pairs(extra or {}) do opts[k] = v end
    return opts
  end
  b.bench_opts = b.bench_opts or M.kernel_bench_opts
  b.run = function(p)
    return core[fn](p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, call(p))
  end
  b.timed = function(p, outs)
    -- p's lists come from invert_indices (ascending): no canonical pass.
    local opts = call(p, {poison = false, canonical = false, out = {outs.dq, outs.dk, outs.dv}})
    -- VSALAB_SLOWDOWN_US adds a spin kernel to each timed call: the
    -- deliberately slower variant that must make `vsalab compare` say SLOW.
    local slow = tonumber(os.getenv("VSALAB_SLOWDOWN_US") or "")
    return function()
      core[fn](p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, opts)
      if slow then core.gpu_sleep(slow) end
    end
  end
  return M.register(b)
end

-- version: the main kernel (5 128-row tiles at block 128, 4 two kv blocks
-- a CTA, 3 warp-specialized, 2 bulk dQ, 1 atomic dQ); det: dQ in int32
-- fixed point (versions 3-5:
-- the same bits every run, the default), else fp32 in arrival order (the
-- `-fp32` variants: run-to-run differences within rounding, never
-- bitwise reproducible; their rows say deterministic=false).
-- only_block: the version takes that block size alone (v5: 128; M.fits
-- reads it, before any device check).
local function sm90a(name, version, det, description, variant_of, only_block)
  local b = {name = name, description = description, variant_of = variant_of,
    deterministic_dq = det, only_block = only_block}
  b.supported = function(device, p)
    local ok, why = M.fits(b, p)
    if not ok then return false, why end
    return sm90a_supported(name, device, p)
  end
  native(b, "backward_sm90a", {version = version, deterministic = det})
end
sm90a("sm90a", 3, true,
  "native Hopper backward (v3 at block 64, v5 at 128): warp-specialized, TMA + mbarrier producer, bulk dQ reduce, dQ in int32 fixed point (same bits every run)")
sm90a("sm90a-fp32", 3, false,
  "sm90a with dQ summed in fp32 in arrival order (faster at small shapes; not reproducible bit for bit)")
-- Earlier versions, kept to measure against in the same run; the case
-- runner and GPU specs skip variants.
sm90a("sm90a-v5", 5, true, "sm90a v5 (block 128 only): 128-row tiles, one CTA a 128-token kv block, each q block loaded once; fixed-point dQ", "sm90a", 128)
sm90a("sm90a-v5-fp32", 5, false, "sm90a v5 with dQ summed in fp32 in arrival order", "sm90a", 128)
sm90a("sm90a-v4", 4, true, "sm90a v4: two kv blocks a CTA share the q blocks both select (one load, one dQ reduce); fixed-point dQ", "sm90a")
sm90a("sm90a-v4-fp32", 4, false, "sm90a v4 with dQ summed in fp32 in arrival order", "sm90a")
sm90a("sm90a-v2", 2, false, "sm90a v2: one warpgroup, cp.async ring, bulk dQ reduce (fp32 dQ)", "sm90a")
sm90a("sm90a-atomic", 1, false, "sm90a v1: dQ by vector atomics (fp32 dQ)", "sm90a")

-- The Blackwell backward (kernels/sm100/). No Blackwell GPU is available to
-- this project: the hardware kernel is compiled and SASS-checked, never run.
-- Its sm_90a build over an emulated tcgen05 layer runs on an H200 as
-- `sm100a-emu`, a test backend that only VSALAB_SM100_EMU=1 makes available
-- (its timings measure the emulation, not a kernel).
local function sm100a_supported(emulate)
  return function(device, p)
    if device == "cpu" then return false, "sm100a runs on CUDA tensors" end
    if emulate and os.getenv("VSALAB_SM100_EMU") ~= "1" then
      return false, "sm100a-emu is a test backend: set VSALAB_SM100_EMU=1 to use it"
    end
    local ok, why = core.cuda_available()
    if not ok then return false, why end
    ok, why = core.sm100a_image(emulate)
    if not ok then
      why = tostring(why):gsub("^[^:]*:%d+: ", "")
      if not emulate then why = why .. " (compiled and emulated, never run on Blackwell)" end
      return false, why
    end
    if p and p.D ~= 128 then return false, "sm100a takes head dim 128, got " .. tostring(p.D) end
    return block_supported(p)
  end
end

local function sm100a(name, emulate, det, description, variant_of)
  native({name = name, description = description, variant_of = variant_of,
    emulated = emulate, deterministic_dq = det, supported = sm100a_supported(emulate),
    -- The emulation is checked, not timed: one call (rows hold no TFLOPS).
    bench_opts = emulate and {warmup = 0, repeats = 1} or nil},
    "backward_sm100a", {deterministic = det, emulate = emulate})
end
sm100a("sm100a", false, true,
  "native Blackwell backward (tcgen05, tensor memory; fixed-point deterministic dQ): compiled and emulated, never run on Blackwell")
sm100a("sm100a-fp32", false, false, "sm100a with dQ summed in fp32 in arrival order", "sm100a")
sm100a("sm100a-emu", true, true,
  "the sm100a kernel over an emulated tcgen05 layer on sm_90a (a test backend: correctness, not speed)")
sm100a("sm100a-emu-fp32", true, false, "sm100a-emu with dQ summed in fp32 in arrival order", "sm100a-emu")

for _, b in ipairs(M.list) do builtin[b.name] = true end

return M
