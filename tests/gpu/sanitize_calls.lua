-- sanitize_calls.lua — one small call (B1 H2, 12 kv blocks of ragged lists,
-- density 0.5) of each named backend, or of every backend available on
-- CUDA when none is named, checked against the reference: the program
-- compute-sanitizer watches (tests/gpu/run.sh sanitize):
--   compute-sanitizer --tool memcheck build/vsalab run tests/gpu/sanitize_calls.lua [BACKEND...]
-- Small on purpose: the sanitizers slow a kernel by orders of magnitude.
-- Exits non-zero when an output is off.
local p = vsalab.problem.build{B = 1, H = 2, latent = {6, 7, 9}, D = 128,
  density = 0.5, ragged = true, seed = 7, device = "cuda"}
local list = {}
if select("#", ...) == 0 then
  list = vsalab.backends.available("cuda")
else
  for _, name in ipairs{...} do list[#list + 1] = vsalab.backends.get(name) end
end
local bad = 0
for _, b in ipairs(list) do
  local dq, dk, dv = b.run(p)
  local res = vsalab.check.spot_check(p, {dq = dq, dk = dk, dv = dv}, {})
  print(b.name, res.passed and "pass" or "FAIL", res.errors.dq.rel_l2, res.errors.dk.rel_l2, res.errors.dv.rel_l2)
  if not res.passed then bad = bad + 1 end
end
vsalab.synchronize()
if bad > 0 then error(bad .. " backends off the reference", 0) end
