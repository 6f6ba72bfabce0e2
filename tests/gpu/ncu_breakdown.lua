-- breakdown.lua — one timed-path call of sm90a (v3) per shape and dQ mode
-- (fp32, then the fixed-point deterministic mode), for a per-kernel time
-- split (preprocess: Delta, zeroing, work order, and the K/V statistics of
-- the fixed-point bound; its row exponents; main kernel; dQ finish) under
-- Nsight Compute
-- (tests/gpu/run.sh breakdown):
--   ncu --metrics gpu__time_duration.sum \
--       -k regex:"prep_kernel|row_exp_kernel|bwd_ws_kernel|dq_finish" \
--       build/vsalab run tests/gpu/breakdown.lua
local shapes = {4096, 8192, 16384}
for _, S in ipairs(shapes) do
  local p = vsalab.problem.build{B = 1, H = 8, Sq = S, D = 128, density = 0.25,
    seed = 7, device = "cuda"}
  for _, det in ipairs{false, true} do
    local dq, dk, dv = vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse,
      p.k2q_idx, p.k2q_num, p.vbs, {canonical = false, deterministic = det})
    vsalab.synchronize()
    print(("S=%d pairs=%d deterministic=%s"):format(S, p.pairs, tostring(det)))
    dq:free(); dk:free(); dv:free()
  end
end
