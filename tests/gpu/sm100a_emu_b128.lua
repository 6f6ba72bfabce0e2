-- sm100a_emu_b128.lua — the Blackwell backward at 128-token blocks
-- (kernels/sm100/bsa_bwd_b128_sm100a.cu), run on an H200 over the emulated
-- tcgen05 layer, against the GPU reference and, on the small shapes, the
-- fp64 oracle:
--   build/vsalab run tests/gpu/sm100a_emu_b128.lua
-- Needs the block axis in the bindings (the block is read from
-- variable_block_sizes: Skv / 128 entries) and problem.build{block = 128}.
-- Shapes: one block; 7 blocks; ragged lists with empty ones and vbs of 0,
-- 1, 17, 64, 100 and 128 tokens with NaN in the padded K/V rows; Sq != Skv
-- and B > 1; q chunking (the dK/dV hand-off); more work items than CTAs;
-- both dQ modes (fixed point, the default; fp32). Then 20 launches of the
-- default mode compared bitwise. Exits non-zero when an output is off (rel
-- L2 > 3e-3 against the reference or the oracle, or any NaN) or a repeat
-- differs. With `hw` as its argument it runs the hardware kernel instead
-- (a Blackwell GPU: the first-contact ladder, tests/gpu/run.sh blackwell).
local P = vsalab.problem
local EMULATE = arg[1] ~= "hw"
local BLK = 128
local TOL = 3e-3
local bad = 0
local T0 = os.clock()

local function nan_pad(p, vbs)
  local k, v = p.k:to("cpu"), p.v:to("cpu")
  for j = 1, #vbs do
    for r = vbs[j] + 1, BLK do
      local row = (j - 1) * BLK + r
      for b = 1, p.B do
        for h = 1, p.H do
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
  {B = 1, H = 1, Sq = 128, Skv = 128, topk = 1, oracle = true},
  {B = 1, H = 2, Sq = 896, Skv = 896, density = 0.5, oracle = true},      -- 7 blocks
  {B = 2, H = 3, Sq = 640, Skv = 896, density = 0.5, ragged = true, vbs = true, oracle = true},
  {B = 1, H = 2, Sq = 2560, Skv = 1152, density = 0.4, ragged = true, q_chunk = 6}, -- 3 blocks a chunk
  {B = 1, H = 8, Sq = 8192, Skv = 8192, density = 0.25},                   -- 512 items > 132 CTAs
}
for n, s in ipairs(shapes) do
  local spec = {B = s.B, H = s.H, Sq = s.Sq, Skv = s.Skv, D = 128, block = BLK,
    density = s.density, topk = s.topk, ragged = s.ragged, seed = 300 + n, device = "cuda"}
  local vbs
  if s.vbs then
    vbs = {}
    for j = 1, s.Skv / BLK do vbs[j] = ({128, 0, 64, 100, 17, 128, 1})[(j - 1) % 7 + 1] end
    spec.vbs = vsalab.from_table(vbs, {dtype = "i32", device = "cuda"})
  end
  local p = P.build(spec)
  local ref = {vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs,
    {out_dtype = "f32"})}
  local ora
  if s.oracle then
    ora = vsalab.oracle{q = p.q, k = p.k, v = p.v, dO = p.dO, o = p.o, lse = p.lse,
      q2k_idx = p.q2k_idx, q2k_num = p.q2k_num, variable_block_sizes = p.vbs, sm_scale = p.sm_scale}
  end
  if vbs then nan_pad(p, vbs) end
  for _, det in ipairs{true, false} do
    local opts = {emulate = EMULATE, deterministic = det, q_chunk = s.q_chunk}
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
        line[#line + 1] = string.format("%s %.2e (nf %d)", name, c.rel_l2, c.nonfinite)
        if not (c.rel_l2 <= TOL and c.nonfinite == 0) then bad = bad + 1 end
      end
      if ora then
        local res = vsalab.check_outputs({dq = a, dk = b2, dv = c2}, ora)
        line[#line + 1] = "oracle " .. (res.passed and "pass" or "FAIL")
        if not res.passed then
          bad = bad + 1
          print(vsalab.json.encode(res.errors))
        end
      end
      print(string.format("shape %d B%d H%d Sq%d Skv%d block %d %s: %s", n, s.B, s.H, s.Sq, s.Skv,
        BLK, mode, table.concat(line, ", ")))
      for _, t in ipairs(got) do t:free() end
    end
  end
  P.free(p)
end

-- The default (fixed-point) mode gives the same bits on every launch.
do
  local p = P.build{B = 2, H = 4, Sq = 2048, D = 128, block = BLK, density = 0.25, seed = 42,
    device = "cuda"}
  local function run()
    return vsalab.backward_sm100a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs,
      {emulate = EMULATE, q_chunk = 6})
  end
  local first, worst = {run()}, 0
  for _ = 1, 20 do
    local o = {run()}
    for x = 1, 3 do
      local c = vsalab.compare(o[x], first[x])
      if c.max_abs > worst or c.nonfinite > 0 then worst = math.max(worst, c.max_abs, c.nonfinite) end
      o[x]:free()
    end
  end
  P.free(p)
  print(string.format("block 128 fixed point: 20 launches, max |difference| to the first %.3g (must be 0)", worst))
  if worst ~= 0 then bad = bad + 1 end
end

if bad > 0 then error(bad .. " sm100a-emu block-128 checks failed", 0) end
print(string.format((EMULATE and "sm100a-emu" or "sm100a") .. " block 128: every output within %.0e and the oracle, bitwise repeats; %.1f s of host time",
  TOL, os.clock() - T0))
