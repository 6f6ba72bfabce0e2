-- Every CPU backward (today: the reference) against the fp64 oracle on
-- every case of ../shared/CASES.md that fits a CPU-sized shape.
local H = require "helpers"

describe("CASES.md on the CPU", function()
  for _, b in ipairs(vsalab.backends.available("cpu")) do
    local results = vsalab.cases.run(b, {device = "cpu", seed = H.seed() * 100})
    for _, r in ipairs(results) do
      it(b.name .. ": " .. vsalab.cases.format(r):sub(1, 100), function()
        assert(r.passed, vsalab.cases.format(r))
      end)
    end
    it(b.name .. ": ran every CPU-sized case", function()
      local seen = {}
      for _, r in ipairs(results) do seen[r.case] = true end
      for _, c in ipairs(vsalab.cases.list) do
        if not c.gpu then assert(seen[c.id], "case " .. c.id .. " did not run") end
      end
    end)
  end
end)

describe("reference on the CPU", function()
  local p = vsalab.problem.build{B = 1, H = 2, Sq = 256, Skv = 384, D = 32,
    density = 0.5, ragged = true, seed = H.seed(), device = "cpu"}

  it("matches the fp64 oracle with Sq ~= Skv and ragged lists", function()
    local dq, dk, dv = vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse,
      p.k2q_idx, p.k2q_num, p.vbs, {out_dtype = "f32"})
    -- Given the forward's o and lse (the backward's contract), f32 outputs
    -- from bf16 inputs sit far below bf16 rounding.
    local ref = vsalab.oracle{q = p.q, k = p.k, v = p.v, dO = p.dO, o = p.o,
      lse = p.lse, q2k_idx = p.q2k_idx, q2k_num = p.q2k_num,
      variable_block_sizes = p.vbs}
    local c = vsalab.check_outputs({dq = dq, dk = dk, dv = dv}, ref, {tol = 1e-5})
    assert(c.passed, vsalab.json.encode(c.errors))
    -- Against the oracle's own fp64 forward (o not rounded to bf16): 1e-2.
    ref = vsalab.oracle{q = p.q, k = p.k, v = p.v, dO = p.dO,
      q2k_idx = p.q2k_idx, q2k_num = p.q2k_num, variable_block_sizes = p.vbs}
    c = vsalab.check_outputs({dq = dq, dk = dk, dv = dv}, ref)
    assert(c.passed, vsalab.json.encode(c.errors))
    assert.equal("f32", dq.dtype)
    local o = vsalab.compare(p.o, ref.o)
    assert.is_true(o.rel_l2 < 1e-2 and o.nonfinite == 0)
  end)

  it("spot-checks sampled blocks the same way", function()
    local dq, dk, dv = vsalab.backends.get("reference").run(p)
    local res = vsalab.check.spot_check(p, {dq = dq, dk = dk, dv = dv}, {q_blocks = 2, kv_blocks = 2})
    assert.is_true(res.passed)
    assert.equal(2, #res.q_blocks)
    -- A corrupted output fails the spot check (the check has teeth).
    local bad = dk:to_dtype("f32")
    bad:narrow(3, 1, 1):fill(3)
    local res2 = vsalab.check.spot_check(p, {dq = dq, dk = bad, dv = dv}, {kv_blocks = {0}, q_blocks = {0}})
    assert.is_false(res2.passed)
  end)

  it("rejects bad arguments by name", function()
    local a = {p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs}
    local function with(i, v)
      local c = {unpack(a)}
      c[i] = v
      return H.err(vsalab.backward_ref, unpack(c, 1, 9))
    end
    assert.truthy(with(2, p.q:to_dtype("f32")):match("q: expected dtype bf16, got f32"))
    assert.truthy(with(1, p.dO:narrow(3, 1, 64):contiguous()):match("dO: expected shape"))
    assert.truthy(with(6, p.lse:to_dtype("bf16")):match("lse: expected dtype f32"))
    assert.truthy(with(3, p.k:narrow(3, 1, 100):contiguous()):match("not a positive multiple of 64"))
    assert.truthy(with(9, vsalab.full({6}, 65, {dtype = "i32"})):match("variable_block_sizes: entry 0 is 65"))
    assert.truthy(with(9, vsalab.full({5}, 64, {dtype = "i32"})):match("variable_block_sizes: expected shape %[6%]"))
    assert.truthy(with(7, "x"):match("k2q_idx: expected a tensor"))
    assert.truthy(with(2, p.q:transpose(3, 4)):match("q: expected"))
    local freed = p.v:clone()
    freed:free()
    assert.truthy(with(4, freed):match("v: tensor was freed"))
    assert.truthy(H.err(vsalab.forward_ref, p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs, {sm_scale = -1}):match("sm_scale"))
  end)
end)

describe("the case runner has teeth", function()
  it("catches a backward that forgets the vbs mask", function()
    local broken = {name = "nomask", run = function(p)
      return vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx,
        p.k2q_num, vsalab.full({p.nkv}, 64, {dtype = "i32"}), {sm_scale = p.sm_scale})
    end}
    local res = vsalab.cases.run(broken, {device = "cpu", seed = H.seed(), only = {2, 5}})
    local failed, crashed = 0, 0
    for _, r in ipairs(res) do
      if not r.passed then failed = failed + 1 end
      if r.check == "ran without error" then crashed = crashed + 1 end
    end
    assert.is_true(failed >= 2)
    assert.equal(0, crashed)
  end)
end)

describe("options", function()
  it("rejects misspelt option keys and conflicting ones", function()
    local p = vsalab.problem.build{B = 1, H = 1, Sq = 128, D = 16, topk = 1, seed = 1, device = "cpu"}
    assert.truthy(H.err(vsalab.forward_ref, p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs, {smscale = 1}):match("unknown option 'smscale'"))
    assert.truthy(H.err(vsalab.bench, function() end, {clockk = "host"}):match("unknown option 'clockk'"))
    assert.truthy(H.err(vsalab.random_topk, {B = 1, H = 1, nq = 2, nkv = 2, topk = 1, density = 0.5, seed = 1}):match("not both"))
    assert.truthy(H.err(vsalab.invert_indices, p.q2k_idx, p.q2k_num, 2.5):match("integer"))
  end)
end)

describe("vsalab.backward", function()
  it("runs the reference on the CPU and says so", function()
    local p = vsalab.problem.build{B = 1, H = 1, Sq = 128, D = 16, topk = 1, seed = H.seed(), device = "cpu"}
    local dq, dk, dv, name = vsalab.backward(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs)
    assert.equal("reference", name)
    assert.same(p.q.shape, dq.shape)
    local ok, why = vsalab.backward_supported("sm90a", p.q)
    assert.is_false(ok)
    assert.truthy(why:match("CUDA"))
    assert.is_false((vsalab.backward_supported("sm100a", p.q)))
  end)
end)
