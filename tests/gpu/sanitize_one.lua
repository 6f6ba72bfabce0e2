-- sanitize_one.lua — one small call of the named backends, for
-- compute-sanitizer runs focused on a kernel:
--   compute-sanitizer --tool racecheck build/vsalab run tests/gpu/sanitize_one.lua sm100a-emu
local p = vsalab.problem.build{B = 1, H = 2, latent = {6, 7, 9}, D = 128,
  density = 0.5, ragged = true, seed = 7, device = "cuda"}
for _, name in ipairs{...} do
  local b = vsalab.backends.get(name)
  local dq, dk, dv = b.run(p)
  local res = vsalab.check.spot_check(p, {dq = dq, dk = dk, dv = dv}, {})
  print(b.name, res.passed and "pass" or "FAIL", res.errors.dq.rel_l2, res.errors.dk.rel_l2, res.errors.dv.rel_l2)
end
vsalab.synchronize()
