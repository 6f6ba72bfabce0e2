-- vsa_build_time.lua — how long problem.build takes at Wan 720P H40 on this
-- machine, random against VSA-like lists (the issue asks for seconds):
--   build/vsalab run tests/gpu/vsa_build_time.lua [device=cuda] [H=40]
-- Prints wall seconds per phase and the lists' pair sharing.
local exp = require "vsalab.experiment"
local problem = require "vsalab.problem"
local a = exp.args(arg, {device = "cuda", H = 40, density = 0.25, ell = 4})
local lat = {21, 45, 80}
local function wall(fn)
  local st = vsalab.bench(fn, {clock = "host", warmup = 0, repeats = 1})
  return st.median / 1000
end
for _, lists in ipairs{"random", "vsa:" .. a.ell} do
  local p
  local t = wall(function()
    p = problem.build{H = a.H, latent = lat, density = a.density, seed = 4242, device = a.device,
      lists = lists, forward = false}
    if a.device ~= "cpu" then vsalab.synchronize() end
  end)
  print(string.format("%-7s H%d %.0f%%: problem.build without the forward %.2f s, sharing %.4f (random expects %.4f)",
    lists, a.H, 100 * a.density, t, p.sharing, (p.topk - 1) / (p.nkv - 1)))
  if lists ~= "random" then
    local q = p.q
    print(string.format("  of which smooth_latent (one tensor) %.2f s, vsa_topk %.2f s, list_sharing %.2f s",
      wall(function() vsalab.smooth_latent(q, {latent = lat, ell = a.ell}) end),
      wall(function() vsalab.vsa_topk{q = p.q, k = p.k, density = a.density, latent = lat} end),
      wall(function() vsalab.list_sharing(p.q2k_idx, p.q2k_num, p.nkv) end)))
  end
  problem.free(p)
  collectgarbage()
end
