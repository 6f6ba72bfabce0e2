-- Metadata builders and the q2k -> k2q inversion on the CPU.
local H = require "helpers"

-- Brute-force transpose: for each kv block, the q blocks selecting it, ascending.
local function transpose(idx, num, nkv)
  local out = {}
  for b = 1, #idx do
    out[b] = {}
    for h = 1, #idx[b] do
      local lists = {}
      for j = 1, nkv do lists[j] = {} end
      for i = 1, #idx[b][h] do
        for e = 1, num[b][h][i] do
          local j = idx[b][h][i][e]
          table.insert(lists[j + 1], i - 1)
        end
      end
      for j = 1, nkv do table.sort(lists[j]) end
      out[b][h] = lists
    end
  end
  return out
end

describe("video_blocks", function()
  it("cuts Wan latents into 624 and 1440 blocks", function()
    local vbs, S, n = vsalab.video_blocks{T = 21, H = 30, W = 52}
    assert.equal(624, n)
    assert.equal(624 * 64, S)
    local sum = 0
    for _, x in ipairs(vbs:to_table()) do sum = sum + x end
    assert.equal(21 * 30 * 52, sum)
    local _, S2, n2 = vsalab.video_blocks{T = 21, H = 45, W = 80}
    assert.equal(1440, n2)
    assert.equal(92160, S2)
  end)
  it("rejects bad tiles", function()
    assert.truthy(H.err(vsalab.video_blocks, {T = 4, H = 4, W = 4, tile = {2, 2, 2}}):match("64"))
    assert.truthy(H.err(vsalab.video_blocks, {T = 4, H = 4}):match("'W'"))
  end)
end)

describe("random_topk", function()
  it("draws distinct in-range blocks, reproducibly", function()
    local s = H.seed()
    local idx, num, topk = vsalab.random_topk{B = 2, H = 3, nq = 10, nkv = 12, density = 0.25, seed = s}
    assert.equal(3, topk)
    local t, n = idx:to_table(), num:to_table()
    for b = 1, 2 do for h = 1, 3 do for i = 1, 10 do
      assert.equal(3, n[b][h][i])
      local seen = {}
      for e = 1, 3 do
        local j = t[b][h][i][e]
        assert.is_true(j >= 0 and j < 12)
        assert.is_nil(seen[j])
        seen[j] = true
      end
    end end end
    local idx2 = vsalab.random_topk{B = 2, H = 3, nq = 10, nkv = 12, density = 0.25, seed = s}
    assert.equal(0, vsalab.compare(idx:to_dtype("f64"), idx2:to_dtype("f64")).max_abs)
    local idx3 = vsalab.random_topk{B = 2, H = 3, nq = 10, nkv = 12, density = 0.25, seed = s + 1}
    assert.is_true(vsalab.compare(idx:to_dtype("f64"), idx3:to_dtype("f64")).max_abs > 0)
  end)
  it("makes ragged rows including empty ones, padded with -1", function()
    local idx, num = vsalab.random_topk{B = 1, H = 4, nq = 64, nkv = 8, topk = 4, ragged = true, seed = H.seed()}
    local t, n = idx:to_table(), num:to_table()
    local zeros, full = 0, 0
    for h = 1, 4 do for i = 1, 64 do
      local c = n[1][h][i]
      assert.is_true(c >= 0 and c <= 4)
      if c == 0 then zeros = zeros + 1 end
      if c == 4 then full = full + 1 end
      for e = c + 1, 4 do assert.equal(-1, t[1][h][i][e]) end
    end end
    assert.is_true(zeros > 0 and full > 0)
  end)
end)

describe("invert_indices", function()
  it("matches a brute-force transpose, ascending, -1 padded", function()
    for _, shape in ipairs{{1, 1, 5, 7}, {2, 3, 16, 16}, {1, 2, 9, 4}} do
      local B, Hh, nq, nkv = shape[1], shape[2], shape[3], shape[4]
      local idx, num = vsalab.random_topk{B = B, H = Hh, nq = nq, nkv = nkv,
        topk = math.min(3, nkv), width = 5, ragged = true, seed = H.seed()}
      local ki, kn = vsalab.invert_indices(idx, num, nkv)
      assert.same({B, Hh, nkv, nq}, ki.shape)
      local want = transpose(idx:to_table(), num:to_table(), nkv)
      local got, cnt = ki:to_table(), kn:to_table()
      for b = 1, B do for h = 1, Hh do for j = 1, nkv do
        local w = want[b][h][j]
        assert.equal(#w, cnt[b][h][j])
        for e = 1, nq do assert.equal(w[e] or -1, got[b][h][j][e]) end
      end end end
    end
  end)

  it("never reads entries past a row's count", function()
    local idx = vsalab.from_table({{{{1, 99999}, {0, -7}}}}, {dtype = "i32"})
    local num = vsalab.from_table({{{1, 1}}}, {dtype = "i32"})
    local ki, kn = vsalab.invert_indices(idx, num, 2)
    assert.same({{{{1, -1}, {0, -1}}}}, ki:to_table())
    assert.same({{{1, 1}}}, kn:to_table())
  end)

  it("accepts int64 lists", function()
    local idx = vsalab.from_table({{{{1}, {0}}}}, {dtype = "i64"})
    local num = vsalab.from_table({{{1, 1}}}, {dtype = "i64"})
    local ki = vsalab.invert_indices(idx, num, 2)
    assert.same({{{{1, -1}, {0, -1}}}}, ki:to_table())
  end)

  it("names (b, h, q block) of a bad list", function()
    local function lists(rows, counts)
      return vsalab.from_table(rows, {dtype = "i32"}), vsalab.from_table(counts, {dtype = "i32"})
    end
    -- B=1, H=2, nq=2, width=2; the bad row is h=1, q block 1.
    local i, n = lists({{{{0, 1}, {1, 0}}, {{0, 1}, {5, 0}}}}, {{{2, 2}, {2, 2}}})
    local e = H.err(vsalab.invert_indices, i, n, 2)
    assert.truthy(e:match("q2k_idx"))
    assert.truthy(e:match("b=0, h=1, q block=1"))
    i, n = lists({{{{0, 1}, {1, 0}}, {{0, 1}, {1, 1}}}}, {{{2, 2}, {2, 2}}})
    e = H.err(vsalab.invert_indices, i, n, 2)
    assert.truthy(e:match("repeated"))
    assert.truthy(e:match("b=0, h=1, q block=1"))
    i, n = lists({{{{0, 1}, {1, 0}}, {{0, 1}, {1, 0}}}}, {{{2, 3}, {2, 2}}})
    e = H.err(vsalab.invert_indices, i, n, 2)
    assert.truthy(e:match("q2k_num"))
    assert.truthy(e:match("b=0, h=0, q block=1"))
    i, n = lists({{{{0, 1}, {1, 0}}, {{0, 1}, {1, 0}}}}, {{{2, 2}, {-1, 2}}})
    e = H.err(vsalab.invert_indices, i, n, 2)
    assert.truthy(e:match("q2k_num"))
    assert.truthy(e:match("h=1, q block=0"))
  end)

  it("checks argument shapes and types", function()
    local idx, num = vsalab.random_topk{B = 1, H = 1, nq = 4, nkv = 4, topk = 2, seed = 1}
    assert.truthy(H.err(vsalab.invert_indices, idx:to_dtype("f32"), num, 4):match("q2k_idx: expected dtype i32, got f32"))
    assert.truthy(H.err(vsalab.invert_indices, idx, num:narrow(3, 1, 2):contiguous(), 4):match("q2k_num: expected shape"))
    assert.truthy(H.err(vsalab.invert_indices, idx, num, 0):match("num_kv_blocks"))
    assert.truthy(H.err(vsalab.invert_indices, num, num, 4):match("expected rank 4"))
  end)
end)
