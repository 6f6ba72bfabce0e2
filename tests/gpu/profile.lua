-- profile.lua — one launch each of sm90a v3 (default) and v2 at B1 H8
-- S32768 25% for Nsight Compute (tests/gpu/run.sh profile):
--   ncu --clock-control none -k regex:"bwd_(ws_)?kernel" -c 2 --section SpeedOfLight \
--       build/vsalab run tests/gpu/profile.lua
local p = vsalab.problem.build{B = 1, H = 8, Sq = 32768, D = 128, density = 0.25,
  seed = 5, device = "cuda"}
for _, version in ipairs{3, 2} do
  local dq, dk, dv = vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse,
    p.k2q_idx, p.k2q_num, p.vbs, {canonical = false, version = version})
  vsalab.synchronize()
  dq:free(); dk:free(); dv:free()
end
print("profiled sm90a v3 and v2 at B1 H8 S32768 25%, pairs", p.pairs)
