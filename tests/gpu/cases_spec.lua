-- Every CASES.md case for every backward available on CUDA (tag `gpu`;
-- tests/gpu/run.sh specs). The cases run while busted loads the file (each
-- result becomes one test), so this file is the slow one (minutes): the
-- other GPU specs run alone without it.
local H = require "helpers"

describe("#gpu CASES.md on CUDA", function()
  for _, b in ipairs(vsalab.backends.available("cuda")) do
   if not b.variant_of then
    local results = vsalab.cases.run(b, {device = "cuda", seed = H.seed() * 100,
      on_result = function(r) io.stderr:write(vsalab.cases.format(r), "\n") end})
    for _, r in ipairs(results) do
      it(b.name .. ": " .. vsalab.cases.format(r):sub(1, 100), function()
        assert(r.passed, vsalab.cases.format(r))
      end)
    end
   end
  end
end)
