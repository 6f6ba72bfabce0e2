-- wan720p.lua — the main job: the VSA backward at Wan 720P-like shapes.
--   build/vsalab run experiments/wan720p.lua [heads=40,12]
--       [densities=0.1,0.25,0.5] [check_heads=2] [check_blocks=2]
-- Latent 21×45×80 cut into 4×4×4 tiles: 1440 kv blocks (partly filled at the
-- edges), 92,160 padded tokens, D=128, B=1. For each head count and density:
-- cuRAND inputs, random top-k lists, inversion (timed), reference forward,
-- then every backward available here, timed and checked against the fp64
-- oracle on sampled heads and blocks (the full fp64 reference would take
-- hours at this size). Rows go to the results DB (--db) as they finish.
local exp = require "vsalab.experiment"

local a = exp.args(arg, {heads = {40, 12}, densities = {0.1, 0.25, 0.5},
  check_heads = 2, check_blocks = 2})
local heads = type(a.heads) == "table" and a.heads or {a.heads}
local dens = type(a.densities) == "table" and a.densities or {a.densities}

if #heads == 0 or #dens == 0 then error("wan720p: heads= and densities= need at least one value", 0) end
local configs = {}
for _, H in ipairs(heads) do
  for _, d in ipairs(dens) do
    configs[#configs + 1] = {B = 1, H = H, D = 128, latent = {21, 45, 80}, density = d}
  end
end

-- ../shared/ANCHORS.md, H200, same shapes (public Triton VSA kernels).
local function anchors(r)
  if r.H ~= 40 then return nil end
  local pct = math.floor(r.density * 100 + 0.5)
  if r.kernel == "invert" then
    return ({[10] = "Triton invert 3.7 ms", [25] = "Triton invert 9.3 ms"})[pct]
  end
  return ({[10] = "Triton bwd 143 ms (303 TFLOPS)", [25] = "Triton bwd 354 ms (307 TFLOPS)"})[pct]
end

exp.run{name = "wan720p", device = "cuda", configs = configs,
  seed = vsalab.context.seed, anchors = anchors,
  check = {heads = a.check_heads, q_blocks = a.check_blocks, kv_blocks = a.check_blocks}}
