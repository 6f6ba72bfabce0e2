-- A block-sparse attention problem: inputs, block lists, forward outputs.
--
-- build{B=1, H=, Sq=, Skv=Sq, D=128, density= | topk=, ragged=false,
--   seed=, device (default 'cuda' when a GPU is here, else 'cpu'), latent={T,H,W} (then Sq = Skv = 64·blocks and
--   variable_block_sizes come from 4×4×4 tiles of the latent), sm_scale=
--   1/sqrt(D), forward=true}
-- -> p = {B, H, Sq, Skv, D, nq, nkv, topk, density, pairs, seed, sm_scale,
--   q, k, v, dO (bf16 [B,H,S,D], cuRAND normal), vbs ([nkv] i32),
--   q2k_idx, q2k_num, k2q_idx, k2q_num, o, lse (reference forward)}
-- Tensor seeds derive from the problem seed: q = 16·seed+1, k +2, v +3,
-- dO +4, lists +5, so any problem is regenerated from its seed alone.
local core = require "vsalab.core"

local M = {}

local function tensor(shape, dev, seed)
  return core.empty(shape, {dtype = "bf16", device = dev}):fill_randn{seed = seed}
end

-- The device build{} uses when none is given: the GPU when there is one.
function M.default_device()
  return core.cuda_available() and "cuda" or "cpu"
end

function M.build(s)
  local dev = s.device or M.default_device()
  local B, H, D = s.B or 1, assert(s.H, "H is required"), s.D or 128
  local seed = s.seed
  if type(seed) ~= "number" or seed < 0 or seed ~= math.floor(seed) or seed >= 2^48 then
    error("problem.build: seed must be an integer in [0, 2^48) (tensor seeds are 16*seed+k)", 2)
  end
  local vbs, Sq, Skv
  if s.latent then
    local nblocks
    vbs, Sq, nblocks = core.video_blocks{T = s.latent[1], H = s.latent[2],
      W = s.latent[3], device = dev}
    Skv = Sq
  else
    Sq = assert(s.Sq, "Sq (or latent) is required")
    Skv = s.Skv or Sq
    for name, v in pairs{Sq = Sq, Skv = Skv} do
      if v <= 0 or v % 64 ~= 0 then
        error(string.format("problem.build: %s = %s is not a positive multiple of 64", name, tostring(v)), 2)
      end
    end
    vbs = s.vbs or core.full({Skv / 64}, 64, {dtype = "i32", device = dev})
  end
  local nq, nkv = Sq / 64, Skv / 64
  local p = {B = B, H = H, Sq = Sq, Skv = Skv, D = D, nq = nq, nkv = nkv,
    seed = seed, sm_scale = s.sm_scale or 1 / math.sqrt(D), vbs = vbs,
    latent = s.latent, ragged = s.ragged and true or false}
  p.q = tensor({B, H, Sq, D}, dev, 16 * seed + 1)
  p.k = tensor({B, H, Skv, D}, dev, 16 * seed + 2)
  p.v = tensor({B, H, Skv, D}, dev, 16 * seed + 3)
  p.dO = tensor({B, H, Sq, D}, dev, 16 * seed + 4)
  p.q2k_idx, p.q2k_num, p.topk = core.random_topk{B = B, H = H, nq = nq,
    nkv = nkv, density = s.density, topk = s.topk, ragged = s.ragged,
    seed = 16 * seed + 5, device = dev}
  p.density = p.topk / nkv
  p.pairs = core.pair_count(p.q2k_num)
  p.k2q_idx, p.k2q_num = core.invert_indices(p.q2k_idx, p.q2k_num, nkv)
  if s.forward ~= false then
    p.o, p.lse = core.forward_ref(p.q, p.k, p.v, p.q2k_idx, p.q2k_num, vbs,
      {sm_scale = p.sm_scale})
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
function M.head(p, bh)
  local b, h = math.floor(bh / p.H), bh % p.H
  local function sl(t)
    return t:narrow(1, b + 1, 1):narrow(2, h + 1, 1):contiguous()
  end
  local q = {B = 1, H = 1, Sq = p.Sq, Skv = p.Skv, D = p.D, nq = p.nq,
    nkv = p.nkv, seed = p.seed, sm_scale = p.sm_scale,
    topk = p.topk, density = p.density}
  for _, k in ipairs{"q", "k", "v", "dO", "o", "lse", "q2k_idx", "q2k_num",
      "k2q_idx", "k2q_num"} do
    if p[k] then q[k] = sl(p[k]) end
  end
  return q
end

return M
