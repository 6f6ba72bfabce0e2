-- The table an experiment run prints at its end (part of
-- vsalab.experiment, which re-exports it): one line per row it logged.
local report = require "vsalab.report"

local M = {}

function M.summary(rows, anchors, gemm)
  if #rows == 0 then return end -- nothing measured here (a resumed run complete already)
  local t, any_ragged, any_vsa, any_capped = {}, false, false, false
  for _, r in ipairs(rows) do
    any_ragged = any_ragged or r.ragged == 1 or r.ragged == true
    any_capped = any_capped or r.throttled == 1
    local x = type(r.extra) == "table" and r.extra or {}
    any_vsa = any_vsa or (x.lists ~= nil and x.lists ~= "random")
    local e = r.errors or {}
    local function err(k) return e[k] and e[k].rel_l2 end
    t[#t + 1] = {kernel = r.kernel, B = r.B, H = r.H, S = r.Sq, block = r.block or 64,
      layout = r.layout or "bhsd", density = r.density,
      topk = r.topk, ms = r.ms_median, tflops = r.tflops,
      ragged = (r.ragged == 1 or r.ragged == true) and 1 or 0, -- as `show` and `compare` print it
      dq = err("dq"), dk = err("dk"), dv = err("dv"),
      ok = r.passed == nil and "-" or (r.passed == 1 and "pass" or "FAIL"),
      lists = x.lists or "random", sharing = x.sharing,
      gemm = (r.tflops and gemm) and (100 * r.tflops / gemm) or nil,
      anchor = anchors and anchors(r) or nil,
      capped = r.throttled ~= 1 and "-" or
        ((x.capped_ms or 0) > 0 and string.format("%.1f ms", x.capped_ms) or "yes")}
  end
  local cols = {
    {key = "kernel"}, {key = "B", fmt = "%d"}, {key = "H", fmt = "%d"}, {key = "S", fmt = "%d"},
    {key = "density", fmt = "%.3f"}, {key = "topk", fmt = "%d"},
    {key = "sharing", fmt = "%.3f"},
    {key = "ms", title = "ms (median)", fmt = "%.3f"},
    {key = "tflops", title = "TFLOPS", fmt = "%.4g"}, -- CPU rows are ~0.001
    {key = "gemm", title = "% GEMM", fmt = "%.0f"},
    {key = "dq", title = "dq rel L2", fmt = "%.2e"},
    {key = "dk", title = "dk rel L2", fmt = "%.2e"},
    {key = "dv", title = "dv rel L2", fmt = "%.2e"},
    {key = "ok", title = "check"}, {key = "anchor"},
  }
  -- Ragged lists (counts below top-k) change what a TFLOPS figure means:
  -- say which rows had them when any did.
  if any_ragged then table.insert(cols, 7, {key = "ragged", fmt = "%d"}) end
  -- Likewise the list kind (random or vsa:ℓ) when any point had VSA lists.
  if any_vsa then table.insert(cols, 7, {key = "lists"}) end
  -- A point timed under a power or thermal limit it could not wait out
  -- (vsalab.power_cap.time_uncapped): say so, before the check column.
  if any_capped then table.insert(cols, #cols - 1, {key = "capped"}) end
  -- The block size, after S, when any row is not at 64 (the default).
  local any_block = false
  for _, x in ipairs(t) do any_block = any_block or x.block ~= 64 end
  -- The layout likewise, after S (and block), when any row is not bhsd.
  local any_layout = false
  for _, x in ipairs(t) do any_layout = any_layout or x.layout ~= "bhsd" end
  if any_layout then table.insert(cols, 5, {key = "layout"}) end
  if any_block then table.insert(cols, 5, {key = "block", fmt = "%d"}) end
  print()
  report.table(t, cols)
end

return M
