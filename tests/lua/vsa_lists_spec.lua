-- VSA-like lists on the CPU: smooth_latent, vsa_topk and list_sharing
-- against brute-force Lua references, the statistics they are for, the
-- problem/experiment plumbing (lists axis, point identity) and errors.
local H = require "helpers"
local ffi = require "ffi"
local problem = require "vsalab.problem"

-- f32 and bf16 rounding (nearest even) of a Lua number, through memory.
local fbuf = ffi.new("float[1]")
local ubuf = ffi.cast("uint32_t *", fbuf)
local function f32(x) fbuf[0] = x; return fbuf[0] end
local function bf16(x)
  fbuf[0] = x
  local u = ubuf[0]
  u = u + 0x7fff + math.floor(u / 65536) % 2
  ubuf[0] = math.floor(u / 65536) % 65536 * 65536
  return fbuf[0]
end

-- Token of latent cell (t, h, w) (0-based) in VSA's tile-major layout,
-- written from the definition: tiles in (t, h, w) row-major, a tile's cells
-- (clipped to the latent) in (t, h, w) row-major first, padding after.
local function token_map(T, Hh, W)
  local nh, nw = math.ceil(Hh / 4), math.ceil(W / 4)
  local map = {}
  for t = 0, T - 1 do for h = 0, Hh - 1 do for w = 0, W - 1 do
    local it, ih, iw = math.floor(t / 4), math.floor(h / 4), math.floor(w / 4)
    local eh, ew = math.min(4, Hh - 4 * ih), math.min(4, W - 4 * iw)
    local block = (it * nh + ih) * nw + iw
    map[(t * Hh + h) * W + w] = block * 64 + ((t - 4 * it) * eh + (h - 4 * ih)) * ew + (w - 4 * iw)
  end end end
  return map
end

-- The correlated field of one (b, h) slice x[token][d] (Lua tables,
-- 0-based tokens), by a direct 3-D sum in double.
local function smooth_ref(x, T, Hh, W, D, ell)
  local map = token_map(T, Hh, W)
  local sigma = ell / 2
  local R = ell > 0 and math.ceil(3 * sigma) or 0
  local g = {}
  for r = -R, R do g[r] = ell > 0 and math.exp(-r * r / (2 * sigma * sigma)) or 1 end
  local function norm(c, N)
    local s = 0
    for r = -R, R do if c + r >= 0 and c + r < N then s = s + g[r] * g[r] end end
    return math.sqrt(s)
  end
  local ncell = T * Hh * W
  local y = {}
  for t = 0, T - 1 do for h = 0, Hh - 1 do for w = 0, W - 1 do
    local c = (t * Hh + h) * W + w
    local nm = norm(t, T) * norm(h, Hh) * norm(w, W)
    y[c] = {}
    for d = 1, D do
      local s = 0
      for rt = -R, R do
        local tt = t + rt
        if tt >= 0 and tt < T then
          for rh = -R, R do
            local hh = h + rh
            if hh >= 0 and hh < Hh then
              for rw = -R, R do
                local ww = w + rw
                if ww >= 0 and ww < W then
                  s = s + g[rt] * g[rh] * g[rw] * x[map[(tt * Hh + hh) * W + ww]][d]
                end
              end
            end
          end
        end
      end
      y[c][d] = s / nm
    end
  end end end
  for d = 1, D do
    local m, v = 0, 0
    for c = 0, ncell - 1 do m = m + y[c][d] end
    m = m / ncell
    for c = 0, ncell - 1 do v = v + (y[c][d] - m) ^ 2 end
    local sd = math.sqrt(v / ncell)
    for c = 0, ncell - 1 do y[c][d] = (y[c][d] - m) / sd end
  end
  return y, map
end

-- FastVideo's selection for one slice, brute force: pooled means, f32 dot
-- products in ascending d, bf16 roundings, ties to the lower kv index.
-- FastVideo's rule (src/core/vsa_lists.h): fp32 block sums (exact here,
-- then rounded once), divided by vbs in fp32, rounded to bf16; scores
-- times the fp32 reciprocal of fp32 sqrt(D); an empty (vbs = 0) kv block
-- is never kept and an empty q block keeps nothing. bs: tokens per block.
local function topk_ref(q, k, nq, nkv, D, qvbs, kvbs, topk, bs)
  bs = bs or 64
  local function pool(x, n, vbs)
    local out = {}
    for j = 0, n - 1 do
      out[j] = {}
      for d = 1, D do
        local s = 0
        for t = 0, vbs[j + 1] - 1 do s = s + x[j * bs + t][d] end
        out[j][d] = vbs[j + 1] > 0 and bf16(f32(f32(s) / vbs[j + 1])) or 0
      end
    end
    return out
  end
  local qc, kc = pool(q, nq, qvbs), pool(k, nkv, kvbs)
  local inv_root = f32(1 / f32(math.sqrt(D)))
  local lists = {}
  for i = 0, nq - 1 do
    local cand = {}
    for j = 0, nkv - 1 do
      local s = 0
      for d = 1, D do s = f32(s + qc[i][d] * kc[j][d]) end
      if kvbs[j + 1] > 0 and qvbs[i + 1] > 0 then
        cand[#cand + 1] = {score = bf16(f32(bf16(s) * inv_root)), j = j}
      end
    end
    table.sort(cand, function(a, b)
      if a.score ~= b.score then return a.score > b.score end
      return a.j < b.j
    end)
    local l = {}
    for e = 1, math.min(topk, #cand) do l[e] = cand[e].j end
    table.sort(l)
    lists[i] = l
  end
  return lists
end

-- Rows of a [B,H,S,D] tensor's slice bh (1-based b, h) as x[token][d].
local function slice_rows(t, b, h)
  local tt = t:to_dtype("f32"):to_table()[b][h]
  local x = {}
  for i, row in ipairs(tt) do x[i - 1] = row end
  return x
end

-- Brute-force sharing from q2k tables: mean over (b, h, j with partner
-- j xor 1 < nkv and a non-empty k2q list) of |k2q(j) ∩ k2q(partner)| / |k2q(j)|.
local function sharing_ref(idx, num, nkv)
  local total, n = 0, 0
  for b = 1, #idx do for h = 1, #idx[b] do
    local sets = {}
    for j = 0, nkv - 1 do sets[j] = {} end
    for i = 1, #idx[b][h] do
      for e = 1, num[b][h][i] do sets[idx[b][h][i][e]][i] = true end
    end
    for j = 0, nkv - 1 do
      local p = bit.bxor(j, 1)
      local cnt, shared = 0, 0
      for i in pairs(sets[j]) do
        cnt = cnt + 1
        if p < nkv and sets[p][i] then shared = shared + 1 end
      end
      if p < nkv and cnt > 0 then total, n = total + shared / cnt, n + 1 end
    end
  end end
  return n > 0 and total / n or nil, n
end

describe("smooth_latent", function()
  it("matches a direct 3-D Gaussian filter and standardisation", function()
    -- 5x6x7: partial tiles on every axis (8 blocks, sizes 16..64).
    local T, Hh, W, D = 5, 6, 7, 8
    for _, ell in ipairs{0, 2, 3} do
      local x = vsalab.empty({1, 2, 8 * 64, D}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
      local before = {slice_rows(x, 1, 1), slice_rows(x, 1, 2)}
      vsalab.smooth_latent(x, {latent = {T, Hh, W}, ell = ell})
      for h = 1, 2 do
        local ref, map = smooth_ref(before[h], T, Hh, W, D, ell)
        local got = slice_rows(x, 1, h)
        local cell_of = {}
        for c, tok in pairs(map) do cell_of[tok] = c end
        local worst = 0
        for tok = 0, 8 * 64 - 1 do
          for d = 1, D do
            local c = cell_of[tok]
            if c then
              local r = ref[c][d]
              worst = math.max(worst, math.abs(got[tok][d] - r) / (math.abs(r) + 0.05))
            else
              assert.equal(0, got[tok][d]) -- padding tokens are zero
            end
          end
        end
        -- bf16 rounding of the result (2^-9 relative) plus f32 passes.
        assert.is_true(worst < 2 ^ -8, string.format("ell %g head %d: worst rel diff %g", ell, h, worst))
      end
    end
  end)

  it("has the promised correlation length", function()
    -- Correlation of cells r apart along w: exp(-(r/ell)^2) for ell > 0.
    local function corr(ell, r)
      local T, Hh, W, D = 8, 16, 16, 32
      local x = vsalab.empty({1, 1, 32 * 64, D}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
      vsalab.smooth_latent(x, {latent = {T, Hh, W}, ell = ell})
      local rows, map = slice_rows(x, 1, 1), token_map(T, Hh, W)
      local sxy, sxx, syy = 0, 0, 0
      for t = 0, T - 1 do for h = 0, Hh - 1 do for w = 0, W - 1 - r do
        local a, b = rows[map[(t * Hh + h) * W + w]], rows[map[(t * Hh + h) * W + w + r]]
        for d = 1, D do
          sxy, sxx, syy = sxy + a[d] * b[d], sxx + a[d] * a[d], syy + b[d] * b[d]
        end
      end end end
      return sxy / math.sqrt(sxx * syy)
    end
    assert.is_true(math.abs(corr(0, 1)) < 0.1)
    local c1, c4 = corr(4, 1), corr(4, 4)
    assert.is_true(c1 > 0.85, "ell 4, r 1: " .. c1)     -- exp(-1/16) = 0.94
    -- exp(-1) = 0.37 on an infinite latent; centring each channel over this
    -- 16-cell-wide one lowers it to about 0.29.
    assert.is_true(c4 > 0.15 and c4 < 0.55, "ell 4, r 4: " .. c4)
  end)

  it("gives the same bits with any thread count, on a copy too", function()
    local x = vsalab.empty({2, 3, 8 * 64, 16}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
    local y = x:clone()
    vsalab.smooth_latent(x, {latent = {5, 6, 7}, ell = 2.5, threads = 1})
    vsalab.smooth_latent(y, {latent = {5, 6, 7}, ell = 2.5, threads = 4})
    assert.equal(0, vsalab.compare(x:to_dtype("f64"), y:to_dtype("f64")).max_abs)
  end)

  it("rejects bad arguments by name", function()
    local x = vsalab.empty({1, 1, 8 * 64, 16}, {dtype = "bf16"})
    assert.truthy(H.err(vsalab.smooth_latent, x, {ell = 1}):match("'latent'"))
    assert.truthy(H.err(vsalab.smooth_latent, x, {latent = {5, 6, 7}}):match("'ell'"))
    assert.truthy(H.err(vsalab.smooth_latent, x, {latent = {5, 6, 7}, ell = -1}):match("'ell'"))
    assert.truthy(H.err(vsalab.smooth_latent, x, {latent = {5, 6, 7}, ell = 0 / 0}):match("'ell'"))
    assert.truthy(H.err(vsalab.smooth_latent, x, {latent = {5, 6, 7}, ell = 65}):match("%[0, 64%]"))
    assert.truthy(H.err(vsalab.smooth_latent, x, {latent = {12, 8, 8}, ell = 1}):match("does not match latent"))
    assert.truthy(H.err(vsalab.smooth_latent, x, {latent = {5, 6}, ell = 1}):match("'latent'"))
    assert.truthy(H.err(vsalab.smooth_latent, x, {latent = {5, 6, 7}, ell = 1, tile = {2, 2, 2}}):match("64"))
    assert.truthy(H.err(vsalab.smooth_latent, x, {latent = {5, 6, 7}, ell = 1, sigma = 2}):match("sigma"))
    assert.truthy(H.err(vsalab.smooth_latent, x:to_dtype("f32"), {latent = {5, 6, 7}, ell = 1}):match("^x: expected dtype bf16"))
    assert.truthy(H.err(vsalab.smooth_latent, x, {latent = {5, 6, 7}, ell = 1, threads = 0}):match("'threads'"))
  end)
end)

describe("vsa_topk", function()
  it("selects FastVideo's top-k from mean-pooled q.k^T (brute-force reference)", function()
    local T, Hh, W, D = 5, 6, 7, 16
    local vbs = vsalab.video_blocks{T = T, H = Hh, W = W}:to_table()
    for _, ell in ipairs{0, 2} do
      local q = vsalab.empty({1, 2, 8 * 64, D}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
      local k = vsalab.empty({1, 2, 8 * 64, D}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
      vsalab.smooth_latent(q, {latent = {T, Hh, W}, ell = ell})
      vsalab.smooth_latent(k, {latent = {T, Hh, W}, ell = ell})
      for _, topk in ipairs{1, 3, 8} do
        local idx, num, got_k = vsalab.vsa_topk{q = q, k = k, topk = topk, latent = {T, Hh, W}, width = 9}
        assert.equal(topk, got_k)
        local it, nt = idx:to_table(), num:to_table()
        for h = 1, 2 do
          local ref = topk_ref(slice_rows(q, 1, h), slice_rows(k, 1, h), 8, 8, D, vbs, vbs, topk)
          for i = 0, 7 do
            assert.equal(topk, nt[1][h][i + 1])
            for e = 1, 9 do
              assert.equal(ref[i][e] or -1, it[1][h][i + 1][e])
            end
          end
        end
      end
    end
  end)

  it("selects the same way at block 128 (2x8x8 tiles, an empty kv block, an empty q block)", function()
    local T, Hh, W, D = 3, 9, 10, 16 -- 2x2x2 tiles of 2x8x8, edges clipped
    local vbs = vsalab.video_blocks{T = T, H = Hh, W = W, block = 128}:to_table()
    assert.same({128, 32, 16, 4, 64, 16, 8, 2}, vbs)
    local q = vsalab.empty({1, 2, 8 * 128, D}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
    local k = vsalab.empty({1, 2, 8 * 128, D}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
    vsalab.smooth_latent(q, {latent = {T, Hh, W}, ell = 2, block = 128})
    vsalab.smooth_latent(k, {latent = {T, Hh, W}, ell = 2, block = 128})
    for _, topk in ipairs{1, 3, 8} do
      local idx, num = vsalab.vsa_topk{q = q, k = k, topk = topk, latent = {T, Hh, W}, block = 128,
        width = 9}
      local it, nt = idx:to_table(), num:to_table()
      for h = 1, 2 do
        local ref = topk_ref(slice_rows(q, 1, h), slice_rows(k, 1, h), 8, 8, D, vbs, vbs, topk, 128)
        for i = 0, 7 do
          assert.equal(topk, nt[1][h][i + 1])
          for e = 1, 9 do assert.equal(ref[i][e] or -1, it[1][h][i + 1][e]) end
        end
      end
    end
    -- Given sizes with empty blocks: kv block 2 is never kept, q block 1
    -- keeps nothing, every other row keeps min(topk, 7 live kv blocks).
    local kv = {128, 100, 0, 65, 64, 1, 128, 127}
    local qv = {128, 0, 3, 128, 64, 70, 128, 128}
    local idx, num = vsalab.vsa_topk{q = q, k = k, topk = 8, block = 128,
      variable_block_sizes = vsalab.from_table(kv, {dtype = "i32"}),
      q_variable_block_sizes = vsalab.from_table(qv, {dtype = "i32"})}
    local it, nt = idx:to_table(), num:to_table()
    local ref = topk_ref(slice_rows(q, 1, 1), slice_rows(k, 1, 1), 8, 8, D, qv, kv, 8, 128)
    for i = 0, 7 do
      assert.equal(i == 1 and 0 or 7, nt[1][1][i + 1])
      for e = 1, 8 do assert.equal(ref[i][e] or -1, it[1][1][i + 1][e]) end
    end
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 2, block = 96}):match("64, 128"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 2, latent = {T, Hh, W},
      tile = {4, 4, 4}, block = 128}):match("volume 64, not the block size 128"))
  end)

  it("takes [B,S,H,D] q and k with layout='bshd': the lists of the [B,H,S,D] ones", function()
    local T, Hh, W, D = 5, 6, 7, 16
    local q = vsalab.empty({2, 3, 8 * 64, D}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
    local k = vsalab.empty({2, 3, 8 * 64, D}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
    local want_i, want_n = vsalab.vsa_topk{q = q, k = k, topk = 3, latent = {T, Hh, W}}
    local qs, ks = q:transpose(2, 3):contiguous(), k:transpose(2, 3):contiguous()
    local got_i, got_n = vsalab.vsa_topk{q = qs, k = ks, topk = 3, latent = {T, Hh, W}, layout = "bshd"}
    assert.same(want_i:to_table(), got_i:to_table())
    assert.same(want_n:to_table(), got_n:to_table())
    -- k in the other layout is named, with both shapes.
    local e = H.err(vsalab.vsa_topk, {q = qs, k = k, topk = 3, latent = {T, Hh, W}, layout = "bshd"})
    assert.truthy(e:find("k: shape [2,3,512,16] does not match layout bshd [B,Skv,H,D] = [2,512,3,16]", 1, true), e)
    e = H.err(vsalab.vsa_topk, {q = q, k = k, topk = 3, latent = {T, Hh, W}, layout = "sbhd"})
    assert.truthy(e:find("layout: 'sbhd' is not supported", 1, true), e)
  end)

  it("breaks score ties toward the lower kv index (Sq != Skv, given sizes)", function()
    -- Inputs in {-1, 0, 1}: many equal scores.
    local nq, nkv, D = 3, 10, 4
    local function ternary(S, seed)
      local t = vsalab.empty({1, 1, S, D}, {dtype = "f32"}):fill_randn{seed = seed}
      local rows = t:to_table()
      for _, r in ipairs(rows[1][1]) do
        for d = 1, D do r[d] = r[d] > 0.6 and 1 or (r[d] < -0.6 and -1 or 0) end
      end
      return vsalab.from_table(rows, {dtype = "bf16"})
    end
    local q, k = ternary(nq * 64, H.seed()), ternary(nkv * 64, H.seed())
    local kvbs = {64, 1, 2, 63, 64, 32, 16, 8, 0, 64}
    local qvbs = {64, 33, 7}
    local idx = vsalab.vsa_topk{q = q, k = k, topk = 4,
      variable_block_sizes = vsalab.from_table(kvbs, {dtype = "i32"}),
      q_variable_block_sizes = vsalab.from_table(qvbs, {dtype = "i64"})}
    local ref = topk_ref(slice_rows(q, 1, 1), slice_rows(k, 1, 1), nq, nkv, D, qvbs, kvbs, 4)
    local got = idx:to_table()[1][1]
    for i = 0, nq - 1 do assert.same(ref[i], got[i + 1]) end
  end)

  it("rejects bad arguments by name", function()
    local q = vsalab.empty({1, 2, 8 * 64, 16}, {dtype = "bf16"}):fill_randn{seed = 1}
    local k = q:clone()
    local lat = {5, 6, 7}
    assert.truthy(H.err(vsalab.vsa_topk, {k = k, topk = 2}):match("^q: expected a tensor"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k:narrow(2, 1, 1):contiguous(), topk = 2}):match("^k: shape %[1,1,512,16%] does not match layout bhsd"))
    -- The shape k should have had keeps k's own Skv (its size over q's
    -- B*H*D said "= [1,2,1024,16]" for 4 heads, [1,2,256,16] for 1).
    for _, shape in ipairs{{1, 4, 512, 16}, {1, 1, 512, 16}, {2, 2, 512, 16}, {1, 2, 512, 32}} do
      local kk = vsalab.empty(shape, {dtype = "bf16"}):fill_randn{seed = H.seed()}
      local e = H.err(vsalab.vsa_topk, {q = q, k = kk, topk = 2})
      assert.truthy(e:find("does not match layout bhsd [B,H,Skv,D] = [1,2,512,16]", 1, true), e)
    end
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 2, density = 0.5}):match("not both"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k}):match("'density'"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 9}):match("'topk'"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 3, width = 2}):match("'width'"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 2, latent = {12, 8, 8}}):match("12 blocks, k has 8"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 2, latent = lat,
      variable_block_sizes = vsalab.full({8}, 64, {dtype = "i32"})}):match("not both"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 2,
      variable_block_sizes = vsalab.full({7}, 64, {dtype = "i32"})}):match("^variable_block_sizes: expected shape"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 2,
      variable_block_sizes = vsalab.full({8}, 65, {dtype = "i32"})}):match("variable_block_sizes%[0%] is 65"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = k, topk = 2, seed = 1}):match("seed"))
    local bad = q:clone()
    bad:set(1, 2, 64 * 3 + 5, 7, 0 / 0)
    assert.truthy(H.err(vsalab.vsa_topk, {q = bad, k = k, topk = 2}):match("q has a non%-finite block mean %(slice b%*H%+h = 1, q block 3%)"))
    assert.truthy(H.err(vsalab.vsa_topk, {q = q, k = bad, topk = 2}):match("k has a non%-finite"))
  end)
end)

describe("list_sharing", function()
  it("matches a brute-force count, ragged lists and an odd block count included", function()
    for _, c in ipairs{{nkv = 12, ragged = false}, {nkv = 13, ragged = true}, {nkv = 1, ragged = false}} do
      local idx, num = vsalab.random_topk{B = 2, H = 2, nq = 9, nkv = c.nkv, density = 0.4,
        ragged = c.ragged, seed = H.seed(), width = c.nkv}
      local s, n = vsalab.list_sharing(idx, num, c.nkv)
      local rs, rn = sharing_ref(idx:to_table(), num:to_table(), c.nkv)
      assert.equal(rn, n)
      if rs then assert.is_true(math.abs(s - rs) < 1e-12) else assert.is_nil(s) end
    end
  end)

  it("is about the density for random lists", function()
    local nkv, topk = 200, 50
    local idx, num = vsalab.random_topk{B = 1, H = 4, nq = 200, nkv = nkv, topk = topk, seed = H.seed()}
    local s = vsalab.list_sharing(idx, num, nkv)
    local expect = (topk - 1) / (nkv - 1)
    assert.is_true(math.abs(s - expect) < 0.02, s .. " vs " .. expect)
  end)

  it("rejects invalid lists", function()
    local idx = vsalab.from_table({{{{0, 1}, {2, 2}}}}, {dtype = "i32"})
    local num = vsalab.from_table({{{2, 2}}}, {dtype = "i32"})
    assert.truthy(H.err(vsalab.list_sharing, idx, num, 4):match("index 2 repeated at %(slice 0, q block 1%)"))
    assert.truthy(H.err(vsalab.list_sharing, idx, num, 2):match("index 2 out of range %[0, 2%)"))
    assert.truthy(H.err(vsalab.list_sharing, idx, vsalab.from_table({{{3, 1}}}, {dtype = "i32"}), 4):match("q2k_num is 3"))
    assert.truthy(H.err(vsalab.list_sharing, idx, num, 0):match("num_kv_blocks"))
    assert.truthy(H.err(vsalab.list_sharing, idx, vsalab.from_table({{{3}}}, {dtype = "i32"}), 4):match("^q2k_num: expected shape"))
    -- An i64 entry no i32 holds is reported as itself (it read 2147483647).
    local e = H.err(vsalab.list_sharing, vsalab.from_table({{{{0, 2^33}}}}, {dtype = "i64"}),
      vsalab.from_table({{{2}}}, {dtype = "i64"}), 4)
    assert.truthy(e:find("index 8589934592 out of range", 1, true), e)
    assert.equal(1, (vsalab.list_sharing(vsalab.from_table({{{{0, 1}}}}, {dtype = "i64"}),
      vsalab.from_table({{{2}}}, {dtype = "i64"}), 2)))
  end)
end)

describe("problem.build lists='vsa:ℓ'", function()
  local function build(lists, seed, extra)
    local s = {H = 4, latent = {12, 24, 24}, D = 32, density = 0.25, seed = seed,
      device = "cpu", lists = lists, forward = false}
    for k, v in pairs(extra or {}) do s[k] = v end
    return problem.build(s)
  end

  it("gives valid lists: ℓ = 0 shares like random lists, ℓ = 4 clearly more", function()
    local seed = H.seed()
    local expect
    for _, lists in ipairs{"random", "vsa:0", "vsa:4"} do
      local p = build(lists, seed)
      assert.equal(lists, p.lists)
      assert.equal(108, p.nkv)
      expect = (p.topk - 1) / (p.nkv - 1)
      -- Every row: topk distinct blocks in range (vsa rows ascending).
      local it, nt = p.q2k_idx:to_table(), p.q2k_num:to_table()
      for h = 1, 4 do for i = 1, p.nq do
        assert.equal(p.topk, nt[1][h][i])
        local seen = {}
        for e = 1, p.topk do
          local j = it[1][h][i][e]
          assert.is_true(j >= 0 and j < p.nkv and not seen[j])
          seen[j] = true
          if lists ~= "random" and e > 1 then assert.is_true(j > it[1][h][i][e - 1]) end
        end
      end end
      if lists == "vsa:4" then
        assert.is_true(p.sharing > expect + 0.1, lists .. ": sharing " .. p.sharing)
      else
        assert.is_true(math.abs(p.sharing - expect) < 0.05, lists .. ": sharing " .. p.sharing .. " vs " .. expect)
      end
      -- The lists are what the tensors say: vsa_topk of p.q, p.k again.
      if lists ~= "random" then
        local idx = vsalab.vsa_topk{q = p.q, k = p.k, topk = p.topk, latent = p.latent}
        assert.equal(0, vsalab.compare(idx:to_dtype("f64"), p.q2k_idx:to_dtype("f64")).max_abs)
      end
    end
  end)

  it("is deterministic from the seed, and the seed matters", function()
    local seed = H.seed()
    local a, b, c = build("vsa:2", seed), build("vsa:2", seed), build("vsa:2", seed + 1000)
    for _, k in ipairs{"q", "k", "v", "dO", "q2k_idx"} do
      assert.equal(0, vsalab.compare(a[k]:to_dtype("f64"), b[k]:to_dtype("f64")).max_abs, k)
    end
    assert.is_true(vsalab.compare(a.q2k_idx:to_dtype("f64"), c.q2k_idx:to_dtype("f64")).max_abs > 0)
    -- v and dO are the random problem's: only q, k and the lists change.
    local r = build("random", seed)
    assert.equal(0, vsalab.compare(a.v:to_dtype("f64"), r.v:to_dtype("f64")).max_abs)
    assert.is_true(vsalab.compare(a.q:to_dtype("f64"), r.q:to_dtype("f64")).max_abs > 0)
  end)

  it("lays Sq-only problems out as a cubic grid", function()
    assert.same({16, 16, 16}, problem.grid_latent(64))
    assert.same({32, 64, 64}, problem.grid_latent(2048))
    assert.same({4, 4, 28}, problem.grid_latent(7))
    assert.same({4, 8, 12}, problem.grid_latent(6))
    local p = problem.build{H = 1, Sq = 4096, D = 16, topk = 8, seed = H.seed(), device = "cpu",
      lists = "vsa:4.0", forward = false}
    assert.same({16, 16, 16}, p.latent)
    assert.equal("vsa:4", p.lists)
  end)

  it("rejects bad list kinds and combinations by name", function()
    local s = H.seed()
    assert.truthy(H.err(build, "vsa", s):match("'vsa' needs a correlation length"))
    assert.truthy(H.err(build, "vsa:x", s):match("^.-lists: expected 'random' or 'vsa:ℓ'.*'vsa:x'"))
    assert.truthy(H.err(build, "vsa:-1", s):match("lists: expected"))
    assert.truthy(H.err(build, "vsa:65", s):match("lists: expected"))
    assert.truthy(H.err(build, "blocks", s):match("got 'blocks'"))
    assert.truthy(H.err(build, 4, s):match("got 4"))
    assert.truthy(H.err(build, "vsa:2", s, {ragged = true}):match("ragged lists are random lists"))
    assert.truthy(H.err(problem.build, {H = 1, Sq = 128, Skv = 256, D = 16, topk = 1, seed = s,
      device = "cpu", lists = "vsa:1"}):match("Sq = Skv"))
  end)
end)

describe("the lists axis", function()
  local exp = require "vsalab.experiment"
  local sweep = require "vsalab.sweep"

  it("parses names with colons and keeps random points' hashes", function()
    local sw = sweep.new{axes = {{"density", {0.25}}, {"lists", {"random"}}}, fixed = {H = 2}}
    sw:override{"-a", "lists=[random,vsa:4]"}
    local pts = sw:points()
    assert.equal(2, #pts)
    assert.equal("vsa:4", pts[2].lists)
    sw:override{"-a", "lists=[vsa:4.0]"}
    assert.equal("vsa:4.0", sw:points()[1].lists)
    -- Normalised: random is the absence of the key (the hash of the point
    -- before the axis existed); vsa names are canonical.
    local old = sweep.hash{density = 0.25, H = 2}
    local r = exp.normalise_lists(pts[1])
    assert.is_nil(r.lists)
    assert.equal(old, r.hash)
    local v = exp.normalise_lists(sw:points()[1])
    assert.equal("vsa:4", v.lists)
    assert.equal(pts[2].hash, v.hash)
    assert.truthy(H.err(exp.normalise_lists, {lists = "vsa:abc"}):find("argument 'lists': expected", 1, true))
    -- Spaces around a name are trimmed to the canonical name.
    sw:override{"-a", "lists=[random, vsa:4 ]"}
    local spaced = sw:points()
    assert.is_nil(exp.normalise_lists(spaced[1]).lists)
    local trimmed = exp.normalise_lists(spaced[2])
    assert.equal("vsa:4", trimmed.lists)
    assert.equal(pts[2].hash, trimmed.hash)
  end)

  it("runs end to end: rows store lists and sharing; show, compare and the report tell them apart", function()
    local dir = H.tmpdir()
    local db = dir .. "/l.db"
    local smoke = H.root .. "/experiments/smoke.lua"
    assert.equal(0, (H.vsalab("run --db " .. db .. " " .. smoke .. " -a density=0.5")))
    local rc, out, err = H.vsalab("run --db " .. db .. " " .. smoke .. " -a density=0.5 -a lists=[random,vsa:2]")
    assert(rc == 0, err)
    assert.truthy(out:match("vsa:2"), out)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q([[SELECT id, run_id, kernel, point_hash, json_extract(extra, '$.lists') AS lists,
      json_extract(extra, '$.sharing') AS sharing, json_extract(extra, '$.point.lists') AS pl
      FROM result WHERE kernel != 'config' ORDER BY id]])
    d:close()
    local by = {}
    for _, r in ipairs(rows) do
      assert.is_true(r.sharing >= 0 and r.sharing <= 1)
      by[r.run_id .. r.kernel .. r.lists] = r
      assert.equal(r.lists ~= "random" and r.lists or nil, r.pl)
    end
    -- The random point of run 2 is run 1's point (same hash, same sharing).
    assert.equal(by["1referencerandom"].point_hash, by["2referencerandom"].point_hash)
    assert.equal(by["1referencerandom"].sharing, by["2referencerandom"].sharing)
    assert.is_not_nil(by["2referencevsa:2"])
    local _, shown = H.vsalab("show --db " .. db .. " 2")
    assert.truthy(shown:match("lists") and shown:match("sharing") and shown:match("vsa:2"), shown)
    -- compare: the random points match, the vsa points are run 2's only.
    local _, cmp = H.vsalab("compare --db " .. db .. " --floor-pct 500 1 2")
    assert.truthy(cmp:match("4 matching points"), cmp)
    assert.truthy(cmp:match("vsa:2[^\n]*ONLY B"), cmp)
    local html = dir .. "/r.html"
    assert.equal(0, (H.vsalab("report --db " .. db .. " -o " .. html .. " 2")))
    local text = assert(H.read(html))
    assert.truthy(text:find("reference 50% vsa:2", 1, true))
    assert.truthy(text:find(">reference 50%<", 1, true))
    -- A vsa row reruns with the same inputs (its point stores the lists).
    local rc2, _, err2 = H.vsalab("rerun --db " .. db .. " " .. by["2referencevsa:2"].id)
    assert(rc2 == 0, err2)
    d = vsalab.db_open(db, {readonly = true})
    local e = d:q([[SELECT json_extract(extra, '$.sharing') AS s, json_extract(extra, '$.lists') AS l
      FROM result WHERE run_id = 3]])[1]
    d:close()
    assert.equal("vsa:2", e.l)
    assert.equal(by["2referencevsa:2"].sharing, e.s)
    os.execute("rm -rf " .. dir)
  end)
end)
