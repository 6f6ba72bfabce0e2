-- Tensors on the CPU: constructors, views, copies, conversion, cuRAND fill.
local H = require "helpers"

describe("tensor", function()
  it("round-trips nested tables for every dtype", function()
    for _, dt in ipairs{"bf16", "f32", "f64", "i32", "i64"} do
      local t = vsalab.from_table({{1, 2, 3}, {4, 5, -6}}, {dtype = dt})
      assert.equal(dt, t.dtype)
      assert.equal("cpu", t.device)
      assert.same({2, 3}, t.shape)
      assert.same({{1, 2, 3}, {4, 5, -6}}, t:to_table())
      assert.equal(6, t:numel())
    end
  end)

  it("rounds to bf16 to nearest even and keeps NaN", function()
    local t = vsalab.from_table({1 + 2^-9, 1 + 3 * 2^-9, 0/0}, {dtype = "bf16"})
    local v = t:to_table()
    assert.equal(1, v[1])          -- tie to even (down)
    assert.equal(1 + 2^-7, v[2])   -- tie to even (up)
    assert.is_true(v[3] ~= v[3])
  end)

  it("builds empty, zeros and full", function()
    assert.same({{0, 0}, {0, 0}}, vsalab.zeros({2, 2}):to_table())
    assert.same({7, 7, 7}, vsalab.full({3}, 7, {dtype = "i32"}):to_table())
    assert.same({0, 5}, vsalab.empty({0, 5}).shape)
  end)

  it("narrows, selects, transposes, expands and reshapes as views", function()
    local t = vsalab.from_table({{1, 2, 3}, {4, 5, 6}})
    assert.same({{2, 3}, {5, 6}}, t:narrow(2, 2, 2):to_table())
    assert.same({4, 5, 6}, t:select(1, 2):to_table())
    local tr = t:transpose(1, 2)
    assert.is_false(tr:is_contiguous())
    assert.same({{1, 4}, {2, 5}, {3, 6}}, tr:to_table())
    assert.same({{1, 4}, {2, 5}, {3, 6}}, tr:contiguous():to_table())
    assert.same({1, 2, 3, 4, 5, 6}, t:reshape{6}:to_table())
    assert.same({{1, 1}, {1, 1}}, vsalab.full({1, 1}, 1):expand{2, 2}:to_table())
    -- A stride-0 view too large to walk in reasonable time is refused.
    assert.truthy(H.err(function() return vsalab.zeros({1}):expand{2 ^ 40} end):find("more than 2^36", 1, true))
    -- Writes through a view reach the storage.
    t:narrow(1, 2, 1):fill(0)
    assert.same({{1, 2, 3}, {0, 0, 0}}, t:to_table())
    t:set(1, 1, 9)
    assert.equal(9, t:get(1, 1))
  end)

  it("converts dtypes", function()
    local t = vsalab.from_table({1.5, -2.7, 3e9}):to_dtype("i32")
    assert.same({1, -2, 2147483647}, t:to_table())
    assert.same({1.5, -2.75}, vsalab.from_table({1.5, -2.75}):to_dtype("bf16"):to_table())
  end)

  it("fills normal samples reproducibly from a seed", function()
    local s = H.seed()
    local a = vsalab.empty({1000}):fill_randn{seed = s}
    local b = vsalab.empty({1000}):fill_randn{seed = s}
    local c = vsalab.empty({1000}):fill_randn{seed = s + 1}
    assert.equal(0, vsalab.compare(a, b).max_abs)
    assert.is_true(vsalab.compare(a, c).max_abs > 0)
    local v, sum, sq = a:to_table(), 0, 0
    for _, x in ipairs(v) do sum, sq = sum + x, sq + x * x end
    assert.is_true(math.abs(sum / 1000) < 0.15)
    assert.is_true(math.abs(sq / 1000 - 1) < 0.2)
    -- Unknown or non-finite options are refused by name.
    for _, o in ipairs{{seed = s, bogus = 1}, {seed = s, std = -1}, {seed = s, std = 0 / 0},
                       {seed = s, mean = 1 / 0}} do
      assert.truthy(H.err(a.fill_randn, a, o):match("^fill_randn: "))
    end
    -- bf16 and odd counts work too, std and mean honoured.
    local d = vsalab.empty({3, 7}, {dtype = "bf16"}):fill_randn{seed = s, mean = 10, std = 0.01}
    for _, row in ipairs(d:to_table()) do
      for _, x in ipairs(row) do assert.is_true(math.abs(x - 10) < 0.1) end
    end
  end)

  it("prints a summary", function()
    local s = tostring(vsalab.from_table({1, 0/0}))
    assert.truthy(s:match("Tensor%[2%] f32 cpu"))
    assert.truthy(s:match("nonfinite=1"))
  end)

  it("raises clear errors", function()
    assert.truthy(H.err(vsalab.empty, {2, -1}):match("non%-negative"))
    assert.truthy(H.err(vsalab.empty, {2}, {dtype = "f16"}):match("expected 'bf16'"))
    assert.truthy(H.err(vsalab.empty, {2}, {device = "gpu"}):match("expected 'cpu', 'cuda'"))
    assert.truthy(H.err(vsalab.from_table, {{1, 2}, {3}}):match("ragged"))
    assert.truthy(H.err(vsalab.from_table, {{1, "x"}}):match("expected a number"))
    local t = vsalab.zeros({2})
    t:free()
    assert.truthy(H.err(function() return t:numel() end):match("freed"))
    assert.truthy(H.err(function() return vsalab.zeros({2}):narrow(1, 2, 5) end):match("narrow: len"))
    assert.truthy(H.err(function() return vsalab.zeros({2}):fill_randn{} end):match("seed"))
    assert.truthy(H.err(function() return vsalab.zeros({2}, {dtype = "i32"}):fill_randn{seed = 1} end):match("integer dtype"))
  end)

  it("says there is no GPU instead of crashing", function()
    local ok, why = vsalab.cuda_available()
    if ok then return end
    assert.truthy(why:match("no CUDA device"))
    assert.truthy(H.err(vsalab.zeros, {2}, {device = "cuda"}):match("no CUDA device"))
    assert.truthy(H.err(vsalab.device_info):match("no CUDA device"))
  end)
end)
