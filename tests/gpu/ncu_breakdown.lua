-- ncu_breakdown.lua — one call of each named backend per shape (B1 H8 D128
-- 25%, random lists; 4k, 8k, 16k; block 64, or 128 with --block=128), for
-- a per-kernel time split under
-- Nsight Compute (preprocess: Delta, zeroing, work order, the K/V
-- statistics of the fixed-point bound; row exponents; main kernel; dQ
-- finish). tests/gpu/run.sh breakdown runs it over the dq-modes kernels:
--   ncu --metrics gpu__time_duration.sum \
--       -k regex:"prep_kernel|row_exp_kernel|bwd_(ws_|kv2_|b128_)?kernel|dq_finish" \
--       build/vsalab run tests/gpu/ncu_breakdown.lua [--block=128] BACKEND...
local usage = "usage: vsalab run tests/gpu/ncu_breakdown.lua [--block=128] BACKEND..."
local names, block = {}, 64
for _, a in ipairs{...} do
  local b = a:match("^%-%-block=(.*)$")
  if b then
    block = tonumber(b)
    if not (block and require("vsalab.blocks").supported(block)) then
      require("vsalab.usage").error("ncu_breakdown.lua: --block takes " .. require("vsalab.blocks").text() .. ", got '" .. b .. "'")
    end
  else
    names[#names + 1] = a
  end
end
if #names == 0 then require("vsalab.usage").error(usage) end
for _, S in ipairs{4096, 8192, 16384} do
  local p = vsalab.problem.build{B = 1, H = 8, Sq = S, D = 128, density = 0.25,
    block = block, seed = 7, device = "cuda"}
  for _, name in ipairs(names) do
    local dq, dk, dv = vsalab.backends.get(name).run(p)
    vsalab.synchronize()
    print(("S=%d block=%d pairs=%d backend %s"):format(S, block, p.pairs, name))
    dq:free(); dk:free(); dv:free()
  end
  vsalab.problem.free(p)
end
