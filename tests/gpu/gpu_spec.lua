-- GPU specs (tag `gpu`; run on the H200 by tests/gpu/run.sh): the GPU
-- inversion and reference against the CPU ones on small shapes and cuRAND
-- on both sides (every CASES.md case on CUDA: cases_spec.lua).
local H = require "helpers"

describe("#gpu device", function()
  it("reports what it is", function()
    local d = vsalab.device_info()
    assert.truthy(d.name)
    assert.is_true(d.sm_count > 0)
    assert.truthy(d.cc:match("^%d+%.%d+$"))
    print(string.format("\n[device] %s cc %s, %d SMs, driver %s, runtime %s, %.0f MHz",
      d.name, d.cc, d.sm_count, d.driver, d.runtime, d.sm_clock_mhz))
  end)

  it("round-trips tensors and compares on the device", function()
    local s = H.seed()
    local h = vsalab.empty({3, 1000}, {dtype = "f32"}):fill_randn{seed = s}
    local d = h:to("cuda")
    assert.equal("cuda:0", d.device)
    assert.equal(0, vsalab.compare(d:to("cpu"), h).max_abs)
    local c1 = vsalab.compare(d:to_dtype("bf16"), d)
    local c2 = vsalab.compare(h:to_dtype("bf16"), h)
    assert.is_true(math.abs(c1.rel_l2 - c2.rel_l2) < 1e-12)
    -- Strided views gather on the device.
    local t = d:transpose(1, 2):contiguous():to("cpu")
    assert.equal(0, vsalab.compare(t, h:transpose(1, 2):contiguous()).max_abs)
  end)

  it("draws the same cuRAND Philox numbers on host and device", function()
    local s = H.seed()
    local a = vsalab.empty({4099}):fill_randn{seed = s}
    local b = vsalab.empty({4099}, {device = "cuda"}):fill_randn{seed = s}
    local c = vsalab.compare(b, a)
    print(string.format("\n[curand] host vs device max |diff| = %g", c.max_abs))
    assert.is_true(c.max_abs < 1e-5)
  end)
end)

describe("#gpu inversion", function()
  it("equals the CPU inversion bitwise, ragged and padded", function()
    for _, sh in ipairs{{1, 1, 5, 7, 3}, {2, 3, 33, 40, 9}, {1, 2, 64, 64, 16}, {1, 1, 100, 3, 3}} do
      local qi, qn = vsalab.random_topk{B = sh[1], H = sh[2], nq = sh[3], nkv = sh[4],
        topk = sh[5], width = sh[5] + 2, ragged = true, seed = H.seed()}
      local ci, cn = vsalab.invert_indices(qi, qn, sh[4])
      local gi, gn = vsalab.invert_indices(qi:to("cuda"), qn:to("cuda"), sh[4])
      assert.same(ci:to_table(), gi:to_table())
      assert.same(cn:to_table(), gn:to_table())
    end
  end)

  it("reports bad lists by (b, h, q block) without faulting", function()
    local qi = vsalab.from_table({{{{0, 1}, {1, 0}}, {{0, 1}, {9, 0}}}}, {dtype = "i32", device = "cuda"})
    local qn = vsalab.from_table({{{2, 2}, {2, 2}}}, {dtype = "i32", device = "cuda"})
    local e = H.err(vsalab.invert_indices, qi, qn, 2)
    assert.truthy(e:match("b=0, h=1, q block=1"))
    qi = vsalab.from_table({{{{0, 0}}}}, {dtype = "i32", device = "cuda"})
    qn = vsalab.from_table({{{2}}}, {dtype = "i32", device = "cuda"})
    assert.truthy(H.err(vsalab.invert_indices, qi, qn, 2):match("repeated"))
    qn = vsalab.from_table({{{3}}}, {dtype = "i32", device = "cuda"})
    assert.truthy(H.err(vsalab.invert_indices, qi, qn, 2):match("q2k_num"))
    vsalab.synchronize() -- the device is still healthy
  end)
end)

describe("#gpu reference", function()
  for _, D in ipairs{64, 128} do
    it("forward and backward equal the CPU reference (D=" .. D .. ")", function()
      local p = vsalab.problem.build{B = 2, H = 2, Sq = 320, Skv = 448, D = D,
        density = 0.4, ragged = true, seed = H.seed(), device = "cpu"}
      p.vbs = vsalab.from_table({64, 0, 32, 64, 17, 64, 1}, {dtype = "i32"})
      p.o, p.lse = vsalab.forward_ref(p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs)
      local g = {}
      for k, v in pairs(p) do g[k] = vsalab.is_tensor(v) and v:to("cuda") or v end
      g.o, g.lse = vsalab.forward_ref(g.q, g.k, g.v, g.q2k_idx, g.q2k_num, g.vbs)
      assert.is_true(vsalab.compare(g.o, p.o).rel_l2 < 1e-2)
      local l = vsalab.compare(g.lse, p.lse)
      assert.is_true(l.max_abs < 1e-4 and l.nonfinite == 0)
      g.o = p.o:to("cuda") -- same bf16 o on both sides for the backward
      g.lse = p.lse:to("cuda")
      local opts = {out_dtype = "f32"}
      local a = {vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, opts)}
      local b = {vsalab.backward_ref(g.dO, g.q, g.k, g.v, g.o, g.lse, g.k2q_idx, g.k2q_num, g.vbs, opts)}
      for i, name in ipairs{"dq", "dk", "dv"} do
        local c = vsalab.compare(b[i], a[i])
        assert(c.rel_l2 < 1e-5 and c.nonfinite == 0, name .. " rel L2 " .. c.rel_l2)
      end
    end)
  end

  it("reruns into out= buffers bitwise, allocation-free (a CUDA graph captures it)", function()
    local p = vsalab.problem.build{B = 1, H = 2, Sq = 256, Skv = 384, D = 64,
      density = 0.5, ragged = true, seed = H.seed(), device = "cuda"}
    local b = vsalab.backends.get("reference")
    local dq, dk, dv = b.run(p)
    local ref = {dq = dq:clone(), dk = dk:clone(), dv = dv:clone()}
    local outs = {dq = dq, dk = dk, dv = dv}
    for _, t in pairs(outs) do t:fill(0 / 0) end
    local fn = b.timed(p, outs)
    fn() -- grows the shared scratch; the captured call must then allocate nothing
    for _, t in pairs(outs) do t:fill(0 / 0) end
    vsalab.bench(fn, {mode = "graph", warmup = 0, repeats = 3})
    for name, t in pairs(outs) do
      local c = vsalab.compare(t, ref[name])
      assert(c.max_abs == 0 and c.nonfinite == 0, name .. " differs after graph replay")
    end
    local e = H.err(vsalab.backward_ref, p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx,
      p.k2q_num, p.vbs, {out = {dq, dk, dv:to("cpu")}})
    assert.truthy(e:find("out[3] (dv): on cpu, but q is on cuda:0", 1, true), e)
  end)
end)

describe("#gpu reference at block 128", function()
  -- The GPU reference works on 64-token tiles, two per 128-token block
  -- (kernels/portable/bsa_ref.cu): vbs past the first tile, exactly at its
  -- end, inside it and 0 all cross that boundary. Against the CPU reference
  -- (fp32, the same inputs) and the fp64 oracle, with ragged random lists.
  it("matches the CPU reference and the fp64 oracle, vbs across the tile boundary", function()
    local seed = H.seed()
    local p = vsalab.problem.build{B = 2, H = 3, Sq = 6 * 128, Skv = 7 * 128, D = 128, block = 128,
      density = 0.5, ragged = true, seed = seed, device = "cpu", forward = false}
    p.vbs = vsalab.from_table({128, 100, 64, 0, 65, 1, 127}, {dtype = "i32"})
    local o_c, lse_c = vsalab.forward_ref(p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs)
    local g = {}
    for _, k in ipairs{"q", "k", "v", "dO", "q2k_idx", "q2k_num", "k2q_idx", "k2q_num", "vbs"} do
      g[k] = p[k]:to("cuda")
    end
    local o_g, lse_g = vsalab.forward_ref(g.q, g.k, g.v, g.q2k_idx, g.q2k_num, g.vbs)
    -- o is bf16: two fp32 sums in another order round a few elements one
    -- bf16 ulp (2^-8) apart, so o is held to 1e-3 (the block-64 spec: 1e-2);
    -- lse (fp32) and the fp32 gradients below to 1e-4 and 1e-5.
    local oc = vsalab.compare(o_g, o_c)
    assert(oc.rel_l2 < 1e-3 and oc.nonfinite == 0, "o GPU vs CPU rel L2 " .. oc.rel_l2)
    local lc = vsalab.compare(lse_g, lse_c)
    assert(lc.max_abs < 1e-4 and lc.nonfinite == 0, "lse GPU vs CPU max |a-b| " .. lc.max_abs
      .. ", nonfinite " .. lc.nonfinite)
    local cpu = {vsalab.backward_ref(p.dO, p.q, p.k, p.v, o_c, lse_c, p.k2q_idx, p.k2q_num, p.vbs,
      {out_dtype = "f32"})}
    local gpu = {vsalab.backward_ref(g.dO, g.q, g.k, g.v, o_g, lse_g, g.k2q_idx, g.k2q_num, g.vbs,
      {out_dtype = "f32"})}
    local ref = vsalab.oracle{q = p.q, k = p.k, v = p.v, dO = p.dO, q2k_idx = p.q2k_idx,
      q2k_num = p.q2k_num, variable_block_sizes = p.vbs, o = o_c, lse = lse_c}
    for i, name in ipairs{"dq", "dk", "dv"} do
      local c = vsalab.compare(gpu[i], cpu[i])
      print(string.format("\n[ref128] %s GPU vs CPU rel L2 %.2e, vs fp64 %.2e", name, c.rel_l2,
        vsalab.compare(gpu[i], ref[name]).rel_l2))
      assert(c.rel_l2 < 1e-5 and c.nonfinite == 0, name .. " GPU vs CPU rel L2 " .. c.rel_l2)
      local f = vsalab.compare(gpu[i], ref[name]).rel_l2
      assert(f < 1e-4, name .. " GPU vs fp64 rel L2 " .. f)
    end
    -- Key slots past vbs (block 3 entirely, block 5 from token 1) get dk = dv = 0.
    local dk = gpu[2]:to("cpu")
    for _, cut in ipairs{{3, 0, 128}, {5, 1, 127}, {1, 100, 28}} do
      local z = dk:narrow(3, cut[1] * 128 + cut[2] + 1, cut[3]):contiguous()
      local m = vsalab.compare(z, vsalab.zeros(z.shape, {dtype = "f32"})).max_abs
      assert(m == 0, string.format("dk of kv block %d from token %d: max |x| %g, not 0", cut[1], cut[2], m))
    end
  end)

  it("native kernels take block 128: sm90a against the reference, a size off the list refused", function()
    local p = vsalab.problem.build{H = 2, Sq = 768, D = 128, block = 128, density = 0.5,
      ragged = true, seed = H.seed(), device = "cuda"}
    local ok, why = vsalab.backends.supported("sm90a", "cuda", p)
    assert(ok, why)
    local ref = {vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs,
      {out_dtype = "f32"})}
    local got = {vsalab.backends.get("sm90a").run(p)}
    for i, name in ipairs{"dq", "dk", "dv"} do
      local c = vsalab.compare(got[i], ref[i])
      assert(c.rel_l2 < 1e-2 and c.nonfinite == 0, name .. " rel L2 " .. c.rel_l2)
    end
    local ok2, why2 = vsalab.backends.supported("sm90a", "cuda", {block = 256, D = 128})
    assert.is_false(ok2)
    assert.truthy(why2:find("block 256: not supported by this kernel", 1, true), why2)
    vsalab.problem.free(p)
  end)

end)
