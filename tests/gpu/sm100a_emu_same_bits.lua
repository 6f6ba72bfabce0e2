-- sm100a_emu_same_bits.lua — the emulator's batched MMAs give the same bits
-- as before: run the emulated sm100a (64-token kernel, both dQ modes; the
-- fp32 mode's arrival order varies, so only the fixed-point mode is
-- compared bitwise) on fixed problems and either save the outputs or
-- compare them with saved ones:
--   build/vsalab run tests/gpu/sm100a_emu_same_bits.lua save DIR     (old build)
--   build/vsalab run tests/gpu/sm100a_emu_same_bits.lua check DIR    (new build)
-- check exits non-zero unless every output is bitwise equal (max |a-b| 0)
-- to the saved one; it also prints the emulated call's host time.
local mode, dir = arg[1], arg[2]
if (mode ~= "save" and mode ~= "check") or not dir then
  error("usage: sm100a_emu_same_bits.lua save|check DIR", 0)
end
local P = vsalab.problem
local shapes = {
  {B = 1, H = 2, Sq = 448, Skv = 448, density = 0.5, seed = 7},
  {B = 2, H = 3, Sq = 320, Skv = 448, density = 0.5, ragged = true, seed = 8, q_chunk = 3},
  {B = 1, H = 8, Sq = 4096, Skv = 4096, density = 0.25, seed = 9},
}
local bad = 0
for n, s in ipairs(shapes) do
  local p = P.build{B = s.B, H = s.H, Sq = s.Sq, Skv = s.Skv, D = 128, density = s.density,
    ragged = s.ragged, seed = s.seed, device = "cuda"}
  local t0 = os.clock()
  local out = {vsalab.backward_sm100a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num,
    p.vbs, {emulate = true, q_chunk = s.q_chunk})}
  local dt = os.clock() - t0
  for x, name in ipairs{"dq", "dk", "dv"} do
    local path = string.format("%s/shape%d_%s.npy", dir, n, name)
    if mode == "save" then
      vsalab.npy_save(path, out[x])
    else
      local c = vsalab.compare(out[x]:to("cpu"), vsalab.npy_load(path))
      print(string.format("shape %d %s: max |a-b| %g, nonfinite %d", n, name, c.max_abs, c.nonfinite))
      if c.max_abs ~= 0 or c.nonfinite ~= 0 then bad = bad + 1 end
    end
  end
  print(string.format("shape %d: %.3f s host time for the emulated call", n, dt))
  P.free(p)
end
if bad > 0 then error(bad .. " outputs differ from the saved ones", 0) end
print(mode == "save" and "saved" or "sm100a-emu: bitwise equal to the saved outputs")
