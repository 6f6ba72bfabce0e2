-- GPU specs for VSA-like lists (tag `gpu`; tests/gpu/run.sh specs): CUDA
-- tensors give the CPU's bits for the same input bits, and a CUDA problem
-- of a seed has (nearly) the CPU problem's lists — they differ only where
-- cuRAND's host and device normals round differently (docs/lua-api.md, "VSA-like lists").
local H = require "helpers"
local problem = require "vsalab.problem"

local function same(a, b) return vsalab.compare(a:to("cpu"):to_dtype("f64"), b:to("cpu"):to_dtype("f64")).max_abs end

describe("#gpu VSA-like lists", function()
  it("smooth_latent and vsa_topk give the CPU's bits on CUDA tensors", function()
    local lat = {9, 14, 22} -- 3 x 4 x 6 = 72 blocks, partly filled
    local h = vsalab.empty({1, 3, 72 * 64, 128}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
    local hk = vsalab.empty({1, 3, 72 * 64, 128}, {dtype = "bf16"}):fill_randn{seed = H.seed()}
    local d, dk = h:to("cuda"), hk:to("cuda")
    for _, x in ipairs{h, hk, d, dk} do vsalab.smooth_latent(x, {latent = lat, ell = 3}) end
    assert.equal(0, same(h, d))
    assert.equal(0, same(hk, dk))
    local i1, n1 = vsalab.vsa_topk{q = h, k = hk, density = 0.25, latent = lat}
    local i2, n2 = vsalab.vsa_topk{q = d, k = dk, density = 0.25, latent = lat}
    assert.equal("cuda:0", i2.device)
    assert.equal(0, same(i1, i2))
    assert.equal(0, same(n1, n2))
    assert.equal(vsalab.list_sharing(i1, n1, 72), vsalab.list_sharing(i2, n2, 72))
  end)

  it("builds a CUDA problem whose lists match the CPU one's but for near ties", function()
    local seed = H.seed()
    local spec = {H = 2, latent = {12, 16, 16}, D = 128, density = 0.25, seed = seed,
      lists = "vsa:4", forward = false}
    spec.device = "cpu"
    local c = problem.build(spec)
    spec.device = "cuda"
    local g = problem.build(spec)
    local a, b = c.q2k_idx:to_table(), g.q2k_idx:to("cpu"):to_table()
    local total, equal = 0, 0
    for h = 1, 2 do for i = 1, c.nq do
      local set = {}
      for e = 1, c.topk do set[a[1][h][i][e]] = true end
      for e = 1, c.topk do
        total = total + 1
        if set[b[1][h][i][e]] then equal = equal + 1 end
      end
    end end
    print(string.format("\n[vsa lists] CPU vs CUDA problem: %d of %d list entries equal, sharing %.4f vs %.4f",
      equal, total, c.sharing, g.sharing))
    assert.is_true(equal >= 0.99 * total)
    assert.is_true(math.abs(c.sharing - g.sharing) < 0.01)
  end)
end)
