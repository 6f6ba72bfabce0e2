-- sanitize.lua — a small run of every GPU kernel, for compute-sanitizer:
--   compute-sanitizer --tool memcheck build/vsalab run tests/gpu/sanitize.lua
local p = vsalab.problem.build{B = 1, H = 2, latent = {6, 7, 9}, D = 128,
  density = 0.5, ragged = true, seed = 7, device = "cuda"}
for _, b in ipairs(vsalab.backends.available("cuda")) do
  local dq, dk, dv = b.run(p)
  local res = vsalab.check.spot_check(p, {dq = dq, dk = dk, dv = dv}, {})
  print(b.name, res.passed and "pass" or "FAIL", res.errors.dq.rel_l2, res.errors.dk.rel_l2, res.errors.dv.rel_l2)
end
vsalab.synchronize()
