-- sm100a_one.lua — one sm100a-emu call on a given shape, for debugging:
--   build/vsalab run tests/gpu/sm100a_one.lua B H Sq Skv density q_chunk ragged
local B, H, Sq, Skv, dens, qc, rag = ...
local p = vsalab.problem.build{B = tonumber(B), H = tonumber(H), Sq = tonumber(Sq),
  Skv = tonumber(Skv), D = 128, density = tonumber(dens), ragged = rag == "1", seed = 7,
  device = "cuda"}
local dq, dk, dv = vsalab.backward_sm100a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num,
  p.vbs, {emulate = true, q_chunk = tonumber(qc)})
vsalab.synchronize()
local r = vsalab.check.spot_check(p, {dq = dq, dk = dk, dv = dv}, {})
print(r.passed and "pass" or "FAIL", r.errors.dq.rel_l2, r.errors.dk.rel_l2, r.errors.dv.rel_l2)
