-- seed_sweep.lua — the public Blackwell design's table shape on this GPU:
-- B=1, H=8, D=128, 25% density, 4k to 131k tokens (524k with
-- -a Sq[pow2]=[12:19]), every backward available here, timed (kernel only
-- where the backend allows) and spot-checked against the fp64 oracle.
--   build/vsalab run experiments/seed_sweep.lua [-a Sq=[4096,8192]]
--       [-a H=[8,40]] [-a density=0.1] [-a lists=[random,vsa:4]] [-a block=[64,128]]
--       [-a layout=[bhsd,bshd]] [reference=0|1]
--       [check_blocks=2] [kernels=all|default|NAME[,NAME...]]
-- The reference joins only up to 16k tokens unless reference=1. lists=vsa:ℓ
-- lays the blocks out as the most cubic tile grid (4k: a 16×16×16 latent;
-- vsalab.problem.grid_latent) and selects VSA-like lists there. kernels=
-- picks backwards (default: all available; peers= adds external ones, name
-- them too when picking).
local exp = require "vsalab.experiment"
local sweep = require "vsalab.sweep"

local sw = sweep.new{
  axes = {{"Sq", sweep.pow2(12, 17)}, {"H", {8}}, {"density", {0.25}}, {"lists", {"random"}},
    {"block", {64}}, {"layout", {"bhsd"}}},
  fixed = {B = 1, D = 128},
}
local a = exp.args(sw:override(arg), {reference = 0, check_blocks = 2, kernels = "all"})
exp.int_arg(a, "reference", 0, 1)
exp.int_arg(a, "check_blocks", 1)
local configs = {}
for _, p in ipairs(sw:points()) do
  if a.reference == 0 and p.Sq > 16384 then p.skip = {reference = true} end
  configs[#configs + 1] = p
end

-- docs/ANCHORS.md: public Triton VSA backward, H200, B1 H8 25%.
local triton = {[4096] = 225, [8192] = 296, [16384] = 328, [32768] = 335,
  [65536] = 333, [131072] = 293}
exp.run{name = "seed_sweep", device = "cuda", configs = configs,
  kernels = exp.kernel_set("cuda", a.kernels),
  seed = vsalab.context.seed,
  check = {q_blocks = a.check_blocks, kv_blocks = a.check_blocks},
  anchors = function(r)
    local t = triton[r.Sq]
    if not t or r.kernel == "invert" or r.density ~= 0.25 or (r.block or 64) ~= 64
        or (r.layout or "bhsd") ~= "bhsd"
        or (r.extra and r.extra.lists or "random") ~= "random" then return nil end
    local s = string.format("Triton %d TFLOPS", t)
    if r.tflops then s = s .. string.format(" (%.2fx)", r.tflops / t) end
    return s
  end}
