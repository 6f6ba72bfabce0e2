-- case12.lua — CASES case 12 (64-bit offsets: 16384 and 16385 blocks, 2^31+
-- elements per tensor) on every native backend in turn, the memory-heaviest
-- sequence of the GPU specs:  build/vsalab run tests/gpu/case12.lua
local bad = 0
for _, name in ipairs{"reference", "sm90a", "sm90a-fp32"} do
  for _, r in ipairs(vsalab.cases.run(name, {device = "cuda", seed = 12000, only = {12}})) do
    print(vsalab.cases.format(r))
    if not r.passed then bad = bad + 1 end
  end
end
if bad > 0 then error(bad .. " case 12 checks failed", 0) end
