-- cases.lua — every CASES case for the named backends on CUDA, one line per
-- check (the GPU specs run the same through busted; this is the readable
-- report and what the Blackwell ladder's rung 3 runs):
--   build/vsalab run tests/gpu/cases.lua sm100a-emu [sm90a ...]
-- Exits non-zero when a check fails or a backend is unavailable.
local names = {...}
if #names == 0 then require("vsalab.usage").error("usage: vsalab run tests/gpu/cases.lua BACKEND...") end
local failed = 0
for _, name in ipairs(names) do
  local ok, why = vsalab.backends.supported(name, "cuda")
  if not ok then
    print(name .. ": unavailable: " .. tostring(why))
    failed = failed + 1
  else
    local t0 = os.time()
    local res = vsalab.cases.run(name, {device = "cuda", seed = os.time(),
      on_result = function(r) print(vsalab.cases.format(r)) end})
    local n_bad = 0
    for _, r in ipairs(res) do if not r.passed then n_bad = n_bad + 1 end end
    print(string.format("%s: %d of %d checks passed (%d s)", name, #res - n_bad, #res, os.time() - t0))
    failed = failed + n_bad
  end
end
if failed > 0 then error(failed .. " checks failed", 0) end
