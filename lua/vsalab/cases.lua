-- The correctness cases of docs/CASES.md, written once for every
-- backward. run(backend, env) returns one result per check:
--   {case=, name=, check=, passed=, detail=, seed=, errors={...}}
-- env = {device='cpu'|'cuda', seed=, D=64, only={ids}, launches_scale=1,
--   blocks={64, 128}}: every case runs at each block size of env.blocks
--   (default: every supported size, vsalab.blocks) that the backend
--   supports; env.block is the current one while a case runs, and each
--   result records its block. Shapes are in blocks, so a case means the
--   same at every size (vbs scale with it: a half block is block/2).
-- env.layouts = {'bhsd', 'bshd'} (default {'bhsd'}) runs every case in each
-- token layout the backend takes: a case builds and checks its problem in
-- bhsd as written, and the backend alone sees it in the run's layout
-- (q, k, v, o, dO transposed to [B,S,H,D] before the call, dq, dk, dv back
-- after it), so every check means the same in both and the kernels' bshd
-- indexing meets every case (64-bit offsets, empty blocks, list tails).
-- Each result records its layout.
-- Oracle: fp64 attention from the same bf16 inputs (vsalab.oracle, its own
-- forward). Outputs of the reference kernels are NaN-poisoned before each
-- launch by the bindings; a NaN anywhere fails a check.
-- Cases marked gpu=true need GPU-sized shapes and run only on 'cuda'.
local core = require "vsalab.core"
local check = require "vsalab.check"

local M = {}

local INT32_MAX = 2147483647

-- ----------------------------------------------------------------------------
-- building blocks

-- A problem from explicit lists at block size env.block. s = {B, H, nq,
-- nkv, D, rows=function(b, h, i) -> list of kv ids, vbs={...} (default all
-- env.block), sigma=1, width=, pad=-1, seed}. Returns p like
-- vsalab.problem.build.
local function make(env, s)
  local dev = env.device
  local B, H, D = s.B or 1, s.H or 1, s.D or env.D
  local nq, nkv = s.nq, s.nkv
  local seed = s.seed
  local sigma = s.sigma or 1
  local function randn(S, k, std)
    return core.empty({B, H, S, D}, {dtype = "bf16", device = dev})
      :fill_randn{seed = 16 * seed + k, std = std}
  end
  local bs = env.block or 64
  local p = {B = B, H = H, D = D, block = bs, nq = nq, nkv = nkv, Sq = bs * nq,
    Skv = bs * nkv, seed = seed, sm_scale = 1 / math.sqrt(D)}
  p.q, p.k = randn(p.Sq, 1, sigma), randn(p.Skv, 2, sigma)
  p.v, p.dO = randn(p.Skv, 3, 1), randn(p.Sq, 4, 1)
  local width = s.width or nkv
  local idx, num = {}, {}
  for b = 0, B - 1 do
    idx[b + 1], num[b + 1] = {}, {}
    for h = 0, H - 1 do
      idx[b + 1][h + 1], num[b + 1][h + 1] = {}, {}
      for i = 0, nq - 1 do
        local l = s.rows(b, h, i)
        local row = {}
        for e = 1, width do row[e] = l[e] or (s.pad or -1) end
        idx[b + 1][h + 1][i + 1] = row
        num[b + 1][h + 1][i + 1] = #l
      end
    end
  end
  p.q2k_idx = core.from_table(idx, {dtype = "i32", device = dev})
  p.q2k_num = core.from_table(num, {dtype = "i32", device = dev})
  local vbs = s.vbs
  if not vbs then vbs = {}; for j = 1, nkv do vbs[j] = bs end end
  p.vbs_list = vbs
  p.vbs = core.from_table(vbs, {dtype = "i32", device = dev})
  p.k2q_idx, p.k2q_num = core.invert_indices(p.q2k_idx, p.q2k_num, nkv)
  p.o, p.lse = core.forward_ref(p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs,
    {sm_scale = p.sm_scale})
  return p
end

local function oracle(p, extra)
  local a = {q = p.q, k = p.k, v = p.v, dO = p.dO, q2k_idx = p.q2k_idx,
    q2k_num = p.q2k_num, variable_block_sizes = p.vbs, sm_scale = p.sm_scale}
  for k, v in pairs(extra or {}) do a[k] = v end
  return core.oracle(a)
end

-- The layout the running case hands the backend (M.run sets it).
local run_layout = "bhsd"
local layouts = require "vsalab.layouts"

local function outputs(backend, p)
  if run_layout == "bhsd" or p.layout == run_layout then
    local dq, dk, dv = backend.run(p)
    return {dq = dq, dk = dk, dv = dv}
  end
  local q = {}
  for k, v in pairs(p) do q[k] = v end
  q.layout = run_layout
  local moved = {}
  for _, name in ipairs{"q", "k", "v", "dO", "o"} do
    q[name] = layouts.convert(p[name], "bhsd", run_layout)
    moved[#moved + 1] = q[name]
  end
  local ok, dq, dk, dv = pcall(backend.run, q)
  for _, t in ipairs(moved) do t:free() end
  if not ok then error(dq, 0) end
  local out = {}
  for name, t in pairs{dq = dq, dk = dk, dv = dv} do
    out[name] = layouts.convert(t, run_layout, "bhsd")
    t:free()
  end
  return out
end

-- max |x| over rows [r0, r0+n) (0-based) of slice (b, h) of t, and NaN count.
local function rows_max(t, b, h, r0, n)
  local s = t:narrow(1, b + 1, 1):narrow(2, h + 1, 1):narrow(3, r0 + 1, n):contiguous()
  local z = core.zeros(s.shape, {dtype = "f32", device = "cpu"})
  local c = core.compare(s, z)
  return c.max_abs, c.nonfinite
end

local function exactly_zero(t, b, h, r0, n)
  local m, nf = rows_max(t, b, h, r0, n)
  return m == 0 and nf == 0, string.format("max|x| = %g, nonfinite = %d", m, nf)
end

local function bitwise_equal(a, b)
  local c = core.compare(a, b)
  return c.max_abs == 0 and c.nonfinite == 0,
    string.format("max|a-b| = %g, nonfinite = %d", c.max_abs, c.nonfinite)
end

-- A backend whose dq is summed in fp32 in arrival order (deterministic_dq =
-- false: the -fp32 variants) is held to FP32_DQ_TOL on dq wherever the
-- deterministic ones must be bitwise or within 1e-5 (CASES.md, "Modes"):
-- a few bf16 elements round one ulp the other way from launch to launch
-- (rel L2 up to 2.4e-5 seen on an H200), while a lost or doubled partial
-- gives > 1e-2. dk and dv are bitwise in every mode.
local FP32_DQ_TOL = 1e-4
local function reproducible(b, name) return b.deterministic_dq ~= false or name ~= "dq" end

-- a and b (output `name` of backend bk) are the same result: the same bits,
-- or, for an fp32-dq backend's dq, rel L2 <= FP32_DQ_TOL.
local function same_result(bk, name, a, b)
  if reproducible(bk, name) then return bitwise_equal(a, b) end
  local c = core.compare(a, b)
  return c.rel_l2 <= FP32_DQ_TOL and c.nonfinite == 0,
    string.format("rel L2 %.3g (fp32 dq: within %g)", c.rel_l2, FP32_DQ_TOL)
end

-- The largest run-to-run spread allowed for output `name` of backend bk.
local function spread_limit(bk, name) return reproducible(bk, name) and 1e-5 or FP32_DQ_TOL end

-- Per-block rel L2 of slice (b, h) (blocks of bs rows): the worst block.
local function worst_block(x, ref, b, h, nblocks, bs)
  local worst, at = 0, -1
  for i = 0, nblocks - 1 do
    local xs = x:narrow(1, b + 1, 1):narrow(2, h + 1, 1):narrow(3, bs * i + 1, bs):contiguous()
    local rs = ref:narrow(1, b + 1, 1):narrow(2, h + 1, 1):narrow(3, bs * i + 1, bs):contiguous()
    local c = core.compare(xs, rs)
    local e = c.nonfinite > 0 and math.huge or c.rel_l2
    if e > worst then worst, at = e, i end
  end
  return worst, at
end

-- Tiny deterministic generator for list shapes (not for tensor data).
local function lcg(seed)
  local x = seed % 2147483647
  if x == 0 then x = 1 end
  return function(n)
    x = (x * 48271) % 2147483647
    return x % n
  end
end

local function distinct(rand, n, k)
  local ids, seen = {}, {}
  while #ids < k do
    local j = rand(n)
    if not seen[j] then seen[j] = true; ids[#ids + 1] = j end
  end
  return ids
end

-- Edit tensor p[name] on the host (views of device tensors cannot be
-- written in place), then put it back on env.device.
local function edit_on_host(env, p, name, fn)
  local h = p[name]:to("cpu")
  if h == p[name] then h = h:clone() end
  fn(h)
  p[name] = h:to(env.device)
end

local function free_all(...)
  for _, t in ipairs{...} do
    if type(t) == "table" then
      for _, v in pairs(t) do if core.is_tensor(v) and not v.freed then v:free() end end
    end
  end
end

-- ----------------------------------------------------------------------------
-- the cases (numbers as in docs/CASES.md)

M.list = {}
local function case(id, name, opts, fn)
  M.list[#M.list + 1] = {id = id, name = name, gpu = opts.gpu, fn = fn}
end

case(1, "large logits", {}, function(r, b, env)
  for _, sigma in ipairs{1, 4, 16} do
    local seed = env.next_seed()
    local rand = lcg(seed)
    local p = make(env, {H = 4, nq = 8, nkv = 8, sigma = sigma, seed = seed,
      rows = function() return distinct(rand, 8, 3) end})
    local out, ref = outputs(b, p), oracle(p)
    local tol = sigma == 16 and 2e-2 or 1e-2
    local c = check.check_outputs(out, ref, {tol = tol})
    local ratio_ok = true
    for _, e in pairs(c.errors) do
      if not (e.norm_ratio >= 0.98 and e.norm_ratio <= 1.02) then ratio_ok = false end
    end
    r("sigma=" .. sigma, c.passed and ratio_ok, c.errors, seed, "norm ratio in [0.98, 1.02]")
    free_all(p, out, ref)
  end
end)

case(2, "valid-token masking", {}, function(r, b, env)
  local seed = env.next_seed()
  local rand = lcg(seed)
  local bs = env.block
  -- Full and half blocks (at 128 a half block is 64 valid tokens; one block
  -- keeps 3/4, past the first 64 there).
  local vbs = {bs, bs / 2, bs, bs / 2, 3 * bs / 4, bs, bs, bs / 2}
  local rows = {}
  for i = 1, 8 do
    local l = distinct(rand, 8, 4)
    table.sort(l)
    rows[i] = l
  end
  local spec = {H = 2, nq = 8, nkv = 8, vbs = vbs, seed = seed,
    rows = function(_, _, i) return rows[i + 1] end}
  local p = make(env, spec)
  -- Zero the padded K/V slots (t >= vbs) as a padded video latent has them.
  local function pad_with(name, fill)
    edit_on_host(env, p, name, function(t)
      for j = 0, 7 do
        if vbs[j + 1] < bs then
          t:narrow(3, bs * j + vbs[j + 1] + 1, bs - vbs[j + 1]):fill(fill)
        end
      end
    end)
  end
  pad_with("k", 0); pad_with("v", 0)
  p.o, p.lse = core.forward_ref(p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs,
    {sm_scale = p.sm_scale})
  local out, ref = outputs(b, p), oracle(p)
  local c = check.check_outputs(out, ref)
  r("vs oracle", c.passed, c.errors, seed)
  local ok, why = true, ""
  for j = 0, 7 do
    if vbs[j + 1] < bs then
      for _, name in ipairs{"dk", "dv"} do
        for h = 0, 1 do
          local z, w = exactly_zero(out[name], 0, h, bs * j + vbs[j + 1], bs - vbs[j + 1])
          if not z then ok, why = false, name .. " block " .. j .. ": " .. w end
        end
      end
    end
  end
  r("padded dk/dv rows exactly 0", ok, nil, seed, why)
  -- Other values in the padded slots must not change anything.
  pad_with("k", 7.5); pad_with("v", -3.25)
  local out2 = outputs(b, p)
  local same, w = true, ""
  for _, name in ipairs{"dq", "dk", "dv"} do
    local e, m = same_result(b, name, out[name], out2[name])
    if not e then same, w = false, name .. ": " .. m end
  end
  r("bitwise identical with other padded K/V", same, nil, seed, w)
  free_all(out2)
  free_all(p, out, ref)
end)

case(3, "uneven counts", {}, function(r, b, env)
  local seed = env.next_seed()
  local rand = lcg(seed)
  local counts = {8, 0, 3, 8, 1, 0, 5, 2}
  local p = make(env, {H = 2, nq = 8, nkv = 8, seed = seed,
    rows = function(_, h, i)
      local c = counts[((i + h) % 8) + 1]
      return distinct(rand, 8, c)
    end})
  local out, ref = outputs(b, p), oracle(p)
  local ok, worst = true, {}
  for _, name in ipairs{"dq", "dk", "dv"} do
    local w = 0
    for h = 0, 1 do
      local e = worst_block(out[name], ref[name], 0, h, 8, env.block)
      if e > w then w = e end
    end
    worst[name] = {rel_l2 = w, passed = w < 1e-2}
    if not (w < 1e-2) then ok = false end
  end
  r("per-block rel L2", ok, worst, seed)
  free_all(p, out, ref)
end)

case(4, "padding in lists", {}, function(r, b, env)
  local seed = env.next_seed()
  local rand = lcg(seed)
  local rows = {}
  for i = 1, 8 do rows[i] = distinct(rand, 7, 1 + rand(6)) end
  for i = 1, 8 do for e, j in ipairs(rows[i]) do rows[i][e] = j + 1 end end -- never block 0
  local base = make(env, {H = 2, nq = 8, nkv = 8, seed = seed,
    rows = function(_, _, i) return rows[i + 1] end})
  local out = outputs(b, base)
  local ref = oracle(base)
  local c = check.check_outputs(out, ref)
  r("vs oracle", c.passed, c.errors, seed)
  local ok, why = true, ""
  for h = 0, 1 do
    for _, name in ipairs{"dk", "dv"} do
      local z, w = exactly_zero(out[name], 0, h, 0, env.block)
      if not z then ok, why = false, name .. ": " .. w end
    end
  end
  r("dk/dv of unselected block 0 exactly 0", ok, nil, seed, why)
  -- The backward reads k2q lists: rewrite their tails and widths.
  local k2q = base.k2q_idx:to_table()
  local num = base.k2q_num:to_table()
  local function variant(pad, width, dtype)
    local t = {}
    for bb = 1, #k2q do
      t[bb] = {}
      for h = 1, #k2q[bb] do
        t[bb][h] = {}
        for j = 1, #k2q[bb][h] do
          local row = {}
          for e = 1, width do
            row[e] = e <= num[bb][h][j] and k2q[bb][h][j][e] or pad
          end
          t[bb][h][j] = row
        end
      end
    end
    local q = {}
    for k, v in pairs(base) do q[k] = v end
    q.k2q_idx = core.from_table(t, {dtype = dtype, device = env.device})
    q.k2q_num = core.from_table(num, {dtype = dtype, device = env.device})
    return q
  end
  for _, v in ipairs{{"-1 tails", -1, 8, "i32"}, {"INT32_MAX tails", INT32_MAX, 8, "i32"},
      {"0 tails", 0, 8, "i32"}, {"width 13 > blocks", -1, 13, "i32"},
      {"int64 lists", -1, 8, "i64"}} do
    local q = variant(v[2], v[3], v[4])
    local okc, res = pcall(outputs, b, q)
    if not okc then
      local clear = tostring(res):match("i32") ~= nil
      r(v[1], v[4] == "i64" and clear, nil, seed, "raised: " .. tostring(res))
    else
      local same, w = true, ""
      for _, name in ipairs{"dq", "dk", "dv"} do
        local e, m = same_result(b, name, res[name], out[name])
        if not e then same, w = false, name .. ": " .. m end
      end
      r(v[1] .. " bitwise identical", same, nil, seed, w)
      free_all(res)
    end
    q.k2q_idx:free(); q.k2q_num:free()
  end
  free_all(base, out, ref)
end)

case(5, "empty rows and empty blocks", {}, function(r, b, env)
  local seed = env.next_seed()
  -- kv block 3 has vbs = 0; q blocks 2, 4, 5 are empty (4 is even beside a
  -- non-empty odd 3; 4-5 are a pair); q block 6 selects only block 3; head 1
  -- has every count 0.
  local rows = {{0, 1, 3}, {2, 4}, {}, {1, 5, 7}, {}, {}, {3}, {0, 6}}
  local bs = env.block
  local p = make(env, {H = 2, nq = 8, nkv = 8, seed = seed,
    vbs = {bs, bs, bs, 0, bs, bs, bs, bs},
    rows = function(_, h, i) return h == 1 and {} or rows[i + 1] end})
  local out, ref = outputs(b, p), oracle(p)
  local c = check.check_outputs(out, ref)
  r("vs oracle", c.passed, c.errors, seed)
  local ok, why = true, ""
  -- need(what, t, b, h, r0, n): rows [r0, r0+n) of slice (b, h) of t are 0.
  local function need(what, ...)
    local z, w = exactly_zero(...)
    if not z then ok, why = false, what .. ": " .. w end
  end
  for _, i in ipairs{2, 4, 5, 6} do need("dq q block " .. i, out.dq, 0, 0, bs * i, bs) end
  need("dq of the empty head", out.dq, 0, 1, 0, 8 * bs)
  for _, name in ipairs{"dk", "dv"} do
    need(name .. " of vbs=0 block", out[name], 0, 0, bs * 3, bs)
    need(name .. " of the empty head", out[name], 0, 1, 0, 8 * bs)
  end
  r("empty rows and blocks exactly 0", ok, nil, seed, why)
  -- Saved lse of rows with no valid key must not matter.
  local lse = p.lse:to_table()
  for _, fill in ipairs{math.huge, -math.huge, 0} do
    for h = 1, 2 do
      for row = 1, 8 * bs do
        local i = math.floor((row - 1) / bs)
        if h == 2 or i == 2 or i == 4 or i == 5 or i == 6 then lse[1][h][row] = fill end
      end
    end
    local q = {}
    for k, v in pairs(p) do q[k] = v end
    q.lse = core.from_table(lse, {dtype = "f32", device = env.device})
    local o2 = outputs(b, q)
    local same, w = true, ""
    for _, name in ipairs{"dq", "dk", "dv"} do
      local e, m = same_result(b, name, o2[name], out[name])
      if not e then same, w = false, name .. ": " .. m end
    end
    r("empty-row lse = " .. tostring(fill), same, nil, seed, w)
    free_all(o2); q.lse:free()
  end
  free_all(p, out, ref)
end)

case(6, "backward follows the forward's sparsity", {}, function(r, b, env)
  local seed = env.next_seed()
  local p = make(env, {H = 2, nq = 8, nkv = 8, seed = seed,
    rows = function() return {0, 2, 4} end})
  local out = outputs(b, p)
  local ok, why = true, ""
  for _, j in ipairs{1, 3, 5, 6, 7} do
    for _, name in ipairs{"dk", "dv"} do
      for h = 0, 1 do
        local z, w = exactly_zero(out[name], 0, h, env.block * j, env.block)
        if not z then ok, why = false, name .. " block " .. j .. ": " .. w end
      end
    end
  end
  r("unselected kv blocks exactly 0", ok, nil, seed, why)
  free_all(p, out)
  for _, v in ipairs{{"all 7 selected = dense", function(_, _, i) return {0, 1, 2, 3, 4, 5, 6} end},
      {"block-causal = dense causal-by-block", function(_, _, i)
        local l = {}
        for j = 0, i do l[#l + 1] = j end
        return l
      end}} do
    local s2 = env.next_seed()
    local q = make(env, {H = 2, nq = 7, nkv = 7, seed = s2, rows = v[2]})
    local o2, ref = outputs(b, q), oracle(q)
    local c = check.check_outputs(o2, ref)
    r(v[1], c.passed, c.errors, s2)
    free_all(q, o2, ref)
  end
end)

case(7, "shared kv block", {}, function(r, b, env)
  local seed = env.next_seed()
  local rows = {{1}, {1, 2}, {3}, {0}}
  local p = make(env, {H = 1, nq = 4, nkv = 4, seed = seed,
    rows = function(_, _, i) return rows[i + 1] end})
  local out, ref = outputs(b, p), oracle(p)
  local parts = {}
  local ok = true
  for _, name in ipairs{"dk", "dv"} do
    local xs = out[name]:narrow(3, env.block + 1, env.block):contiguous()
    local rs = ref[name]:narrow(3, env.block + 1, env.block):contiguous()
    local c = core.compare(xs, rs)
    c.cosine = check.cosine(c)
    c.passed = c.nonfinite == 0 and c.rel_l2 < 1e-2 and c.cosine >= 0.999
    if not c.passed then ok = false end
    parts[name] = c
  end
  r("block 1 (selected twice)", ok, parts, seed)
  free_all(p, out, ref)
end)

case(8, "dQ accumulation races", {gpu = true}, function(r, b, env)
  local seed = env.next_seed()
  local rand = lcg(seed)
  local p = make(env, {B = 2, H = 8, nq = 32, nkv = 32, seed = seed, D = 128,
    rows = function() return distinct(rand, 32, 16) end})
  local ref = oracle(p)
  local first = outputs(b, p)
  local c = check.check_outputs(first, ref)
  r("launch 1 vs oracle", c.passed, c.errors, seed)
  local n = math.max(2, math.floor(50 * (env.launches_scale or 1)))
  local worst, spread, over = 0, 0, false
  for _ = 2, n do
    local o = outputs(b, p)
    local cc = check.check_outputs(o, ref)
    for _, e in pairs(cc.errors) do if e.rel_l2 > worst then worst = e.rel_l2 end end
    if not cc.passed then worst = math.huge end
    for _, name in ipairs{"dq", "dk", "dv"} do
      local d = core.compare(o[name], first[name])
      if d.rel_l2 > spread then spread = d.rel_l2 end
      if d.rel_l2 > spread_limit(b, name) then over = true end
    end
    free_all(o)
  end
  r(n .. " launches: each < 1e-2, all within " .. (b.deterministic_dq == false and
    "1e-5 (dq: " .. FP32_DQ_TOL .. ", fp32 mode)" or "1e-5"), worst < 1e-2 and not over,
    nil, seed, string.format("worst rel L2 %.3g, max spread %.3g", worst, spread))
  free_all(p, first, ref)
end)

case(9, "determinism", {}, function(r, b, env)
  local deterministic = b.deterministic_dq ~= false
  local seed = env.next_seed()
  local rand = lcg(seed)
  local p = make(env, {H = 4, nq = 16, nkv = 16, seed = seed,
    rows = function() return distinct(rand, 16, 8) end})
  local first = outputs(b, p)
  local same, why = true, ""
  local k2q = p.k2q_idx:to_table()
  local num = p.k2q_num:to_table()
  for run = 2, 10 do
    local q = p
    if run > 5 then -- lists permuted within their counts
      local t = {}
      for h = 1, 4 do
        t[h] = {}
        for j = 1, 16 do
          local row = {}
          for e = 1, 16 do row[e] = k2q[1][h][j][e] end
          for e = num[1][h][j], 2, -1 do
            local f = 1 + rand(e)
            row[e], row[f] = row[f], row[e]
          end
          t[h][j] = row
        end
      end
      q = {}
      for k, v in pairs(p) do q[k] = v end
      q.k2q_idx = core.from_table({t}, {dtype = "i32", device = env.device})
    end
    local o = outputs(b, q)
    for _, name in ipairs{"dq", "dk", "dv"} do
      local e, m = same_result(b, name, o[name], first[name])
      if not e then same, why = false, "run " .. run .. " " .. name .. ": " .. m end
    end
    free_all(o)
    if q ~= p then q.k2q_idx:free() end
  end
  r(string.format("10 runs (5 with permuted lists): dk/dv bitwise, dq %s [%s mode]",
    deterministic and "bitwise" or ("within " .. FP32_DQ_TOL), deterministic and "deterministic" or "fp32"),
    same, nil, seed, why)
  free_all(p, first)
end)

case(10, "scratch written before read", {gpu = true}, function(r, b, env)
  local seed = env.next_seed()
  local rand = lcg(seed)
  local p = make(env, {H = 8, nq = 64, nkv = 64, seed = seed, D = 128,
    rows = function() return distinct(rand, 64, 16) end})
  -- Last q block: 10 valid rows, q and dO zero beyond.
  local bs = env.block
  for _, name in ipairs{"q", "dO"} do
    edit_on_host(env, p, name, function(t) t:narrow(3, 63 * bs + 11, bs - 10):fill(0) end)
  end
  p.o, p.lse = core.forward_ref(p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs,
    {sm_scale = p.sm_scale})
  local first = outputs(b, p)
  local n = math.max(2, math.floor(2000 * (env.launches_scale or 1)))
  local nan, spread, over = 0, 0, false
  for _ = 2, n do
    local o = outputs(b, p)
    for _, name in ipairs{"dq", "dk", "dv"} do
      local d = core.compare(o[name], first[name])
      nan = nan + d.nonfinite
      if d.rel_l2 > spread then spread = d.rel_l2 end
      if d.rel_l2 > spread_limit(b, name) then over = true end
    end
    free_all(o)
  end
  r(n .. " launches: no NaN, all within " .. (b.deterministic_dq == false and
    "1e-5 (dq: " .. FP32_DQ_TOL .. ", fp32 mode)" or "1e-5"), nan == 0 and not over, nil, seed,
    string.format("nonfinite %d, max spread %.3g", nan, spread))
  free_all(p, first)
end)

case(11, "unequal lengths", {}, function(r, b, env)
  local seed = env.next_seed()
  local p = make(env, {B = 2, H = 2, nq = 5, nkv = 7, seed = seed,
    rows = function(_, _, i) return {i % 7, (i + 2) % 7, (i + 5) % 7} end})
  local out, ref = outputs(b, p), oracle(p)
  local ok, errs = true, {}
  for bb = 0, 1 do
    for h = 0, 1 do
      for _, name in ipairs{"dq", "dk", "dv"} do
        local xs = out[name]:narrow(1, bb + 1, 1):narrow(2, h + 1, 1):contiguous()
        local rs = ref[name]:narrow(1, bb + 1, 1):narrow(2, h + 1, 1):contiguous()
        local c = core.compare(xs, rs)
        c.passed = c.nonfinite == 0 and c.rel_l2 < 1e-2
        if not c.passed then ok = false end
        errs[name .. "[" .. bb .. "," .. h .. "]"] = c
      end
    end
  end
  local shaped = out.dk.shape[3] == 7 * env.block and out.dq.shape[3] == 5 * env.block
  r("per-(b, h) rel L2, dk/dv shaped by Skv", ok and shaped, errs, seed)
  free_all(p, out, ref)
end)

case(12, "64-bit offsets", {gpu = true}, function(r, b, env)
  -- 2^20 tokens (and one block more) at any block size: B·H·S·D = 2^31.
  local bs = env.block
  local n0 = 16384 * 64 / bs
  for _, nblocks in ipairs{n0, n0 + 1} do
    local seed = env.next_seed()
    local p = require("vsalab.problem")
    -- Block-diagonal lists: q block i attends kv block i only.
    local H, D, dev = 16, 128, env.device
    local S = bs * nblocks
    local t = {B = 1, H = H, D = D, block = bs, nq = nblocks, nkv = nblocks, Sq = S, Skv = S,
      seed = seed, sm_scale = 1 / math.sqrt(D)}
    local function randn(k) return core.empty({1, H, S, D}, {dtype = "bf16", device = dev}):fill_randn{seed = 16 * seed + k} end
    t.q, t.k, t.v, t.dO = randn(1), randn(2), randn(3), randn(4)
    t.q2k_idx, t.q2k_num = M.diagonal_lists(1, H, nblocks, dev)
    t.vbs = core.full({nblocks}, bs, {dtype = "i32", device = dev})
    t.k2q_idx, t.k2q_num = core.invert_indices(t.q2k_idx, t.q2k_num, nblocks)
    t.o, t.lse = core.forward_ref(t.q, t.k, t.v, t.q2k_idx, t.q2k_num, t.vbs, {sm_scale = t.sm_scale})
    local out = outputs(b, t)
    local res = check.spot_check(t, out, {bh = {0, H - 1}, q_blocks = {0, nblocks - 1},
      kv_blocks = {0, nblocks - 1}})
    r(nblocks .. " blocks: first/last blocks of first/last slice", res.passed, res.errors, seed)
    -- The last slice alone must give the same bits.
    local last = p.head(t, H - 1)
    last.vbs = t.vbs
    local alone = outputs(b, last)
    local same, why = true, ""
    for _, name in ipairs{"dq", "dk", "dv"} do
      local xs = out[name]:narrow(2, H, 1):contiguous()
      local e, m = same_result(b, name, xs, alone[name])
      if not e then same, why = false, name .. ": " .. m end
      xs:free()
    end
    r(nblocks .. " blocks: last slice bitwise equal alone", same, nil, seed, why)
    last.vbs = nil
    free_all(last, alone, out, t)
  end
end)

case(13, "layouts of dO", {}, function(r, b, env)
  local seed = env.next_seed()
  local rand = lcg(seed)
  local p = make(env, {B = 1, H = 2, nq = 4, nkv = 4, seed = seed,
    rows = function() return distinct(rand, 4, 2) end})
  local base = outputs(b, p)
  local bshd = core.empty({1, p.Sq, 2, p.D}, {dtype = "bf16", device = env.device}):fill_randn{seed = seed}
  local ones = core.full({1, 1, 1, p.D}, 1, {dtype = "bf16", device = env.device})
  for _, v in ipairs{{"BSHD viewed as BHSD", bshd:transpose(2, 3)},
      {"stride-0 broadcast of ones", ones:expand{1, 2, p.Sq, p.D}}} do
    local q = {}
    for k, x in pairs(p) do q[k] = x end
    q.dO = v[2]
    local ok, res = pcall(outputs, b, q)
    if not ok then
      r(v[1] .. ": clear error", tostring(res):match("dO") ~= nil and tostring(res):match("contiguous") ~= nil,
        nil, seed, tostring(res))
    else
      q.dO = v[2]:contiguous()
      local ref = outputs(b, q)
      local same, why = true, ""
      for _, name in ipairs{"dq", "dk", "dv"} do
        local e, m = same_result(b, name, res[name], ref[name])
        if not e then same, why = false, name .. ": " .. m end
      end
      r(v[1] .. ": same bits as contiguous", same, nil, seed, why)
    end
  end
  free_all(p, base)
end)

case(14, "lse convention", {}, function(r, b, env)
  local seed = env.next_seed()
  local rand = lcg(seed)
  local p = make(env, {H = 2, nq = 4, nkv = 4, seed = seed,
    rows = function() return distinct(rand, 4, 2) end})
  local ref = oracle(p)
  local out = outputs(b, p)
  local c = check.check_outputs(out, ref)
  r("M format passes", c.passed, c.errors, seed)
  -- The forward's lse against the oracle's (all rows have valid keys here).
  local lc = core.compare(p.lse, ref.lse)
  r("forward lse within 1e-3 absolute", lc.max_abs < 1e-3 and lc.nonfinite == 0, nil, seed,
    string.format("max abs %.3g", lc.max_abs))
  local lse = p.lse:to_table()
  local ln2 = math.log(2)
  local function form(f)
    local t = {{}}
    for h = 1, 2 do t[1][h] = {}; for s = 1, p.Sq do t[1][h][s] = f(h, s) end end
    return core.from_table(t, {dtype = "f32", device = env.device})
  end
  local wrong = {
    {"natural log", form(function(h, s) return lse[1][h][s] * ln2 end)},
    -- [B,S,H] bytes read as [B,H,S]
    {"transposed [B,S,H]", form(function(h, s)
      local flat = (h - 1) * p.Sq + (s - 1)
      local ss, hh = math.floor(flat / 2), flat % 2
      return lse[1][hh + 1][ss + 1]
    end)},
    {"-lse_ln/sm_scale", form(function(h, s) return -lse[1][h][s] * ln2 / p.sm_scale end)},
  }
  for _, w in ipairs(wrong) do
    local q = {}
    for k, v in pairs(p) do q[k] = v end
    q.lse = w[2]
    local o2 = outputs(b, q)
    local cw = check.check_outputs(o2, ref)
    local worst = 0
    for _, e in pairs(cw.errors) do
      local x = e.nonfinite > 0 and math.huge or e.rel_l2
      if x > worst then worst = x end
    end
    -- A negative control: the check must fail by a wide margin (10x tol).
    r(w[1] .. " fails the check", worst > 0.1, cw.errors, seed,
      string.format("worst rel L2 %.3g", worst))
    free_all(o2); w[2]:free()
  end
  free_all(p, out, ref)
end)

-- Block-diagonal lists [B,H,n,1] on dev, built on the host.
function M.diagonal_lists(B, H, n, dev)
  local idx = core.empty({B, H, n, 1}, {dtype = "i32", device = "cpu"})
  local num = core.full({B, H, n}, 1, {dtype = "i32", device = "cpu"})
  -- Fill through a flat view: entry (b, h, i) = i.
  local flat = idx:reshape{B * H * n}
  for bh = 0, B * H - 1 do
    for i = 0, n - 1 do flat:set(bh * n + i + 1, i) end
  end
  return idx:to(dev), num:to(dev)
end

-- ----------------------------------------------------------------------------
-- runner

-- Run every case (or env.only = {ids}) for backend on env.device. Returns
-- the list of results; cases with gpu=true are skipped on the CPU.
function M.run(backend, env)
  if type(backend) == "string" then backend = require("vsalab.backends").get(backend) end
  assert(type(backend) == "table" and backend.run, "cases.run: expected a backend or its name")
  env = env or {}
  env.device = env.device or "cpu"
  env.D = env.D or (env.device == "cpu" and 64 or 128)
  local seed = env.seed or os.time()
  local drawn -- the last seed the running case drew (nil: none yet)
  env.next_seed = function() seed = seed + 1; drawn = seed; return seed end
  local only
  if env.only then only = {}; for _, i in ipairs(env.only) do only[i] = true end end
  local blocks = require "vsalab.blocks"
  local sizes = env.blocks or blocks.sizes
  local lays = env.layouts or {layouts.default}
  if type(lays) ~= "table" or #lays == 0 then
    error("cases.run: env.layouts: expected a non-empty list of layouts such as {'bhsd', 'bshd'}, got "
      .. (type(lays) == "table" and "an empty table" or type(lays) .. " " .. tostring(lays)), 2)
  end
  local results = {}
  for _, lay in ipairs(lays) do
    layouts.check(lay, "cases.run: env.layouts")
    for _, bs in ipairs(sizes) do
      blocks.check(bs, "cases.run: env.blocks")
      -- A backend that does not take this block size or layout (a plug-in
      -- at 128 or in bshd) runs the cases where it does.
      local takes = not backend.supported
        or backend.supported(env.device, {block = bs, D = env.D, layout = lay})
      for _, c in ipairs(takes and M.list or {}) do
        if (not only or only[c.id]) and not (c.gpu and env.device == "cpu") then
          env.block, env.layout, run_layout = bs, lay, lay
          local function record(checkname, passed, errors, s, detail)
            results[#results + 1] = {case = c.id, name = c.name, check = checkname,
              passed = passed and true or false, errors = errors, seed = s,
              detail = detail, backend = backend.name, device = env.device, block = bs,
              layout = lay}
            if env.on_result then env.on_result(results[#results]) end
          end
          drawn = nil
          local ok, err = xpcall(function() c.fn(record, backend, env) end, debug.traceback)
          run_layout = "bhsd"
          -- Ctrl-C must stop the run, not count as one failed case.
          if not ok and tostring(err):find("interrupted!", 1, true) then error(err, 0) end
          -- A case that raised (a peer that failed) replays from the seed it drew.
          if not ok then record("ran without error", false, nil, drawn, err) end
          collectgarbage()
        end
      end
    end
  end
  env.block, env.layout = nil, nil
  return results
end

-- One line per result: "case 5 empty rows...: check  PASS (seed 42) detail".
function M.format(res)
  local errs = ""
  if res.errors then
    local names = {}
    for k in pairs(res.errors) do names[#names + 1] = k end
    table.sort(names)
    local parts = {}
    for _, k in ipairs(names) do
      local e = res.errors[k]
      if type(e) == "table" and e.rel_l2 then
        parts[#parts + 1] = string.format("%s %.2e", k, e.rel_l2)
      end
    end
    errs = table.concat(parts, " ")
  end
  -- A case that raised before drawing a seed has none to show.
  return string.format("case %2d blk%-3d%s %-36s %-52s %s%s %s %s", res.case, res.block or 64,
    (res.layout or "bhsd") ~= "bhsd" and (" " .. res.layout) or "", res.name, res.check, res.passed and "PASS" or "FAIL",
    res.seed ~= nil and (" seed=" .. tostring(res.seed)) or "", errs, res.detail or "")
end

return M
