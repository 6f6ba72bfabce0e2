-- profile.lua — one sm90a launch at B1 H8 S32768 25% for Nsight Compute:
--   ncu --clock-control none -k regex:bwd_kernel -c 1 --section SpeedOfLight \
--       --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
--       build/vsalab run tests/gpu/profile.lua
local p = vsalab.problem.build{B = 1, H = 8, Sq = 32768, D = 128, density = 0.25,
  seed = 5, device = "cuda"}
local dq, dk, dv = vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse,
  p.k2q_idx, p.k2q_num, p.vbs, {canonical = false})
vsalab.synchronize()
print("profiled sm90a at B1 H8 S32768 25%, pairs", p.pairs)
