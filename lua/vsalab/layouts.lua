-- Token layouts of q, k, v, o, dO and the gradients (bsa.h, vsa_layout):
-- 'bhsd' [B, H, S, D] (the default, vsalab's first) and 'bshd' [B, S, H, D]
-- (FastVideo's and cuDNN's order). lse, Delta and every list stay
-- [B, H, ...] in both. Both layouts hold the same numbers: a bshd tensor is
-- the bhsd one with dims 2 and 3 swapped.
--
-- The names live in C (src/core/layout.c, read through vsalab.layouts()),
-- so that the kernels' launchers and this side agree.
--
-- names: {'bhsd', 'bshd'}; default: 'bhsd' (the first);
-- check(layout, what): the layout (nil reads as the default), else raises
--   "<what>: 'bsdh' is not supported (supported: bhsd, bshd)" (level 0: a
--   usage error, shown as it is);
-- shape(layout, B, H, S, D): the tensor's shape in that layout;
-- dims(layout): "[B,H,S,D]" or "[B,S,H,D]", for messages;
-- convert(t, from, to): t (4-d, either device) in layout `to`, a contiguous
--   copy (t itself when from == to).
local core = require "vsalab.core"

local M = {}

M.names = core.layouts()
M.default = M.names[1]
local known = {}
for _, name in ipairs(M.names) do known[name] = true end

function M.text()
  return table.concat(M.names, ", ")
end

function M.supported(layout)
  return known[layout] == true
end

function M.check(layout, what)
  if layout == nil then return M.default end
  if not known[layout] then
    error(string.format("%s: %s is not supported (supported: %s)", what or "layout",
      type(layout) == "string" and "'" .. layout .. "'" or tostring(layout), M.text()), 0)
  end
  return layout
end

function M.shape(layout, B, H, S, D)
  if layout == "bshd" then return {B, S, H, D} end
  return {B, H, S, D}
end

function M.dims(layout)
  return layout == "bshd" and "[B,S,H,D]" or "[B,H,S,D]"
end

function M.convert(t, from, to)
  if from == to then return t end
  return t:transpose(2, 3):contiguous()
end

return M
