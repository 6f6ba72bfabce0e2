-- Every CPU backward (today: the reference) against the fp64 oracle on
-- every case of docs/CASES.md that fits a CPU-sized shape.
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
    -- A check that would look at nothing is an error, never a pass (NaN
    -- outputs included).
    local nan = {dq = dq:clone():fill(0 / 0), dk = dk:clone():fill(0 / 0), dv = dv:clone():fill(0 / 0)}
    for _, o in ipairs{{heads = 0}, {bh = {}}, {heads = 0 / 0}, {q_blocks = 0, kv_blocks = 0},
                       {q_blocks = -3}, {kv_blocks = 1.5}, {bh = {99}}, {tol = "x"}, {tols = 5}} do
      local e = H.err(vsalab.check.spot_check, p, nan, o)
      assert.truthy(e:find("spot_check: field", 1, true), e)
    end
    assert.truthy(H.err(vsalab.check.spot_check, p, {dq = dq}, {}):find("missing 'dk'", 1, true))
    assert.truthy(H.err(vsalab.check_outputs, {}, {}):find("nothing to check", 1, true))
    assert.truthy(H.err(vsalab.check_outputs, {dq = dq}, {}):find("missing output 'dq'", 1, true))
  end)

  it("rejects bad arguments by name", function()
    local a = {p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs}
    local function with(i, v)
      local c = {unpack(a)}
      c[i] = v
      return H.err(vsalab.backward_ref, unpack(c, 1, 9))
    end
    assert.truthy(with(2, p.q:to_dtype("f32")):match("q: expected dtype bf16, got f32"))
    assert.truthy(with(1, p.dO:narrow(3, 1, 64):contiguous()):match("dO: shape %[1,2,64,32%] does not match layout bhsd %[B,H,Sq,D%] = %[1,2,256,32%]"))
    assert.truthy(with(6, p.lse:to_dtype("bf16")):match("lse: expected dtype f32"))
    assert.truthy(with(3, p.k:narrow(3, 1, 100):contiguous()):match("not a positive multiple of 64"))
    assert.truthy(with(9, vsalab.full({6}, 65, {dtype = "i32"})):match("variable_block_sizes: entry 0 is 65"))
    assert.truthy(with(9, vsalab.full({5}, 64, {dtype = "i32"})):match("variable_block_sizes: expected shape %[6%]"))
    assert.truthy(with(7, "x"):match("k2q_idx: expected a tensor"))
    assert.truthy(with(2, p.q:transpose(3, 4)):match("q: expected"))
    local freed = p.v:clone()
    freed:free()
    assert.truthy(with(4, freed):match("v: tensor was freed"))
    -- q of another Sq is the one named, not dO (which agrees with o).
    local e = with(2, p.q:narrow(3, 1, 128):contiguous())
    assert.truthy(e:find("q: shape [1,2,128,32] does not match dO and o, both [1,2,256,32]", 1, true), e)
    -- Named in argument order: nothing given is dO missing, for the
    -- native backward too (it checks its arguments before the device).
    for _, fn in ipairs{"backward_ref", "backward_sm90a", "backward_sm100a"} do
      e = H.err(vsalab[fn])
      assert.truthy(e:match("^dO: expected a tensor, got no value"), fn .. ": " .. e)
    end
    assert.truthy(H.err(vsalab.forward_ref, p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs, {sm_scale = -1}):match("sm_scale"))
  end)
end)

describe("backward_ref out= and poison=", function()
  local p = vsalab.problem.build{B = 1, H = 2, Sq = 256, Skv = 384, D = 32,
    density = 0.5, ragged = true, seed = H.seed(), device = "cpu"}
  local args = {p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs}
  local function bwd(opts)
    local a = {unpack(args, 1, 9)}
    a[10] = opts
    return vsalab.backward_ref(unpack(a, 1, 10))
  end
  local names = {"dq", "dk", "dv"}

  -- Same bits: equal values, same sign of zero, no NaN (bf16 and f32 values
  -- are exact as Lua numbers).
  local function same_bits(a, b, what)
    assert.equal(a.dtype, b.dtype, what)
    assert.same(a.shape, b.shape, what)
    local x, y = a:reshape({a:numel()}):to_table(), b:reshape({b:numel()}):to_table()
    for i = 1, #x do
      if not (x[i] == y[i] and 1 / x[i] == 1 / y[i]) then
        error(string.format("%s: element %d differs: %.9g vs %.9g", what, i, x[i], y[i]), 2)
      end
    end
  end

  -- Buffers shaped like the outputs, filled with garbage.
  local function bufs(dtype, value)
    local o = {}
    for i, s in ipairs{p.q.shape, p.k.shape, p.k.shape} do
      o[i] = vsalab.full(s, value or 7.5, {dtype = dtype})
    end
    return o
  end

  for _, dt in ipairs{"bf16", "f32"} do
    it("gives bitwise the results of a fresh call (" .. dt .. ")", function()
      local ref = {bwd({out_dtype = dt})}
      for _, poison in ipairs{true, false} do
        for _, validate in ipairs{true, false} do
          local out = bufs(dt, poison and 7.5 or 0 / 0)
          local got = {bwd({out_dtype = dt, out = out, poison = poison, validate = validate})}
          for i = 1, 3 do
            assert.is_true(rawequal(out[i], got[i]), names[i] .. " is not the out buffer")
            same_bits(got[i], ref[i], string.format("%s (%s, poison=%s, validate=%s)",
              names[i], dt, tostring(poison), tostring(validate)))
          end
          -- Reused as is: every element is written again.
          bwd({out_dtype = dt, out = out, poison = false})
          for i = 1, 3 do same_bits(out[i], ref[i], names[i] .. " (reused)") end
        end
      end
    end)
  end

  it("keeps poison=false out of a fresh call's results", function()
    local ref = {bwd()}
    local got = {bwd({poison = false, sm_scale = p.sm_scale})}
    for i = 1, 3 do same_bits(got[i], ref[i], names[i]) end
  end)

  it("times the reference backend into the run's buffers", function()
    local b = vsalab.backends.get("reference")
    assert.is_function(b.timed)
    local dq, dk, dv = b.run(p)
    local ref = {dq:clone(), dk:clone(), dv:clone()}
    local outs = {dq = dq, dk = dk, dv = dv}
    for _, t in pairs(outs) do t:fill(0 / 0) end
    local fn = b.timed(p, outs)
    fn()
    same_bits(outs.dq, ref[1], "dq")
    same_bits(outs.dk, ref[2], "dk")
    same_bits(outs.dv, ref[3], "dv")
    -- and it goes through bench like the experiments time it.
    local st = vsalab.bench(fn, b.bench_opts)
    assert.is_true(st.samples >= 1)
    same_bits(outs.dk, ref[2], "dk after bench")
  end)

  it("rejects each bad out= argument by name", function()
    local function err(out, opts)
      opts = opts or {}
      opts.out = out
      return H.err(bwd, opts)
    end
    local function check(msg, pat)
      assert(msg:find(pat, 1, true), "message '" .. msg .. "' lacks '" .. pat .. "'")
    end
    local o = bufs("bf16")
    -- not a table, missing or wrong entries
    check(err(5), "backward_ref: field 'out' must be a table {dq, dk, dv}, got number")
    check(err({o[1], o[2]}), "out[3] (dv): expected a tensor, got nil")
    check(err({o[1], "x", o[3]}), "out[2] (dk): expected a tensor, got string")
    -- dtype: must match out_dtype (bf16 by default)
    local f = bufs("f32")
    check(err({f[1], o[2], o[3]}), "out[1] (dq): expected dtype bf16 (out_dtype), got f32")
    check(err({f[1], f[2], o[3]}, {out_dtype = "f32"}), "out[3] (dv): expected dtype f32 (out_dtype), got bf16")
    -- shape: dq like q, dk and dv like k (Sq ~= Skv here)
    check(err({o[2], o[2]:clone(), o[3]}), "out[1] (dq): expected shape [1,2,256,32], got [1,2,384,32]")
    check(err({o[1], o[1]:clone(), o[3]}), "out[2] (dk): expected shape [1,2,384,32], got [1,2,256,32]")
    check(err({o[1], o[2], o[3]:reshape({2, 384, 32})}), "out[3] (dv): expected rank 4, got shape [2,384,32]")
    check(err({o[1], o[2], vsalab.empty({1, 2, 32, 384}, {dtype = "bf16"}):transpose(3, 4)}),
      "out[3] (dv): expected a contiguous tensor")
    local freed = o[1]:clone()
    freed:free()
    check(err({freed, o[2], o[3]}), "out[1] (dq): tensor was freed")
    -- memory shared with an input or another output (views included)
    check(err({p.q, o[2], o[3]}), "out[1] (dq) shares memory with q")
    check(err({p.dO, o[2], o[3]}), "out[1] (dq) shares memory with dO")
    check(err({p.o, o[2], o[3]}), "out[1] (dq) shares memory with o")
    check(err({o[1], p.k, o[3]}), "out[2] (dk) shares memory with k")
    check(err({o[1], o[2], p.v}), "out[3] (dv) shares memory with v")
    check(err({o[1], o[2], o[2]}), "out[3] (dv) shares memory with out[2] (dk)")
    local big = vsalab.empty({2, 1, 2, 384, 32}, {dtype = "bf16"})
    check(err({o[1], big:select(1, 1), big:select(1, 2)}), "out[3] (dv) shares memory with out[2] (dk)")
    -- misspelt options are still caught
    check(H.err(bwd, {poision = false}), "backward_ref: unknown option 'poision'")
    -- device: only checkable with a GPU
    if vsalab.cuda_available() then
      local g = o[3]:to("cuda")
      check(err({o[1], o[2], g}), "out[3] (dv): on cuda:0, but q is on cpu")
    end
    -- a failed call leaves the buffers as they were
    assert.equal(7.5, o[1]:get(1, 1, 1, 1))
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

describe("the case runner's report of a backward that raises", function()
  it("names the seed the case drew, and never seed=nil", function()
    -- As a failing peer does: every call raises.
    local failing = {name = "failing", run = function() error("peer exited with status 3") end}
    local seed = H.seed()
    local res = vsalab.cases.run(failing, {device = "cpu", seed = seed, only = {2}, blocks = {64}})
    assert.is_true(#res >= 1)
    for _, r in ipairs(res) do
      local line = vsalab.cases.format(r)
      assert.is_false(r.passed, line)
      assert.equal("ran without error", r.check, line)
      assert.falsy(line:find("seed=nil", 1, true), line)
      -- The first seed after the run's: the one case 2 drew.
      assert.truthy(line:find(" FAIL seed=" .. (seed + 1) .. " ", 1, true), line)
      assert.truthy(line:find("peer exited with status 3", 1, true), line)
    end
    -- A result without a seed says none.
    local line = vsalab.cases.format{case = 1, name = "n", check = "c", passed = false, detail = "d"}
    assert.falsy(line:find("seed", 1, true), line)
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
    -- v5 takes block 128 alone, whatever the device.
    local v5 = vsalab.backends.get("sm90a-v5")
    ok, why = v5.supported("cuda", {block = 64, D = 128})
    assert.is_false(ok)
    assert.truthy(why:find("sm90a-v5 takes block 128 only, got 64", 1, true), why)
    -- backward_supported derives the block size from k and vbs, as
    -- backward does (it asked for 64 whatever the tensors were).
    ok, why = vsalab.backward_supported("sm90a-v5", p.q, p.k, p.vbs)
    assert.is_false(ok)
    assert.truthy(why:find("takes block 128 only, got 64", 1, true), why)
    local p128 = vsalab.problem.build{B = 1, H = 1, Sq = 256, D = 16, block = 128, topk = 1, seed = H.seed(),
      device = "cpu", layout = "bshd"}
    ok, why = vsalab.backward_supported("sm90a-v5", p128.q, p128.k, p128.vbs, {layout = "bshd"})
    assert.is_false(ok)
    assert.truthy(why:find("runs on CUDA tensors", 1, true), why)
    -- What backward refuses from shapes, dtypes or options is false here too.
    for _, c in ipairs{
      {{p.q, p.k:to_dtype("f32"), p.vbs}, "k must be a bf16 [B,H,S,D] tensor"},
      {{p.q, p.k, p.vbs:to_dtype("f32")}, "vbs must be a non-empty i32 vector"},
      {{p.q, p.k, p.vbs, {layout = "xyz"}}, "layout 'xyz' is not supported"},
      {{p.q, p.k, p.vbs, "x"}, "opts must be a table, got string"},
      {{p.q, p.k, vsalab.from_table({1, 2, 3, 4, 5}, {dtype = "i32"})}, "vbs has 5 entries"},
    } do
      ok, why = vsalab.backward_supported("reference", unpack(c[1]))
      assert.is_false(ok, c[2])
      assert.truthy(tostring(why):find(c[2], 1, true), tostring(why))
    end
    local vgone = p.vbs:clone()
    vgone:free()
    assert.truthy(H.err(vsalab.backward_supported, "reference", p.q, p.k, vgone)
      :find("backward_supported: vbs: tensor was freed", 1, true))
    -- Bad arguments are named.
    local msg = H.err(vsalab.backward_supported, "nope", p.q)
    assert.truthy(msg:find("backward_supported: name: no backward 'nope' (known: reference,", 1, true), msg)
    assert.falsy(msg:find("backends.lua", 1, true), msg)
    assert.truthy(H.err(vsalab.backward_supported, "reference", p.q, 5):find("k must be a tensor", 1, true))
    local gone = p.q:clone()
    gone:free()
    assert.truthy(H.err(vsalab.backward_supported, "reference", gone):find("q: tensor was freed", 1, true))
    assert.truthy(H.err(vsalab.backward, p.dO, gone):find("backward: q: tensor was freed", 1, true))
    -- The backward's own error is raised at backward's caller's line, not
    -- init.lua's ("init.lua:80: dO: ...").
    local e = H.err(function()
      local dq = vsalab.backward(p.dO:to_dtype("f32"), p.q, p.k, p.v, p.o, p.lse, p.k2q_idx,
        p.k2q_num, p.vbs)
      return dq
    end)
    assert.truthy(e:find("reference_spec.lua:%d+: backward: dO: expected dtype bf16, got f32"), e)
    assert.falsy(e:find("init.lua", 1, true), e)
  end)
end)
