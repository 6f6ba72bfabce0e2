-- Block sizes: the tokens of one q block and of one kv block (the same
-- size for both). The list lives in C (src/core/block_size.c, read through
-- vsalab.block_sizes()) so that the builders, the references, the oracle
-- and this side agree; a new size is one more entry there.
--
-- sizes: {64, 128}, ascending; default: 64 (the first);
-- tile(block): the video tile {t, h, w} of volume block that latents are
--   cut into (64: FastVideo's 4×4×4; 128: 2×8×8, FastVideo's VSA-128 tile);
-- check(block, what): block when it is supported, else raises
--   "<what>: block size 96 is not supported (supported: 64, 128)" (level 0:
--   a usage error, shown as it is).
-- FLOPs per selected pair (10·block²·D) are vsalab.bench.pair_flops.
local core = require "vsalab.core"

local M = {}

local sizes, tiles = core.block_sizes()
M.sizes = sizes
M.default = sizes[1]

function M.tile(block)
  local t = tiles[block]
  return t and {t[1], t[2], t[3]}
end

function M.supported(block)
  return tiles[block] ~= nil
end

function M.text()
  return table.concat(sizes, ", ")
end

function M.check(block, what)
  if type(block) == "string" then block = tonumber(block) or block end
  if not M.supported(block) then
    error(string.format("%s: block size %s is not supported (supported: %s)", what or "block",
      tostring(block), M.text()), 0)
  end
  return block
end

return M
