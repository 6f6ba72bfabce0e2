-- A block-sparse attention problem: inputs, block lists, forward outputs.
--
-- build{B=1, H=, Sq=, Skv=Sq, D=128, block=64, density= | topk=,
--   ragged=false, seed=, device (default 'cuda' when a GPU is here, else
--   'cpu'), latent={T,H,W} (then Sq = Skv = block·blocks and
--   variable_block_sizes come from the block's tiles of the latent: 4×4×4
--   at 64, 2×8×8 at 128, vsalab.blocks), sm_scale=1/sqrt(D), forward=true,
--   lists='random' | 'vsa:ℓ', layout='bhsd' | 'bshd'}
-- block: tokens per q block and per kv block, 64 or 128 (vsalab.blocks;
--   anything else raises naming the supported sizes); Sq and Skv must be
--   multiples of it, and vbs entries lie in [0, block].
-- -> p = {B, H, Sq, Skv, D, block, nq, nkv, topk, density, pairs, seed, sm_scale,
--   layout, q, k, v, dO (bf16 [B,H,S,D] in bhsd, [B,S,H,D] in bshd,
--   cuRAND normal), vbs ([nkv] i32),
--   q2k_idx, q2k_num, k2q_idx, k2q_num, o, lse (reference forward),
--   lists ('random' or the canonical 'vsa:ℓ'), ell (vsa only), sharing}
-- Tensor seeds derive from the problem seed: q = 16·seed+1, k +2, v +3,
-- dO +4, lists +5, so any problem is regenerated from its seed alone.
-- layout='bshd' builds the same problem (the same numbers, lists and
-- forward) and hands q, k, v, dO and o over transposed to [B,S,H,D]
-- (vsalab.layouts): a bshd point's inputs are its bhsd twin's, so the two
-- layouts' outputs compare element for element. dq, dk, dv of any backward
-- come back in p.layout.
--
-- lists='vsa:ℓ' makes VSA-like lists as FastVideo's VSA selects them: q
-- and k are the cuRAND noise above turned into fields of correlation
-- length ℓ latent cells on the (t, h, w) latent (vsalab.smooth_latent),
-- and each q block keeps the top-k kv blocks by mean-pooled q·kᵀ
-- (vsalab.vsa_topk); v and dO stay plain normals. ℓ = 0 gives unsmoothed
-- inputs and nearly uniform lists. Without `latent` (Sq = Skv required) the
-- nq blocks are laid out as the most cubic tile grid nt·nh·nw = nq
-- (problem.grid_latent). Ragged lists exist only for random lists.
-- `sharing` is vsalab.list_sharing of the lists (kv blocks 2m and 2m+1
-- paired): ≈ the density for random lists, more for correlated inputs.
local core = require "vsalab.core"
local blocks = require "vsalab.blocks"
local layouts = require "vsalab.layouts"

local M = {}

local function tensor(shape, dev, seed)
  return core.empty(shape, {dtype = "bf16", device = dev}):fill_randn{seed = seed}
end

-- The device build{} uses when none is given: the GPU when there is one.
function M.default_device()
  return core.cuda_available() and "cuda" or "cpu"
end

-- The kind of lists named by `lists` (nil: random): 'random', or 'vsa'
-- and its correlation length ℓ, and the canonical name ('vsa:4', not
-- 'vsa:4.0'). Raises naming the argument otherwise (no source position: the
-- message is a usage error's, shown as it is by the experiments).
function M.parse_lists(lists)
  -- Spaces around a name ("-a 'lists=[random, vsa:4]'") are not part of it.
  if type(lists) == "string" then lists = lists:match("^%s*(.-)%s*$") end
  if lists == nil or lists == "random" then return "random", nil, "random" end
  local ell = type(lists) == "string" and lists:match("^vsa:(.+)$")
  ell = ell and tonumber(ell)
  if not ell or ell ~= ell or ell < 0 or ell > 64 then
    if lists == "vsa" then
      error("lists: 'vsa' needs a correlation length in latent cells: 'vsa:ℓ' with ℓ in [0, 64], e.g. 'vsa:4'", 0)
    end
    error("lists: expected 'random' or 'vsa:ℓ' (ℓ a number in [0, 64], e.g. 'vsa:4'), got "
      .. (type(lists) == "string" and "'" .. lists .. "'" or tostring(lists)), 0)
  end
  return "vsa", ell, string.format("vsa:%.12g", ell)
end

-- The most cubic tile grid nt·nh·nw = nblocks, nt <= nh <= nw (ties: the
-- larger nt), as a latent of the block size's tiles {tt·nt, th·nh, tw·nw}
-- (block 64: 4×4×4 tiles, so 64 blocks -> {16, 16, 16}, 2048 -> {32, 64,
-- 64}; block 128: 2×8×8 tiles, 64 blocks -> {8, 32, 32}).
function M.grid_latent(nblocks, block)
  local tile = blocks.tile(block or blocks.default)
  local best
  for a = 1, nblocks do
    if a * a * a > nblocks then break end
    if nblocks % a == 0 then
      for b = a, nblocks / a do
        if a * b * b > nblocks then break end
        if (nblocks / a) % b == 0 then
          local c = nblocks / a / b
          if not best or c / a < best[3] / best[1] or (c / a == best[3] / best[1] and a > best[1]) then
            best = {a, b, c}
          end
        end
      end
    end
  end
  return {tile[1] * best[1], tile[2] * best[2], tile[3] * best[3]}
end

-- The fields build takes (vbs and forward = false for tests' own block
-- sizes and no reference forward).
M.fields = {"B", "H", "Sq", "Skv", "latent", "D", "block", "density", "topk", "ragged", "seed",
  "device", "lists", "sm_scale", "vbs", "forward", "layout"}
local known = {}
for _, k in ipairs(M.fields) do known[k] = true end

-- build's errors name the field and carry no source position (as
-- parse_lists'): the message is the same from a script or an experiment.
local function bad(fmt, ...)
  error("problem.build: " .. string.format(fmt, ...), 0)
end

-- A value as a message shows it: strings quoted, a table by its length.
local function shown(v)
  if type(v) == "table" then return string.format("a table of %d entries", #v) end
  return type(v) == "string" and string.format("%q", v) or tostring(v)
end

-- fn(...) for a core call that reads build's fields (device, density,
-- topk, ragged, sm_scale, vbs): its error, which names the field, raised
-- as build's without this file's position.
local function call(fn, ...)
  local r = {pcall(fn, ...)}
  if not r[1] then bad("%s", (tostring(r[2]):gsub("^[^:\n]*%.lua:%d+: ", ""))) end
  return unpack(r, 2, table.maxn(r))
end

-- Field name: an integer in [lo, hi] (B, H and D were shapes' "entry 2").
local function int_field(name, v, lo, hi)
  if type(v) ~= "number" or v ~= math.floor(v) or v < lo or v > hi then
    bad("%s must be an integer in [%d, %d], got %s", name, lo, hi, shown(v))
  end
end

function M.build(s)
  if type(s) ~= "table" then bad("expected a table of fields") end
  require("vsalab.run").check_stop("problem.build")
  -- A misspelt field (ragegd=true) would build another problem unseen.
  for k in pairs(s) do
    if not known[k] then
      bad("unknown field '%s' (takes %s)", tostring(k), table.concat(M.fields, ", "))
    end
  end
  local dev = s.device or M.default_device()
  local B, H, D = s.B or 1, s.H, s.D or 128
  if H == nil then bad("H is required") end
  int_field("B", B, 1, 65535)
  int_field("H", H, 1, 65535)
  if B * H > 65535 then bad("B*H = %d exceeds 65535", B * H) end
  if type(D) ~= "number" or D % 16 ~= 0 or D < 16 or D > 256 then
    bad("D must be a multiple of 16 in [16, 256], got %s", shown(D))
  end
  local seed = s.seed
  if type(seed) ~= "number" or seed < 0 or seed ~= math.floor(seed) or seed >= 2^48 then
    bad("seed must be an integer in [0, 2^48) (tensor seeds are 16*seed+k)")
  end
  local block = s.block == nil and blocks.default or s.block
  if not blocks.supported(block) then
    -- A string "128" read as the number it spells: "block size 128 is not
    -- supported" then contradicted the list beside it.
    bad("block size %s is not supported (supported: %s)",
      type(block) == "string" and string.format("%q (a string; give the number)", block) or tostring(block),
      blocks.text())
  end
  local ok_layout, layout = pcall(layouts.check, s.layout, "problem.build: layout")
  if not ok_layout then error(layout, 0) end
  local vbs, Sq, Skv
  if s.latent then
    local l = s.latent
    if type(l) ~= "table" or #l ~= 3 then bad("latent must be {T, H, W}, got %s", shown(l)) end
    for x, name in ipairs{"T", "H", "W"} do int_field("latent " .. name, l[x], 1, 2^20) end
    local nblocks
    vbs, Sq, nblocks = call(core.video_blocks, {T = l[1], H = l[2], W = l[3], block = block, device = dev})
    Skv = Sq
  else
    Sq = s.Sq
    if Sq == nil then bad("Sq (or latent) is required") end
    Skv = s.Skv or Sq
    -- Sq first: a bad Sq is also the default Skv, and the error names what was given.
    for _, name in ipairs{"Sq", "Skv"} do
      local v = name == "Sq" and Sq or Skv
      if type(v) ~= "number" or v <= 0 or v % block ~= 0 then
        bad("%s = %s is not a positive multiple of the block size %d", name, tostring(v), block)
      end
    end
    if s.vbs ~= nil and not core.is_tensor(s.vbs) then
      bad("vbs must be an i32 tensor [%d] (Skv / block), got %s", Skv / block, type(s.vbs))
    end
    -- vbs of another block size failed later as 'q2k_num: expected shape ...'.
    if s.vbs and not (s.vbs.ndim == 1 and s.vbs.shape[1] == Skv / block) then
      bad("vbs: expected shape [%d] (Skv %d / block %d), got [%s]", Skv / block, Skv, block,
        table.concat(s.vbs.shape, ","))
    end
    vbs = s.vbs or call(core.full, {Skv / block}, block, {dtype = "i32", device = dev})
  end
  local nq, nkv = Sq / block, Skv / block
  local p = {B = B, H = H, Sq = Sq, Skv = Skv, D = D, block = block, nq = nq, nkv = nkv,
    seed = seed, sm_scale = s.sm_scale or 1 / math.sqrt(D), vbs = vbs,
    latent = s.latent, ragged = s.ragged and true or false, layout = layout}
  local kind, ell
  kind, ell, p.lists = M.parse_lists(s.lists)
  local latent = s.latent
  if kind == "vsa" then
    if s.ragged then
      bad("ragged lists are random lists (lists='vsa:ℓ' gives every q block its top-k)")
    end
    if not latent then
      if s.vbs then
        bad("lists='%s' takes its block sizes from the latent: give latent, not vbs", p.lists)
      end
      if Sq ~= Skv then
        bad("lists='%s' needs Sq = Skv (one latent), got %d and %d", p.lists, Sq, Skv)
      end
      latent = M.grid_latent(nq, block)
      p.latent = latent
    end
    p.ell = ell
  end
  p.q = call(tensor, {B, H, Sq, D}, dev, 16 * seed + 1)
  p.k = call(tensor, {B, H, Skv, D}, dev, 16 * seed + 2)
  p.v = call(tensor, {B, H, Skv, D}, dev, 16 * seed + 3)
  p.dO = call(tensor, {B, H, Sq, D}, dev, 16 * seed + 4)
  if kind == "vsa" then
    core.smooth_latent(p.q, {latent = latent, ell = ell, block = block})
    core.smooth_latent(p.k, {latent = latent, ell = ell, block = block})
    p.q2k_idx, p.q2k_num, p.topk = call(core.vsa_topk, {q = p.q, k = p.k, density = s.density,
      topk = s.topk, latent = latent, block = block})
  else
    p.q2k_idx, p.q2k_num, p.topk = call(core.random_topk, {B = B, H = H, nq = nq,
      nkv = nkv, density = s.density, topk = s.topk, ragged = s.ragged,
      seed = 16 * seed + 5, device = dev})
  end
  p.density = p.topk / nkv
  p.sharing = core.list_sharing(p.q2k_idx, p.q2k_num, nkv)
  p.pairs = core.pair_count(p.q2k_num)
  p.k2q_idx, p.k2q_num = core.invert_indices(p.q2k_idx, p.q2k_num, nkv)
  if s.forward ~= false then
    p.o, p.lse = call(core.forward_ref, p.q, p.k, p.v, p.q2k_idx, p.q2k_num, vbs,
      {sm_scale = p.sm_scale})
  end
  -- Built in bhsd (the list builders and smooth_latent read [B,H,S,D]);
  -- each tensor goes over on its own so only one extra copy is alive.
  if layout ~= "bhsd" then
    for _, name in ipairs{"q", "k", "v", "dO", "o"} do
      if p[name] then
        local t = layouts.convert(p[name], "bhsd", layout)
        p[name]:free()
        p[name] = t
      end
    end
  end
  return p
end

-- Release every tensor of p now (device memory back without waiting for GC).
function M.free(p)
  for _, v in pairs(p) do
    if core.is_tensor(v) and not v.freed then v:free() end
  end
end

-- The (b, h) slice bh (0-based b·H + h) of p as a problem of its own, with
-- contiguous copies on the same device (B = H = 1). Lists are sliced too.
-- In bshd the token tensors' head is dim 3 ([1,S,1,D] comes back).
function M.head(p, bh)
  local b, h = math.floor(bh / p.H), bh % p.H
  local token = {q = true, k = true, v = true, dO = true, o = true}
  local function sl(t, hdim)
    return t:narrow(1, b + 1, 1):narrow(hdim, h + 1, 1):contiguous()
  end
  local q = {B = 1, H = 1, Sq = p.Sq, Skv = p.Skv, D = p.D, block = p.block, nq = p.nq,
    nkv = p.nkv, seed = p.seed, sm_scale = p.sm_scale,
    topk = p.topk, density = p.density, lists = p.lists, layout = p.layout}
  for _, k in ipairs{"q", "k", "v", "dO", "o", "lse", "q2k_idx", "q2k_num",
      "k2q_idx", "k2q_num"} do
    if p[k] then q[k] = sl(p[k], token[k] and p.layout == "bshd" and 3 or 2) end
  end
  return q
end

return M
