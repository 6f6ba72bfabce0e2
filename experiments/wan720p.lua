-- wan720p.lua — the main job: the VSA backward at Wan 720P-like shapes.
--   build/vsalab run experiments/wan720p.lua [-a H=[40,12]]
--       [-a density=[0.1,0.25,0.5]] [-a lists=[random,vsa:4]] [-a block=[64,128]]
--       [-a layout=[bhsd,bshd]]
--       [kernels=default|all|NAME[,NAME...]] [reference=check|timed]
--       [check_heads=2] [check_blocks=2]
-- Latent 21×45×80 (Wan 2.1 720P: 81 frames, 720×1280, VAE stride 4×8×8,
-- patch 1×2×2) cut into the block size's tiles, as FastVideo tiles it:
--   block 64:  4×4×4 tiles, 6×12×20 = 1440 blocks, 92,160 padded tokens;
--   block 128: 2×8×8 tiles, 11×6×10 = 660 blocks, 84,480 padded tokens,
--     the VSA-128 tile of FastVideo's tests (fastvideo-kernel/tests/
--     test_vsa128_backward.py, _BLOCK_SIZE_3D = (2, 8, 8), at
--     hao-ai-lab/FastVideo 2f3d4074064e4d86f99dc784ebbaa296e6f5925f).
-- Edge tiles are clipped to the latent and their tokens packed first, the
-- rest padding: variable_block_sizes = the clipped tile's volume, as
-- construct_variable_block_sizes (fastvideo-kernel/python/fastvideo_kernel/
-- vsa_utils.py, same commit) computes it; at 128 the last frame pair has
-- 1 frame (64 valid of 128), the last row of tiles 5 of 8 rows (80 of 128).
-- D=128, B=1. For each point (head count × density × lists × block size):
-- cuRAND inputs and random top-k lists (lists=random, the
-- default), or VSA-like lists (lists=vsa:ℓ: q and k correlated over ℓ latent
-- cells, top-k kv tiles by mean-pooled q·kᵀ as FastVideo selects them),
-- inversion (timed), reference forward (o, lse: the inputs of every
-- backward), then the native backward of this GPU (sm90a on an H100/H200),
-- timed and checked against the fp64 oracle on sampled heads and blocks
-- (the full fp64 reference would take hours at this size). Rows go to the
-- results DB (--db) as they finish.
-- kernels=all adds the other backwards (sm90a-fp32, sm90a-v4, sm90a-v4-fp32,
-- sm90a-v2, sm90a-atomic, the emulated sm100a check with VSALAB_SM100_EMU=1)
-- and the timed reference backward (4.6 s a call at H40 25%: the slow part
-- of a full run); kernels=sm90a,sm90a-v2 picks some; reference=timed adds
-- the reference backward as a timed row to the default.
local exp = require "vsalab.experiment"
local sweep = require "vsalab.sweep"

local sw = sweep.new{
  axes = {{"H", {40, 12}}, {"density", {0.1, 0.25, 0.5}}, {"lists", {"random"}},
    {"block", {64, 128}}, {"layout", {"bhsd"}}},
  fixed = {B = 1, D = 128, latent = {21, 45, 80}},
}
local a = exp.args(sw:override(arg), {check_heads = 2, check_blocks = 2,
  kernels = "default", reference = "check"})
exp.int_arg(a, "check_heads", 1)
exp.int_arg(a, "check_blocks", 1)
if a.reference ~= "check" and a.reference ~= "timed" then
  require("vsalab.usage").error("argument 'reference': check or timed, got '" .. tostring(a.reference) .. "'")
end

-- docs/ANCHORS.md, H200, same shapes (public Triton VSA kernels).
local function anchors(r)
  -- The published figures are for random lists and 64-token blocks (bhsd).
  if r.H ~= 40 or (r.extra and r.extra.lists or "random") ~= "random" or (r.block or 64) ~= 64
      or (r.layout or "bhsd") ~= "bhsd" then
    return nil
  end
  local pct = math.floor(r.density * 100 + 0.5)
  if r.kernel == "invert" then
    return ({[10] = "Triton invert 3.7 ms", [25] = "Triton invert 9.3 ms"})[pct]
  end
  return ({[10] = "Triton bwd 143 ms (303 TFLOPS)", [25] = "Triton bwd 354 ms (307 TFLOPS)"})[pct]
end

exp.run{name = "wan720p", device = "cuda", sweep = sw,
  seed = vsalab.context.seed, anchors = anchors,
  kernels = exp.kernel_set("cuda", a.kernels, a.reference == "timed"),
  check = {heads = a.check_heads, q_blocks = a.check_blocks, kv_blocks = a.check_blocks}}
