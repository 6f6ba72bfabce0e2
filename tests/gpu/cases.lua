-- cases.lua — CASES cases for the named backends on CUDA, one line per
-- check (the GPU specs run the same through busted; this is the readable
-- report, what tests/gpu/run.sh's sm100emu and case12 steps and the
-- Blackwell ladder's rung 3 run):
--   build/vsalab run tests/gpu/cases.lua [--only=1,2,...] [--launches-scale=X] BACKEND...
-- --only: these case numbers alone (docs/CASES.md); --launches-scale: the
-- repeated-launch cases (8: 50 launches, 10: 2000) run X times as many,
-- at least 2. Exits non-zero when a check fails or a backend is unavailable.
local usage = require "vsalab.usage"
local help = "usage: vsalab run tests/gpu/cases.lua [--only=1,2,...] [--launches-scale=X] BACKEND..."
local names, only, scale = {}, nil, nil
for _, a in ipairs{...} do
  local v = a:match("^%-%-only=(.*)$")
  local s = a:match("^%-%-launches%-scale=(.*)$")
  if v then
    only = {}
    for id in v:gmatch("[^,]+") do
      local n = tonumber(id)
      if not n or n ~= math.floor(n) or n < 1 or n > #vsalab.cases.list then
        usage.error("cases.lua: --only takes case numbers 1 to " .. #vsalab.cases.list .. ", got '" .. id .. "'")
      end
      only[#only + 1] = n
    end
    if #only == 0 then usage.error("cases.lua: --only names no case") end
  elseif s then
    scale = tonumber(s)
    if not scale or scale <= 0 then usage.error("cases.lua: --launches-scale takes a number > 0, got '" .. s .. "'") end
  elseif a:sub(1, 1) == "-" then
    usage.error("cases.lua: unknown option " .. a .. "\n" .. help)
  else
    names[#names + 1] = a
  end
end
if #names == 0 then usage.error(help) end
local failed = 0
for _, name in ipairs(names) do
  if not pcall(vsalab.backends.get, name) then usage.error("cases.lua: no backward named '" .. name .. "'") end
end
for _, name in ipairs(names) do
  local ok, why = vsalab.backends.supported(name, "cuda")
  if not ok then
    print(name .. ": unavailable: " .. tostring(why))
    failed = failed + 1
  else
    local t0 = os.time()
    local res = vsalab.cases.run(name, {device = "cuda", seed = os.time(), only = only,
      launches_scale = scale, on_result = function(r) print(vsalab.cases.format(r)) end})
    local n_bad = 0
    for _, r in ipairs(res) do if not r.passed then n_bad = n_bad + 1 end end
    print(string.format("%s: %d of %d checks passed (%d s)", name, #res - n_bad, #res, os.time() - t0))
    failed = failed + n_bad
  end
end
if failed > 0 then error(failed .. " checks failed", 0) end
