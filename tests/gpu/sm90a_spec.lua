-- The native Hopper backward against the reference on random problems
-- (tag gpu; skipped where sm90a is not supported).
local H = require "helpers"

describe("#gpu sm90a", function()
  local ok, why = vsalab.backends.supported("sm90a", "cuda", {D = 128})
  if not ok then
    it("is not supported here: " .. tostring(why), function() end)
    return
  end
  for _, s in ipairs{
      {B = 1, H = 2, Sq = 1024, density = 0.25},
      {B = 2, H = 3, Sq = 320, Skv = 448, density = 0.5, ragged = true},
      {B = 1, H = 1, Sq = 7 * 64, Skv = 5 * 64, topk = 5}} do
    it(string.format("matches the reference at B%d H%d Sq%d", s.B, s.H, s.Sq), function()
      local spec = {D = 128, seed = H.seed(), device = "cuda"}
      for k, v in pairs(s) do spec[k] = v end
      local p = vsalab.problem.build(spec)
      local ref = {vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, {out_dtype = "f32"})}
      local got = {vsalab.backends.get("sm90a").run(p)}
      for x, name in ipairs{"dq", "dk", "dv"} do
        local c = vsalab.compare(got[x], ref[x])
        assert(c.rel_l2 < 1e-2 and c.nonfinite == 0, name .. " rel L2 " .. c.rel_l2)
      end
      vsalab.problem.free(p)
    end)
  end
end)
