-- smoke.lua — the main job's flow on tiny shapes, on the CPU (used by the
-- tests and runnable anywhere):
--   build/vsalab run experiments/smoke.lua [-a density=[0.5]]
--       [-a lists=[random,vsa:2]] [-a block=[64,128]] [-a layout=[bhsd,bshd]] [device=cuda]
--       [kernels=all|default|NAME[,NAME...]]
-- A 6×7×9 latent in the block size's tiles (block 64, the default: 4×4×4,
-- 12 kv blocks; -a block=128: 2×8×8, 6 kv blocks; several partly filled),
-- H=2, D=64, three densities and a ragged B=2 variant (random lists only;
-- axis `lists`: random or vsa:ℓ, see vsalab.problem); every backward
-- available on the device (or those kernels= names; each must run there)
-- is checked against the fp64 oracle on all heads and blocks.
local exp = require "vsalab.experiment"
local sweep = require "vsalab.sweep"

local sw = sweep.new{
  axes = {{"density", {0.25, 0.5, 1.0}}, {"lists", {"random"}}, {"block", {64}}, {"layout", {"bhsd"}}},
  zip = {{"B", "ragged"}, {1, false}, {2, true}},
  fixed = {H = 2, D = 64, latent = {6, 7, 9}},
  skip = function(p)
    if p.ragged and p.density ~= 0.5 then return "ragged only at 50%" end
    if p.ragged and p.lists ~= "random" then return "ragged lists are random lists" end
  end,
}
local a = exp.args(sw:override(arg), {device = "cpu", kernels = "all"})
local rows = exp.run{name = "smoke", device = a.device, sweep = sw,
  kernels = exp.kernel_set(a.device, a.kernels), check = "full", seed = vsalab.context.seed}
-- A failed check fails the run (exit 1), saying which and why, no traceback.
for _, r in ipairs(rows) do
  if r.passed == 0 then
    require("vsalab.usage").fail("smoke: " .. r.kernel .. " failed its check"
      .. (r.note and (": " .. r.note) or ""))
  end
end
