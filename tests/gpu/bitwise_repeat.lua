-- bitwise_repeat.lua — the deterministic-mode check both GPU quick scripts
-- share: `n` launches of a backward (a function of the problem returning
-- dq, dk, dv) on one problem, each compared with the first; raises unless
-- every output is the same bits (max |difference| 0). Returns that maximum.
--   local repeat_check = dofile("tests/gpu/bitwise_repeat.lua")
--   repeat_check(label, function(p) return vsalab.backward_...(...) end, n [, block])
return function(label, backward, n, block)
  local P = vsalab.problem
  local p = P.build{B = 2, H = 4, Sq = 2048, D = 128, block = block, density = 0.25, seed = 42,
    device = "cuda"}
  local first = {backward(p)}
  local worst = 0
  for _ = 1, n do
    local o = {backward(p)}
    for x = 1, 3 do
      local c = vsalab.compare(o[x], first[x])
      if c.max_abs > worst then worst = c.max_abs end
      o[x]:free()
    end
  end
  P.free(p)
  print(string.format("%s: %d launches, max |difference| to the first %.3g (must be 0)", label, n, worst))
  if worst ~= 0 then error(label .. ": the deterministic mode is not deterministic", 0) end
  return worst
end
