-- Timing statistics and the TFLOPS convention.
--
-- bench(fn, {mode='hot'|'cold'|'graph'|'sustained', warmup=3, repeats=N | min_samples=10,
--   max_noise=0.005, min_time=0.5, max_time=15, max_samples=, clock=,
--   keep_samples=false, hold=true}) times fn with a CUDA event pair around
-- each call (C: vsalab.bench_raw): a fixed count with repeats, else until
-- the relative standard deviation reaches max_noise (nvbench's defaults).
-- 'cold' rewrites an L2-sized buffer before every sample. hold (CUDA clock)
-- holds the stream with a spinning kernel while the sample's launches are
-- queued, as nvbench's blocking kernel does, so host launch gaps are not
-- timed; fn must then only queue work (no sync, no host copy, no cudaFree):
-- if it waits on the GPU, the sample errors after 10 s. Returns {median, min, max, mean,
-- stddev, rel_stddev, p20, p80, spread, samples, clock, mode, stop} in
-- milliseconds; spread = (max - min) / median, stop = why sampling ended.
-- TFLOPS on selected blocks: 10·block²·D flops per selected (q block,
-- kv block) pair — the 5 GEMMs of a backward at 2·block²·D flops each — as
-- docs/ANCHORS.md counts them (block 64: 10·64·64·D; block 128: 4× that
-- per pair, over a quarter as many pairs at the same density).
local core = require "vsalab.core"

local M = {}

local function quantile(sorted, p)
  local n = #sorted
  if n == 1 then return sorted[1] end
  local x = 1 + (n - 1) * p
  local lo = math.floor(x)
  local hi = math.min(lo + 1, n)
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (x - lo)
end

function M.stats(samples)
  if type(samples) ~= "table" or #samples == 0 then error("stats: need a list of samples", 2) end
  -- A list without holes ({1, nil, 3} would count 1 sample) of finite
  -- numbers (a NaN or inf sample gave a NaN median with spread 0: "no
  -- noise").
  local keys = 0
  for _ in pairs(samples) do keys = keys + 1 end
  if keys ~= #samples then error("stats: samples must be a list 1..n without holes", 2) end
  local s = {}
  local sum = 0
  for i, v in ipairs(samples) do
    if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
      error(string.format("stats: sample %d must be a finite number, got %s", i, tostring(v)), 2)
    end
    s[i] = v; sum = sum + v
  end
  table.sort(s)
  local n = #s
  local mean = sum / n
  local var = 0
  for _, v in ipairs(s) do var = var + (v - mean) ^ 2 end
  local stddev = n > 1 and math.sqrt(var / (n - 1)) or 0
  local median = quantile(s, 0.5)
  return {
    median = median, min = s[1], max = s[n], mean = mean,
    stddev = stddev, rel_stddev = mean > 0 and stddev / mean or 0,
    p20 = quantile(s, 0.2), p80 = quantile(s, 0.8),
    spread = median > 0 and (s[n] - s[1]) / median or 0,
    samples = n,
  }
end

-- Mode 'sustained': calls back to back for sustained_s seconds, every one a
-- sample, none dropped early for low noise, the median taken over all. On
-- the CUDA clock the calls are queued without synchronising between them
-- (bench_raw keeps 32 in flight, an event pair around each, no hold), so the
-- GPU never waits for the host unless queueing a call takes longer than
-- running it, as in a training loop. A burst (mode 'hot', 20 samples) shows
-- the kernel at the clock a cool chip holds; a training job meets the
-- board's power cap within ~0.3 s (the H200 at 16k tokens: ~1650 MHz at
-- 700 W, kernels/NOTES.md "Timing under the power cap"), so over 3 s the
-- median is the capped rate. Returns the options bench_raw takes for it.
M.sustained_s = 3
-- Its sample cap unless the caller sets one: a 3 µs call fills 3 s (8 MB of
-- samples in C); at the usual 100000 a call under 30 µs (the inversion)
-- stopped long before the board met its power cap.
M.sustained_max_samples = 1000000
-- Every timing mode (a result row's `mode`; --timing takes the same).
M.modes = {hot = true, cold = true, graph = true, sustained = true}
function M.sustained_opts(opts)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.mode, o.repeats = "sustained", nil
  o.min_time, o.max_time, o.max_noise = M.sustained_s, M.sustained_s, 0
  o.max_samples = opts and opts.max_samples or M.sustained_max_samples
  return o
end

function M.bench(fn, opts)
  opts = opts or {}
  if type(fn) ~= "function" then error("bench: fn must be a function", 2) end
  if type(opts) ~= "table" then error("bench: opts must be a table of options, got " .. type(opts), 2) end
  require("vsalab.run").check_stop("vsalab.bench")
  local raw = opts.mode == "sustained" and M.sustained_opts(opts) or opts
  local ok, samples, clock, reason = pcall(core.bench_raw, fn, raw)
  if not ok then
    -- bench's own errors ("bench: ...") name the caller's line; an error
    -- raised by fn passes through as it was.
    local own = type(samples) == "string" and
      (samples:match("^bench: .*") or samples:match("^[^\n:]*%.lua:%d+: (bench: .*)$"))
    error(own or samples, own and 2 or 0)
  end
  local st = M.stats(samples)
  st.clock, st.stop = clock, reason
  st.mode = opts.mode or "hot"
  if opts.keep_samples then st.times = samples end
  return st
end

-- FLOPs of one selected pair: 10·block²·D (block defaults to 64).
function M.pair_flops(D, block)
  block = block or 64
  if type(D) ~= "number" or type(block) ~= "number" then
    error(string.format("pair_flops: expected numbers D and block, got %s and %s", type(D), type(block)), 2)
  end
  if not (D >= 1 and D < math.huge and D == math.floor(D)) then
    error("pair_flops: D must be a positive integer, got " .. tostring(D), 2)
  end
  local blocks = require "vsalab.blocks"
  if not blocks.supported(block) then
    error(string.format("pair_flops: block %s is not a block size vsalab takes (%s)", tostring(block),
      blocks.text()), 2)
  end
  return 10 * block * block * D
end

-- pairs: selected (q block, kv block) pairs; D: head dim; ms: time;
-- block: tokens per block (default 64). nil when an argument is not a
-- positive number (D an integer, block a size vsalab takes).
function M.tflops(pairs, D, ms, block)
  if type(pairs) ~= "number" or type(ms) ~= "number" or not (ms > 0) or not (pairs >= 0) then
    return nil
  end
  -- D and block as pair_flops takes them; what it refuses gives nil here.
  local ok, flops = pcall(M.pair_flops, D, block)
  if not ok then return nil end
  return flops * pairs / (ms * 1e-3) / 1e12
end

return M
