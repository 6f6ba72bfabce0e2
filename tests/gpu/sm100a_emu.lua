-- sm100a_emu.lua — the Blackwell backward's source, run on an H200 over the
-- emulated tcgen05 layer (kernels/sm100/tcgen05_emu.cuh), against the GPU
-- reference on shapes that exercise every path of the kernel:
--   build/vsalab run tests/gpu/sm100a_emu.lua
-- odd block counts (an odd last step), ragged lists with empty ones, vbs
-- padding with NaN in the padded K/V slots, Sq != Skv, B > 1, q chunking
-- (the dK/dV hand-off), more work items than CTAs, both dQ modes (fixed
-- point, the default; fp32). Then 20 launches of the default mode compared
-- bitwise. Exits non-zero when any output is off (rel L2 >= 1e-2 or NaN).
local P = vsalab.problem
local bad = 0
local T0 = os.clock()

local function nan_pad(p, vbs)
  -- Padded K/V slots (row >= vbs) hold NaN: nothing of them may reach an
  -- output (the kernel zeroes them in shared memory).
  local k, v = p.k:to("cpu"), p.v:to("cpu")
  local B, H, Skv = p.B, p.H, p.Skv
  for j = 1, #vbs do
    for r = vbs[j] + 1, 64 do
      local row = (j - 1) * 64 + r
      for b = 1, B do
        for h = 1, H do
          k:select(1, b):select(1, h):narrow(1, row, 1):fill(0 / 0)
          v:select(1, b):select(1, h):narrow(1, row, 1):fill(0 / 0)
        end
      end
    end
  end
  p.k:copy_(k)
  p.v:copy_(v)
end

local shapes = {
  {B = 1, H = 1, Sq = 64, Skv = 64, topk = 1},
  {B = 1, H = 2, Sq = 448, Skv = 448, density = 0.5},              -- 7 blocks: odd steps
  {B = 2, H = 3, Sq = 320, Skv = 448, density = 0.5, ragged = true, vbs = true},
  {B = 1, H = 2, Sq = 1280, Skv = 576, density = 0.4, ragged = true, q_chunk = 3},
  {B = 1, H = 8, Sq = 4096, Skv = 4096, density = 0.25},             -- 512 items > 132 CTAs
}
for n, s in ipairs(shapes) do
  local spec = {B = s.B, H = s.H, Sq = s.Sq, Skv = s.Skv, D = 128, density = s.density,
    topk = s.topk, ragged = s.ragged, seed = 200 + n, device = "cuda"}
  local vbs
  if s.vbs then
    vbs = {}
    for j = 1, s.Skv / 64 do vbs[j] = ({64, 0, 32, 64, 17, 64, 1})[(j - 1) % 7 + 1] end
    spec.vbs = vsalab.from_table(vbs, {dtype = "i32", device = "cuda"})
  end
  local p = P.build(spec)
  local ref = {vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs,
    {out_dtype = "f32"})}
  if vbs then nan_pad(p, vbs) end
  for _, det in ipairs{true, false} do
    local opts = {emulate = true, deterministic = det, q_chunk = s.q_chunk}
    local ok, a, b2, c2 = pcall(vsalab.backward_sm100a, p.dO, p.q, p.k, p.v, p.o, p.lse,
      p.k2q_idx, p.k2q_num, p.vbs, opts)
    local mode = (det and "fixed" or "fp32") .. (s.q_chunk and (" q_chunk " .. s.q_chunk) or "")
    if not ok then
      print(string.format("shape %d %s: error %s", n, mode, tostring(a)))
      bad = bad + 1
    else
      local got, line = {a, b2, c2}, {}
      for x, name in ipairs{"dq", "dk", "dv"} do
        local c = vsalab.compare(got[x], ref[x])
        line[#line + 1] = string.format("%s %.2e (nf %d, ratio %.4f)", name, c.rel_l2, c.nonfinite, c.norm_ratio)
        if not (c.rel_l2 < 1e-2 and c.nonfinite == 0) then bad = bad + 1 end
      end
      print(string.format("shape %d B%d H%d Sq%d Skv%d %s: %s", n, s.B, s.H, s.Sq, s.Skv, mode,
        table.concat(line, ", ")))
    end
  end
  P.free(p)
end
if bad > 0 then error(bad .. " sm100a-emu outputs off", 0) end
print("sm100a-emu: all outputs within 1e-2 of the reference")

-- The default (fixed-point) mode gives the same bits on every launch.
dofile("tests/gpu/bitwise_repeat.lua")("sm100a-emu fixed point (q_chunk 5)", function(p)
  return vsalab.backward_sm100a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs,
    {emulate = true, q_chunk = 5})
end, 20)
print(string.format("sm100a_emu.lua: %.1f s of host time", os.clock() - T0))
