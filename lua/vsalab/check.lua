-- Correctness verdicts: compare each output against a reference and decide.
--
-- check_outputs(outs, refs, {tol=1e-2, tols={dq=...}, names={'dq','dk','dv'}})
-- -> {passed=bool, errors={dq={rel_l2, max_abs, nonfinite, norm_ratio,
--     passed}, ...}}. An output passes when rel L2 < its tolerance and neither
-- side holds a NaN or Inf: a comparator must never pass because the
-- reference is NaN (docs/CASES.md, shared rules).
local core = require "vsalab.core"

local M = {}

-- Cosine similarity from compare()'s raw sums: x·r = (‖x‖² + ‖r‖² − ‖x−r‖²)/2.
function M.cosine(c)
  if type(c) ~= "table" or type(c.x2) ~= "number" or type(c.ref2) ~= "number" or type(c.diff2) ~= "number" then
    error("cosine: expected what vsalab.compare returns (numbers x2, ref2, diff2)", 2)
  end
  for _, k in ipairs{"x2", "ref2", "diff2"} do
    local v = c[k]
    if not (v >= 0 and v < math.huge) then
      -- Squared norms of values near 1e154 and beyond overflow: no cosine
      -- can be had from them (rel_l2 is still right).
      error(string.format("cosine: %s is %s, not a finite sum of squares (values near 1e154 or "
        .. "more overflow it)", k, tostring(v)), 2)
    end
  end
  return (c.x2 + c.ref2 - c.diff2) / (2 * math.sqrt(c.x2 * c.ref2))
end

function M.check_outputs(outs, refs, opts)
  if type(outs) ~= "table" or type(refs) ~= "table" then
    error("check_outputs: expected tables of outputs and references", 2)
  end
  opts = opts or {}
  M.check_tols("check_outputs", opts)
  local names = opts.names
  if not names then -- the outputs present in outs, in the usual order
    names = {}
    for _, n in ipairs{"dq", "dk", "dv", "o", "lse"} do
      if outs[n] then names[#names + 1] = n end
    end
  end
  if #names == 0 then error("check_outputs: nothing to check (no dq, dk, dv, o or lse in outs)", 2) end
  local res = {passed = true, errors = {}}
  for _, name in ipairs(names) do
    local x, r = outs[name], refs[name]
    if not (x and r) then error("check_outputs: missing output '" .. tostring(name) .. "'", 2) end
    -- Zero elements compared is a check of nothing: never a pass.
    if core.is_tensor(x) and not x.freed and x:numel() == 0 then
      error("check_outputs: output '" .. tostring(name) .. "' has no elements (a check of nothing)", 2)
    end
    local c = core.compare(x, r)
    -- Non-finite elements leave the finite ones' error meaningless: an
    -- all-NaN output must not read as rel L2 0 (stored as NULL).
    if c.nonfinite > 0 then c.rel_l2 = 0 / 0 end
    local tol = (opts.tols and opts.tols[name]) or opts.tol or 1e-2
    c.passed = c.nonfinite == 0 and c.rel_l2 == c.rel_l2 and c.rel_l2 < tol
    c.tol = tol
    res.errors[name] = c
    if not c.passed then res.passed = false end
  end
  return res
end

-- Validate opts.tol (a number) and opts.tols (a table of numbers) for fn.
function M.check_tols(fn, opts)
  local function num(v) return type(v) == "number" and v == v end
  if opts.tol ~= nil and not num(opts.tol) then
    error(fn .. ": field 'tol' must be a number", 3)
  end
  if opts.tols ~= nil then
    if type(opts.tols) ~= "table" then error(fn .. ": field 'tols' must be a table of numbers", 3) end
    for k, v in pairs(opts.tols) do
      if not num(v) then error(fn .. ": field 'tols." .. tostring(k) .. "' must be a number", 3) end
    end
  end
end

-- Pool several compare() results (disjoint pieces of one tensor) into one.
function M.pool(parts)
  local d2, r2, x2, nf, mx, n = 0, 0, 0, 0, 0, 0
  for _, c in ipairs(parts) do
    d2, r2, x2 = d2 + c.diff2, r2 + c.ref2, x2 + c.x2
    nf, n = nf + c.nonfinite, n + c.n
    if c.max_abs > mx then mx = c.max_abs end
  end
  local nr = math.sqrt(r2)
  -- With non-finite elements the finite ones' error means nothing: NaN.
  return {rel_l2 = nf > 0 and 0 / 0 or (nr > 0 and math.sqrt(d2) / nr or math.sqrt(d2)),
    max_abs = mx, nonfinite = nf, n = n, diff2 = d2, ref2 = r2, x2 = x2,
    norm_ratio = nr > 0 and math.sqrt(x2) / nr or (x2 > 0 and math.huge or 1)}
end

-- Deterministic sample of k distinct ids in [0, n): always 0 and n-1, the
-- rest from a small LCG seeded by seed (documented, so a row's sample can
-- be named again).
function M.sample_ids(n, k, seed)
  local ids, seen = {}, {}
  local function add(i) if not seen[i] and #ids < k then seen[i] = true; ids[#ids + 1] = i end end
  add(0); add(n - 1)
  local x = (seed or 1) % 2147483647
  if x == 0 then x = 1 end
  for _ = 1, 64 * k do
    if #ids >= math.min(k, n) then break end
    x = (x * 48271) % 2147483647
    add(x % n)
  end
  table.sort(ids)
  return ids
end

-- Check a backward's outputs outs = {dq, dk, dv} of problem p against the
-- fp64 oracle (src/core/oracle.c) given p's o and lse, on the (b, h) slices in
-- opts.bh (0-based b·H + h; default first and last) and, per slice, the
-- dq rows of opts.q_blocks and the dk/dv rows of opts.kv_blocks (lists of
-- 0-based ids, or counts sampled by sample_ids; default all blocks);
-- opts.heads samples that many slices when opts.bh is not given. Errors
-- are pooled over the checked rows, with the check_outputs verdicts.
-- A check that would look at nothing is an error, never a pass: counts are
-- integers >= 1, lists are non-empty lists of ids in range.
-- spot_refs(p, opts) -> pre: the fp64 oracle's values for the heads and
-- blocks spot_check(p, outs, opts) would check, computed now. Experiments
-- compute them before any backward runs, so a backward that writes into its
-- inputs cannot move the reference it is checked against
-- (spot_check(p, outs, opts, pre)).
function M.spot_refs(p, opts)
  return M.spot_check(p, nil, opts, nil, true)
end

function M.spot_check(p, outs, opts, pre, refs_only)
  local problem = require "vsalab.problem"
  opts = opts or {}
  M.check_tols("spot_check", opts)
  if not refs_only then
    for _, name in ipairs{"dq", "dk", "dv"} do
      if type(outs) ~= "table" or outs[name] == nil then
        error("spot_check: outs must hold dq, dk and dv (missing '" .. name .. "')", 2)
      end
    end
  end
  if pre then return M.spot_compare(p, outs, opts, pre) end
  local function count(v, what)
    if v ~= nil and not (type(v) == "number" and v >= 1 and v == math.floor(v) and v < math.huge) then
      error("spot_check: field '" .. what .. "' must be an integer >= 1 or a list of ids, got " .. tostring(v), 3)
    end
  end
  local function list(v, n, what)
    if #v == 0 then error("spot_check: field '" .. what .. "' is an empty list (nothing would be checked)", 3) end
    for _, i in ipairs(v) do
      if not (type(i) == "number" and i == math.floor(i) and i >= 0 and i < n) then
        error(string.format("spot_check: field '%s' holds %s, expected ids in [0, %d)", what, tostring(i), n), 3)
      end
    end
  end
  local nbh = p.B * p.H
  -- bh: a list of (b, h) slices; else opts.heads of them sampled (default 2:
  -- the first and the last).
  if type(opts.bh) == "table" then list(opts.bh, nbh, "bh") elseif opts.bh ~= nil then
    error("spot_check: field 'bh' must be a list of 0-based b*H+h ids", 2)
  end
  count(opts.heads, "heads")
  local bhs = opts.bh or M.sample_ids(nbh, opts.heads or 2, (p.seed or 1) * 31 + 3)
  local function ids(v, n, salt)
    if type(v) == "table" then return v end
    if v == nil or v >= n then
      local all = {}
      for i = 0, n - 1 do all[#all + 1] = i end
      return all
    end
    return M.sample_ids(n, v, (p.seed or 1) * 7919 + salt)
  end
  for what, n in pairs{q_blocks = p.nq, kv_blocks = p.nkv} do
    if type(opts[what]) == "table" then list(opts[what], n, what) else count(opts[what], what) end
  end
  local qb, kb = ids(opts.q_blocks, p.nq, 1), ids(opts.kv_blocks, p.nkv, 2)
  local refs = {}
  for _, bh in ipairs(bhs) do
    local hp = problem.head(p, bh)
    refs[bh] = core.oracle{q = hp.q, k = hp.k, v = hp.v, dO = hp.dO,
      o = hp.o, lse = hp.lse, q2k_idx = hp.q2k_idx, q2k_num = hp.q2k_num,
      variable_block_sizes = p.vbs, sm_scale = p.sm_scale,
      q_blocks = qb, kv_blocks = kb, layout = p.layout}
    problem.free(hp)
  end
  pre = {bh = bhs, q_blocks = qb, kv_blocks = kb, refs = refs}
  if refs_only then return pre end
  return M.spot_compare(p, outs, opts, pre)
end

-- The comparison half of spot_check: outs against the oracle values in pre.
function M.spot_compare(p, outs, opts, pre)
  local parts = {dq = {}, dk = {}, dv = {}}
  local qb, kb = pre.q_blocks, pre.kv_blocks
  -- Tokens are dim 3 in bhsd [B,H,S,D], dim 2 in bshd [B,S,H,D] (heads the other).
  local sdim = p.layout == "bshd" and 2 or 3
  for _, bh in ipairs(pre.bh) do
    local ref = pre.refs[bh]
    local b, h = math.floor(bh / p.H), bh % p.H
    for name, blocks in pairs{dq = qb, dk = kb, dv = kb} do
      local x = outs[name]:narrow(1, b + 1, 1):narrow(5 - sdim, h + 1, 1)
      local bs = p.block or 64 -- tokens per block
      for _, blk in ipairs(blocks) do
        local xs = x:narrow(sdim, blk * bs + 1, bs):contiguous()
        local rs = ref[name]:narrow(sdim, blk * bs + 1, bs)
        table.insert(parts[name], core.compare(xs, rs))
        xs:free()
      end
    end
  end
  local res = {passed = true, errors = {}, bh = pre.bh, q_blocks = qb, kv_blocks = kb}
  for _, name in ipairs{"dq", "dk", "dv"} do
    local c = M.pool(parts[name])
    local tol = (opts.tols and opts.tols[name]) or opts.tol or 1e-2
    c.tol = tol
    c.passed = c.nonfinite == 0 and c.rel_l2 == c.rel_l2 and c.rel_l2 < tol
    if not c.passed then res.passed = false end
    res.errors[name] = c
  end
  return res
end

return M
