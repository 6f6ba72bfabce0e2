-- sm90a_quick.lua — a fast first look at the native Hopper backward against
-- the reference on small shapes, with per-slab error detail for debugging:
--   build/vsalab run tests/gpu/sm90a_quick.lua
-- Exits non-zero when any output is off (rel L2 >= 1e-2 or NaN).
local P = vsalab.problem
local bad = 0

local function detail(name, x, r, rows, cols)
  -- rel L2 per 16-row slab and per 32-column group of the first (b, h).
  local xs, rs = x:select(1, 1):select(1, 1), r:select(1, 1):select(1, 1)
  local lines = {}
  for r0 = 0, math.min(rows, 128) - 1, 16 do
    local parts = {}
    for c0 = 0, cols - 1, 32 do
      local c = vsalab.compare(xs:narrow(1, r0 + 1, 16):narrow(2, c0 + 1, 32):contiguous(),
        rs:narrow(1, r0 + 1, 16):narrow(2, c0 + 1, 32):contiguous())
      parts[#parts + 1] = string.format("%.1e", c.nonfinite > 0 and 0/0 or c.rel_l2)
    end
    lines[#lines + 1] = string.format("  %s rows %3d-%3d: %s", name, r0, r0 + 15, table.concat(parts, " "))
  end
  print(table.concat(lines, "\n"))
end

local shapes = {
  {B = 1, H = 1, Sq = 64, Skv = 64, topk = 1},
  {B = 1, H = 2, Sq = 512, Skv = 512, density = 0.25},
  {B = 2, H = 3, Sq = 320, Skv = 448, density = 0.5, ragged = true, vbs = true},
  {B = 1, H = 4, Sq = 4096, Skv = 4096, density = 0.25},
}
for n, s in ipairs(shapes) do
  local spec = {B = s.B, H = s.H, Sq = s.Sq, Skv = s.Skv, D = 128, density = s.density,
    topk = s.topk, ragged = s.ragged, seed = 100 + n, device = "cuda"}
  if s.vbs then
    local t = {}
    for j = 1, s.Skv / 64 do t[j] = ({64, 0, 32, 64, 17, 64, 1})[(j - 1) % 7 + 1] end
    spec.vbs = vsalab.from_table(t, {dtype = "i32", device = "cuda"})
  end
  local p = P.build(spec)
  local ref = {vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, {out_dtype = "f32"})}
  for _, mode in ipairs{"v4", "v4-det", "v4-chunk2", "v4-det-chunk3", "v3", "v3-det",
      "v3-chunk2", "v3-det-chunk3", "v2", "v1"} do
  local opts = {version = tonumber(mode:sub(2, 2)), deterministic = mode:find("det") ~= nil,
    q_chunk = tonumber(mode:match("chunk(%d)"))}
  local ok, a, b2, c2 = pcall(vsalab.backward_sm90a, p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, opts)
  if not ok then
    print("shape " .. n .. ": error " .. tostring(a))
    bad = bad + 1
  else
    local got = {a, b2, c2}
    local line = {}
    for x, name in ipairs{"dq", "dk", "dv"} do
      local c = vsalab.compare(got[x], ref[x])
      line[#line + 1] = string.format("%s %.2e (nf %d, ratio %.4f)", name, c.rel_l2, c.nonfinite, c.norm_ratio)
      if not (c.rel_l2 < 1e-2 and c.nonfinite == 0) then
        bad = bad + 1
        detail(name, got[x], ref[x], x == 1 and p.Sq or p.Skv, 128)
      end
    end
    print(string.format("shape %d B%d H%d Sq%d Skv%d %s: %s", n, s.B, s.H, s.Sq, s.Skv, mode, table.concat(line, ", ")))
  end
  end
  P.free(p)
end

-- Block 128: v5 (128-row tiles; what v3, the default, runs at 128) beside
-- v4 on 64-token sub-block lists, in both modes, chunked by an even and an odd q_chunk
-- (v5 rounds an odd one up to whole 128-token blocks); vbs in [0, 128].
local shapes128 = {
  {B = 1, H = 1, Sq = 128, Skv = 128, topk = 1},
  {B = 1, H = 2, Sq = 1024, Skv = 1024, density = 0.25},
  {B = 2, H = 3, Sq = 640, Skv = 896, density = 0.5, ragged = true, vbs = true},
  {B = 1, H = 4, Sq = 4096, Skv = 4096, density = 0.25},
}
for n, s in ipairs(shapes128) do
  local spec = {B = s.B, H = s.H, Sq = s.Sq, Skv = s.Skv, D = 128, block = 128, density = s.density,
    topk = s.topk, ragged = s.ragged, seed = 200 + n, device = "cuda"}
  if s.vbs then
    local t = {}
    for j = 1, s.Skv / 128 do t[j] = ({128, 0, 100, 64, 17, 128, 1})[(j - 1) % 7 + 1] end
    spec.vbs = vsalab.from_table(t, {dtype = "i32", device = "cuda"})
  end
  local p = P.build(spec)
  local ref = {vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, {out_dtype = "f32"})}
  for _, mode in ipairs{"v5", "v5-det", "v5-chunk2", "v5-det-chunk3", "v5-chunk4", "v4", "v4-det", "v3", "v3-det"} do
    local opts = {version = tonumber(mode:sub(2, 2)), deterministic = mode:find("det") ~= nil,
      q_chunk = tonumber(mode:match("chunk(%d)"))}
    local ok, a, b2, c2 = pcall(vsalab.backward_sm90a, p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, opts)
    if not ok then
      print("block 128 shape " .. n .. ": error " .. tostring(a))
      bad = bad + 1
    else
      local got = {a, b2, c2}
      local line = {}
      for x, name in ipairs{"dq", "dk", "dv"} do
        local c = vsalab.compare(got[x], ref[x])
        line[#line + 1] = string.format("%s %.2e (nf %d, ratio %.4f)", name, c.rel_l2, c.nonfinite, c.norm_ratio)
        if not (c.rel_l2 < 1e-2 and c.nonfinite == 0) then
          bad = bad + 1
          detail(name, got[x], ref[x], x == 1 and p.Sq or p.Skv, 128)
        end
      end
      print(string.format("block 128 shape %d B%d H%d Sq%d Skv%d %s: %s", n, s.B, s.H, s.Sq, s.Skv, mode, table.concat(line, ", ")))
    end
  end
  P.free(p)
end
if bad > 0 then error(bad .. " sm90a outputs off", 0) end
print("sm90a quick check: all outputs within 1e-2 of the reference")

-- The deterministic mode must give the same bits on every launch.
dofile("tests/gpu/bitwise_repeat.lua")("v3-det (q_chunk 5)", function(p)
  return vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs,
    {deterministic = true, q_chunk = 5})
end, 20)
dofile("tests/gpu/bitwise_repeat.lua")("v4-det (q_chunk 5)", function(p)
  return vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs,
    {version = 4, deterministic = true, q_chunk = 5})
end, 20)
dofile("tests/gpu/bitwise_repeat.lua")("v5-det at block 128 (q_chunk 6)", function(p)
  return vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs,
    {version = 5, deterministic = true, q_chunk = 6})
end, 20, 128)
