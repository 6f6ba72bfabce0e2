-- Every CASES.md case for every default backward available on CUDA (tag
-- `gpu`; tests/gpu/run.sh specs): no variant, no emulation (the emulated
-- sm100a has its own steps, sm100emu and sm100emu-full). The cases run
-- while busted loads the file (each result becomes one test), so this file
-- is the slow one (minutes): the other GPU specs run alone without it.
-- VSALAB_CASES_BACKENDS=a,b runs those backends alone (run.sh starts one
-- process a backend, so each gets its own summary line and time);
-- VSALAB_CASES_ONLY=12 runs those case numbers alone, VSALAB_CASES_SKIP=12
-- every case but those (run.sh runs case 12, the memory-heavy one, apart);
-- VSALAB_CASES_BLOCKS=64 runs the cases at those block sizes alone (default:
-- every supported size).
local H = require "helpers"

local function env_set(var)
  local v = os.getenv(var)
  if not v then return nil end
  local t = {}
  for w in v:gmatch("[^,%s]+") do t[tonumber(w) or w] = true end
  return t
end
local only = env_set("VSALAB_CASES_BACKENDS")
local only_cases, skip_cases = env_set("VSALAB_CASES_ONLY"), env_set("VSALAB_CASES_SKIP")
local blocks -- nil: every supported size
if os.getenv("VSALAB_CASES_BLOCKS") then
  blocks = {}
  for w in os.getenv("VSALAB_CASES_BLOCKS"):gmatch("[^,%s]+") do
    blocks[#blocks + 1] = assert(tonumber(w), "VSALAB_CASES_BLOCKS: block sizes, got '" .. w .. "'")
  end
end
-- The case numbers to run (nil: every case).
local function case_ids()
  if not only_cases and not skip_cases then return nil end
  local ids = {}
  for _, c in ipairs(vsalab.cases.list) do
    if (not only_cases or only_cases[c.id]) and not (skip_cases and skip_cases[c.id]) then ids[#ids + 1] = c.id end
  end
  return ids
end

describe("#gpu CASES.md on CUDA", function()
  for _, b in ipairs(vsalab.backends.available("cuda")) do
   if (only and only[b.name]) or (not only and not b.variant_of and not b.emulated) then
    local results = vsalab.cases.run(b, {device = "cuda", seed = H.seed() * 100, only = case_ids(), blocks = blocks,
      on_result = function(r) io.stderr:write(vsalab.cases.format(r), "\n") end})
    for _, r in ipairs(results) do
      it(b.name .. ": " .. vsalab.cases.format(r):sub(1, 100), function()
        assert(r.passed, vsalab.cases.format(r))
      end)
    end
    if only then only[b.name] = nil end
   end
  end
  -- A backend named in VSALAB_CASES_BACKENDS that is not available here fails.
  for name in pairs(only or {}) do
    it(name .. " is available on CUDA", function()
      error(name .. " (VSALAB_CASES_BACKENDS) is no backend available on CUDA here", 0)
    end)
  end
end)
