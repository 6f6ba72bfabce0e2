-- invert_bench.lua — the q2k -> k2q inversion at the anchor shapes of
-- docs/ANCHORS.md (public Triton inversion, H200), on the GPU:
--   build/vsalab run experiments/invert_bench.lua [repeats=50]
-- Each shape: random top-k lists, the GPU inversion timed (kernel only,
-- median of CUDA-event samples, validation read-back off), checked bitwise
-- against the CPU inversion and against a second GPU run (deterministic).
local bench = require "vsalab.bench"
local exp = require "vsalab.experiment"
local report = require "vsalab.report"

local a = exp.args(arg, {repeats = 50})
exp.int_arg(a, "repeats", 1)
exp.require_gpu("invert_bench")
local shapes = {
  {label = "4k B1 H8 25%", H = 8, nblocks = 64, density = 0.25, anchor_ms = 0.021},
  {label = "32k B1 H8 25%", H = 8, nblocks = 512, density = 0.25, anchor_ms = 0.272},
  {label = "65k B1 H8 25%", H = 8, nblocks = 1024, density = 0.25, anchor_ms = 1.05},
  {label = "131k B1 H8 25%", H = 8, nblocks = 2048, density = 0.25, anchor_ms = 3.9},
  {label = "Wan480P H12 25%", H = 12, nblocks = 624, density = 0.25, anchor_ms = 0.60},
  {label = "Wan720P H40 25%", H = 40, nblocks = 1440, density = 0.25, anchor_ms = 9.3},
  {label = "Wan720P H40 10%", H = 40, nblocks = 1440, density = 0.10, anchor_ms = 3.7},
}

local rows = {}
for i, s in ipairs(shapes) do
  report.progress(i - 1, #shapes, s.label)
  local n = s.nblocks
  local qi, qn, topk = vsalab.random_topk{B = 1, H = s.H, nq = n, nkv = n,
    density = s.density, seed = vsalab.context.seed + i, device = "cuda"}
  local ki, kn = vsalab.invert_indices(qi, qn, n)
  local st = bench.bench(function()
    vsalab.invert_indices(qi, qn, n, {out = {ki, kn}, check = false})
  end, {warmup = 5, repeats = a.repeats})
  -- Correct and deterministic: GPU twice, and the CPU inversion, bitwise.
  local ki2 = vsalab.invert_indices(qi, qn, n)
  local ci, cn = vsalab.invert_indices(qi:to("cpu"), qn:to("cpu"), n)
  local same_gpu = vsalab.compare(ki:to_dtype("f64"), ki2:to_dtype("f64")).max_abs == 0
  local same_cpu = vsalab.compare(ki:to("cpu"):to_dtype("f64"), ci:to_dtype("f64")).max_abs == 0
    and vsalab.compare(kn:to("cpu"):to_dtype("f64"), cn:to_dtype("f64")).max_abs == 0
  local ok = same_gpu and same_cpu
  local row = {experiment = "invert_bench", kernel = "invert", B = 1, H = s.H,
    Sq = 64 * n, Skv = 64 * n, block = 64, density = topk / n, topk = topk,
    ragged = 0, pairs = vsalab.pair_count(qn), ms_median = st.median,
    ms_min = st.min, ms_max = st.max, spread = st.spread, samples = st.samples,
    passed = ok and 1 or 0,
    note = "bitwise equal to the CPU inversion and to a second GPU run",
    extra = {anchor_ms = s.anchor_ms, label = s.label}}
  vsalab.log(row)
  rows[#rows + 1] = {shape = s.label, topk = topk, ms = st.median, spread = st.spread,
    anchor = s.anchor_ms, speedup = s.anchor_ms / st.median, ok = ok and "yes" or "NO"}
  for _, t in ipairs{qi, qn, ki, kn, ki2, ci, cn} do t:free() end
  collectgarbage()
end
report.progress(#shapes, #shapes, "done")
report.table(rows, {{key = "shape"}, {key = "topk", fmt = "%d"},
  {key = "ms", title = "ms (median)", fmt = "%.4f"}, {key = "spread", fmt = "%.3f"},
  {key = "anchor", title = "Triton ms", fmt = "%.3f"},
  {key = "speedup", title = "x Triton", fmt = "%.1f"},
  {key = "ok", title = "bitwise = CPU"}})
