-- cases.lua — CASES cases for the named backends on CUDA, one line per
-- check (the GPU specs run the same through busted; this is the readable
-- report, what tests/gpu/run.sh's sm100emu, sm100emu-full, case12 and
-- blackwell steps run):
--   build/vsalab run tests/gpu/cases.lua [--only=1,2,...] [--skip=12,...] [--launches-scale=X] [--blocks=64,128]
--       [--layouts=bhsd,bshd] BACKEND...
-- --only: these case numbers alone (docs/CASES.md); --skip: every case but
-- these; --launches-scale: the repeated-launch cases (8: 50 launches, 10:
-- 2000) run X times as many, at least 2; --blocks: these block sizes
-- alone (default: every supported size); --layouts: the token layouts the
-- backend is handed the cases in (default bhsd; vsalab.cases). Exits non-zero when a check fails
-- or a backend is unavailable, 2 on a usage error.
local usage = require "vsalab.usage"
local help = "usage: vsalab run tests/gpu/cases.lua [--only=1,2,...] [--skip=12,...] [--launches-scale=X] [--blocks=64,128] [--layouts=bhsd,bshd] BACKEND..."
local n_cases = #vsalab.cases.list

-- The case numbers of a comma list (opt names the option in errors).
local function case_list(opt, v)
  local t = {}
  for id in v:gmatch("[^,]+") do
    local n = tonumber(id)
    if not n or n ~= math.floor(n) or n < 1 or n > n_cases then
      usage.error("cases.lua: " .. opt .. " takes case numbers 1 to " .. n_cases .. ", got '" .. id .. "'")
    end
    t[#t + 1] = n
  end
  if #t == 0 then usage.error("cases.lua: " .. opt .. " names no case") end
  return t
end

local names, only, skip, scale, blocks, lays = {}, nil, nil, nil, nil, nil
for _, a in ipairs{...} do
  local ly = a:match("^%-%-layouts=(.*)$")
  local o = a:match("^%-%-only=(.*)$")
  local k = a:match("^%-%-skip=(.*)$")
  local s = a:match("^%-%-launches%-scale=(.*)$")
  local bl = a:match("^%-%-blocks=(.*)$")
  if ly then
    lays = {}
    for w in ly:gmatch("[^,]+") do
      local ok, why = pcall(require("vsalab.layouts").check, w:match("^%s*(.-)%s*$"), "cases.lua: --layouts")
      if not ok then usage.error(tostring(why)) end
      lays[#lays + 1] = why
    end
    if #lays == 0 then usage.error("cases.lua: --layouts names no layout") end
  elseif bl then
    blocks = {}
    for w in bl:gmatch("[^,]+") do
      local n = tonumber(w)
      if not (n and require("vsalab.blocks").supported(n)) then
        usage.error("cases.lua: --blocks takes block sizes (" .. require("vsalab.blocks").text() .. "), got '" .. w .. "'")
      end
      blocks[#blocks + 1] = n
    end
    if #blocks == 0 then usage.error("cases.lua: --blocks names no block size") end
  elseif o then
    only = case_list("--only", o)
  elseif k then
    skip = case_list("--skip", k)
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
if skip then
  local kept, drop = {}, {}
  for _, n in ipairs(skip) do drop[n] = true end
  if only then
    for _, n in ipairs(only) do if not drop[n] then kept[#kept + 1] = n end end
  else
    for n = 1, n_cases do if not drop[n] then kept[#kept + 1] = n end end
  end
  if #kept == 0 then usage.error("cases.lua: --skip leaves no case to run") end
  only = kept
end
for _, name in ipairs(names) do
  if not pcall(vsalab.backends.get, name) then usage.error("cases.lua: no backward named '" .. name .. "'") end
end

local failed = 0
for _, name in ipairs(names) do
  local ok, why = vsalab.backends.supported(name, "cuda")
  if not ok then
    print(name .. ": unavailable: " .. tostring(why))
    failed = failed + 1
  else
    local t0 = os.time()
    local res = vsalab.cases.run(name, {device = "cuda", seed = os.time(), only = only,
      launches_scale = scale, blocks = blocks, layouts = lays, on_result = function(r) print(vsalab.cases.format(r)) end})
    local n_bad = 0
    for _, r in ipairs(res) do if not r.passed then n_bad = n_bad + 1 end end
    print(string.format("%s: %d of %d checks passed (%d s)", name, #res - n_bad, #res, os.time() - t0))
    failed = failed + n_bad
  end
end
if failed > 0 then error(failed .. " checks failed", 0) end
