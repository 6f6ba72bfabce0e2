-- smoke.lua — the main job's flow on tiny shapes, on the CPU (used by the
-- tests and runnable anywhere):
--   build/vsalab run experiments/smoke.lua [device=cpu|cuda]
-- A 6×7×9 latent in 4×4×4 tiles (12 kv blocks, several partly filled),
-- H=2, D=64, three densities and a ragged variant; every backward available
-- on the device is checked against the fp64 oracle on all heads and blocks.
local exp = require "vsalab.experiment"

local a = exp.args(arg, {device = "cpu"})
local configs = {}
for _, d in ipairs{0.25, 0.5, 1.0} do
  configs[#configs + 1] = {B = 1, H = 2, D = 64, latent = {6, 7, 9}, density = d}
end
configs[#configs + 1] = {B = 2, H = 2, D = 64, latent = {6, 7, 9}, density = 0.5, ragged = true}

local rows = exp.run{name = "smoke", device = a.device, configs = configs,
  check = "full", seed = vsalab.context.seed}
for _, r in ipairs(rows) do
  if r.passed == 0 then error("smoke: " .. r.kernel .. " failed its check", 0) end
end
