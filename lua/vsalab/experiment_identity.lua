-- What a point of an experiment is (part of vsalab.experiment, which
-- re-exports everything here): the fields its hash covers, its stable
-- hash, its problem seed, and its fields in canonical, checked form.
local problem = require "vsalab.problem"
local usage = require "vsalab.usage"

local M = {}

-- Problem seed of a point: low 20 bits of the run seed, then low 20 bits of
-- the point hash (exact in a double, below 2^40).
function M.point_seed(run_seed, hash)
  return (run_seed % 2^20) * 2^20 + tonumber(hash, 16) % 2^20
end

-- A point's `lists` in canonical form ('vsa:4', not 'vsa:4.0'), and absent
-- for random lists, so the points that existed before the lists axis keep
-- their hash (hence their seed and inputs). Raises on an unknown kind.
function M.normalise_lists(c)
  if c.lists == nil then return c end
  local ok, kind_or_err, _, name = pcall(problem.parse_lists, c.lists)
  if not ok then
    local msg = tostring(kind_or_err):gsub("^lists: ", "")
    usage.error("argument 'lists': " .. msg)
  end
  if name == "random" then name = nil end
  if name ~= c.lists then
    c.lists = name
    if c.hash then c.hash = require("vsalab.sweep").hash(M.point_of(c)) end
  end
  return c
end

-- A point's block size, Sq/Skv off its block, layout, or density that
-- problem.build would reject (density: src/bindings/l_bsa.c, (0, 1]
-- unless topk is given), raised as a usage error naming the argument before
-- anything is built or logged: `-a density=2` is a typo, not a failed run.
-- (Other fields stay the build's to refuse: scripts and reruns build
-- failing points on purpose, and those runs must end `failed`.)
function M.check_point(c)
  if c.block ~= nil and not require("vsalab.blocks").supported(c.block) then
    usage.error(string.format("argument 'block': expected a block size (%s), got %s",
      require("vsalab.blocks").text(), tostring(c.block)))
  end
  -- Each -a axis is checked alone (Sq a multiple of 64); the pair is
  -- checked here: -a Sq=192 -a block=128 passed --check, and every point
  -- of the GPU run then failed in problem.build.
  if c.block ~= nil then
    for _, name in ipairs{"Sq", "Skv"} do
      local n = c[name]
      if type(n) == "number" and n % c.block ~= 0 then
        usage.error(string.format("argument '%s': %s is not a multiple of the block size %d "
          .. "(a point of -a block=%d)", name, tostring(n), c.block, c.block))
      end
    end
  end
  if c.layout ~= nil and not require("vsalab.layouts").supported(c.layout) then
    usage.error(string.format("argument 'layout': expected a layout (%s), got %s",
      require("vsalab.layouts").text(), tostring(c.layout)))
  end
  if c.density ~= nil and c.topk == nil
      and not (type(c.density) == "number" and c.density > 0 and c.density <= 1) then
    usage.error(string.format("argument 'density': expected a number in (0, 1], got %s",
      tostring(c.density)))
  end
  return c
end

-- The fields of config c that define the point (what its hash covers).
function M.point_of(c)
  local meta = {skip = true, hash = true, skipped = true, only_kernel = true}
  local pt = {}
  for k, v in pairs(c) do if not meta[k] then pt[k] = v end end
  return pt
end

-- The stable hash of config c (the sweep's, or computed from its point).
function M.hash_of(c)
  return c.hash or require("vsalab.sweep").hash(M.point_of(c))
end

return M
