-- qchunk_table.lua — sm90a v3's q_chunk (q blocks per chunk of the q range)
-- at the shapes where the Q/dO/dQ working set of one head outgrows L2:
--   build/vsalab run tests/gpu/qchunk_table.lua (tests/gpu/run.sh qchunk-table)
-- Kernel-only medians of 10 CUDA-event samples, TFLOPS on selected blocks;
-- each setting is timed twice, in mirrored order.
local shapes = {
  {label = "B1 H8 S65536 25%", B = 1, H = 8, Sq = 65536, density = 0.25},
  {label = "B1 H8 S131072 25%", B = 1, H = 8, Sq = 131072, density = 0.25},
  {label = "Wan720P H40 25%", B = 1, H = 40, latent = {21, 45, 80}, density = 0.25},
}
for _, s in ipairs(shapes) do
  local spec = {D = 128, seed = 11, device = "cuda"}
  for k, v in pairs(s) do if k ~= "label" then spec[k] = v end end
  local p = vsalab.problem.build(spec)
  local dq, dk, dv = vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs)
  local line = {}
  -- Twice, interleaved, so clock drift over the sweep shows as disagreement.
  for _, qc in ipairs{0, 1024, 768, 512, 384, 384, 512, 768, 1024, 0} do
    local opts = {poison = false, canonical = false, q_chunk = qc, out = {dq, dk, dv}}
    local st = vsalab.bench(function()
      vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, opts)
    end, {warmup = 2, repeats = 10})
    line[#line + 1] = string.format("q_chunk %d: %.3f ms %.1f TF", qc, st.median,
      vsalab.tflops(p.pairs, 128, st.median))
  end
  print(s.label .. ": " .. table.concat(line, " | "))
  dq:free(); dk:free(); dv:free()
  vsalab.problem.free(p)
end
