-- seed_sweep.lua — the public Blackwell design's table shape on this GPU:
-- B=1, H=8, D=128, 25% density, 4k to 131k tokens (524k with
-- tokens=...,524288), every backward available here, timed (kernel only
-- where the backend allows) and spot-checked against the fp64 oracle.
--   build/vsalab run experiments/seed_sweep.lua [tokens=4096,8192] [reference=0|1]
-- The reference joins only up to 16k tokens unless reference=1.
local exp = require "vsalab.experiment"
local backends = require "vsalab.backends"

local a = exp.args(arg, {tokens = {4096, 8192, 16384, 32768, 65536, 131072},
  density = 0.25, reference = 0, check_blocks = 2})
local tokens = type(a.tokens) == "table" and a.tokens or {a.tokens}
local configs = {}
for _, S in ipairs(tokens) do
  configs[#configs + 1] = {B = 1, H = 8, D = 128, Sq = S, density = a.density,
    skip = (a.reference == 0 and S > 16384) and {reference = true} or nil}
end

-- ../shared/ANCHORS.md: public Triton VSA backward, H200, B1 H8 25%.
local triton = {[4096] = 225, [8192] = 296, [16384] = 328, [32768] = 335,
  [65536] = 333, [131072] = 293}
exp.run{name = "seed_sweep", device = "cuda", configs = configs,
  seed = vsalab.context.seed,
  check = {q_blocks = a.check_blocks, kv_blocks = a.check_blocks},
  anchors = function(r)
    local t = triton[r.Sq]
    if not t or r.kernel == "invert" then return nil end
    local s = string.format("Triton %d TFLOPS", t)
    if r.tflops then s = s .. string.format(" (%.2fx)", r.tflops / t) end
    return s
  end}
