-- list_backends.lua — the CUDA backends of this build that tests/gpu/run.sh
-- iterates over, one name a line, so its steps name no dQ mode:
--   build/vsalab run tests/gpu/list_backends.lua SELECTOR
-- SELECTOR:
--   default   every backend available here that is no variant and no
--             emulation: those that must pass every CASES case (the
--             reference, the native kernel of this GPU, ...)
--   emulated  the emulated backends (sm100a-emu: VSALAB_SM100_EMU=1), no variant
--   emulated-all  the emulated backends with their variants
--   dq-modes  the native timed kernels that are no variant and no emulation,
--             each followed by its other dQ mode when available (the variant
--             named NAME-fp32 or NAME-det): what a same-run timing table holds
--   all       every backend available here
-- Exits 2 on another selector; prints nothing when none matches.
local selector = ...
local usage = "usage: vsalab run tests/gpu/list_backends.lua default|emulated|emulated-all|dq-modes|all"
local pick = {
  default = function(b) return not b.variant_of and not b.emulated end,
  emulated = function(b) return b.emulated and not b.variant_of end,
  ["emulated-all"] = function(b) return b.emulated end,
  all = function() return true end,
}
if selector ~= "dq-modes" and not pick[selector] then require("vsalab.usage").error(usage) end

local available = vsalab.backends.available("cuda")
local names = {}
if selector == "dq-modes" then
  local by_name = {}
  for _, b in ipairs(available) do by_name[b.name] = b end
  for _, b in ipairs(available) do
    -- Native kernels say how they sum dQ (deterministic_dq); the reference does not.
    if b.deterministic_dq ~= nil and not b.variant_of and not b.emulated then
      names[#names + 1] = b.name
      for _, suffix in ipairs{"-fp32", "-det"} do
        local other = by_name[b.name .. suffix]
        if other and other.variant_of == b.name then names[#names + 1] = other.name end
      end
    end
  end
else
  for _, b in ipairs(available) do
    if pick[selector](b) then names[#names + 1] = b.name end
  end
end
for _, name in ipairs(names) do print(name) end
