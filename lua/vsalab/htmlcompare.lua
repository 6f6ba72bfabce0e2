-- The comparison view of `vsalab report A B`: two runs, or two kernels of
-- runs (RUN:KERNEL, e.g. 7:sm90a 7:triton: the same inputs), point by
-- point as `vsalab compare` sets them (lua/vsalab/compare.lua): both
-- medians, B/A and the verdict; a chart of B/A against tokens (log2), one
-- series per experiment, heads, density and list kind, each in its colour,
-- verdicts marked by shape (bars side by side when every point has one
-- token count);
-- and the rel L2 errors against the fp64 oracle of both sides, output by
-- output. An HTML fragment (inline SVG, no script) that htmlreport puts
-- before the per-run sections.
local compare = require "vsalab.compare"

local M = {}

local function esc(s)
  return (tostring(s):gsub("[&<>\"]", {["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;"}))
end

local function num(v, f)
  if type(v) ~= "number" then return "" end
  return string.format(f, v)
end

local palette = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
  "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

-- Verdicts are marked by shape, so colour can tell the series apart: SLOW
-- points up, FAST down (B/A above or below 1), SAME a ring, AMBIGUOUS a
-- diamond. An SVG element centred on (x, y), filled with colour.
local function marker(verdict, x, y, color, title)
  local t = title and ("<title>" .. esc(title) .. "</title>") or ""
  local r = 5.5
  if verdict == "SLOW" or verdict == "FAST" then
    local d = verdict == "SLOW" and -1 or 1
    return string.format('<path d="M%.1f,%.1f L%.1f,%.1f L%.1f,%.1f Z" fill="%s" stroke="#222" stroke-width="0.8">%s</path>',
      x, y + d * r * 1.2, x - r, y - d * r * 0.8, x + r, y - d * r * 0.8, color, t)
  elseif verdict == "AMBIGUOUS" then
    return string.format('<path d="M%.1f,%.1f L%.1f,%.1f L%.1f,%.1f L%.1f,%.1f Z" fill="%s" stroke="#222" stroke-width="0.8">%s</path>',
      x, y - r * 1.2, x + r, y, x, y + r * 1.2, x - r, y, color, t)
  end
  return string.format('<circle cx="%.1f" cy="%.1f" r="%.1f" fill="#fff" stroke="%s" stroke-width="2.5">%s</circle>',
    x, y, r - 1, color, t)
end
M.marker = marker

-- B/A against tokens: series = {{name, color, points = {{tokens, ratio,
-- verdict}}}}, a line per series. When every point has one token count
-- (a sweep of densities, heads or kernels at one shape: the lines would
-- stack on one vertical), each point is a bar from B = A instead, side by
-- side, named under its bar. Verdicts by marker shape (marker above).
function M.ratio_chart(title, series)
  -- Tokens on log2, B/A: only the points with a place on those axes.
  require("vsalab.htmlreport").plottable(series, function(v) return math.log(v) / math.log(2) end)
  local xmin, xmax, ymin, ymax = math.huge, -math.huge, 1, 1
  local bars = {}
  for _, s in ipairs(series) do
    table.sort(s.points, function(a, b) return a[1] < b[1] end)
    for _, p in ipairs(s.points) do
      local x = math.log(p[1]) / math.log(2)
      xmin, xmax = math.min(xmin, x), math.max(xmax, x)
      ymin, ymax = math.min(ymin, p[2]), math.max(ymax, p[2])
      bars[#bars + 1] = {s = s, p = p}
    end
  end
  if xmin == math.huge then return "" end
  local categorical = xmax == xmin
  local W, L, R, T, B = 820, 64, 250, 34, 46
  local label_room = 0
  if categorical then
    -- Bar names, turned 40 degrees (about 5.8 px a character): room under
    -- the axis for the longest, and left of it for the first.
    for _, b in ipairs(bars) do label_room = math.max(label_room, #b.s.name) end
    label_room = math.floor(math.min(label_room, 40) * 5.8 * 0.65)
    B = B + label_room
    L = math.max(L, math.floor(math.min(#bars[1].s.name, 40) * 5.8 * 0.77) - 6)
  end
  -- The legend (series, then the verdict key) sets the height it needs.
  local Hh = math.max(320, T + B + (#series + 6) * 18)
  -- Room around 1.0 and the data, on a linear ratio axis.
  local span = math.max(ymax - ymin, 0.1)
  ymin, ymax = math.max(0, ymin - 0.1 * span), ymax + 0.1 * span
  local pw, ph = W - L - R, Hh - T - B
  local X
  if categorical then
    local slot = pw / #bars
    X = function(i) return L + (i - 0.5) * slot end
  else
    if xmax == xmin then xmin, xmax = xmin - 1, xmax + 1 end
    X = function(v) return L + (math.log(v) / math.log(2) - xmin) / (xmax - xmin) * pw end
  end
  local function Y(v) return T + ph - (v - ymin) / (ymax - ymin) * ph end
  local o = {string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img">', W, Hh, W, Hh)}
  o[#o + 1] = string.format('<text x="%d" y="20" font-size="15" font-weight="600">%s</text>', L, esc(title))
  local step = 10 ^ math.floor(math.log10((ymax - ymin) / 4))
  for _, m in ipairs{1, 2, 5, 10} do if (ymax - ymin) / (step * m) <= 6 then step = step * m; break end end
  for y = math.ceil(ymin / step) * step, ymax, step do
    o[#o + 1] = string.format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>', L, Y(y), L + pw, Y(y))
    o[#o + 1] = string.format('<text x="%d" y="%.1f" font-size="11" text-anchor="end" fill="#444">%.4g</text>', L - 6, Y(y) + 4, y)
  end
  if not categorical then
    for e = math.ceil(xmin), math.floor(xmax) do
      local v = 2 ^ e
      local label = v >= 1024 and string.format("%gk", v / 1024) or tostring(v)
      o[#o + 1] = string.format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#f0f0f0"/>', X(v), T, X(v), T + ph)
      o[#o + 1] = string.format('<text x="%.1f" y="%d" font-size="11" text-anchor="middle" fill="#444">%s</text>', X(v), T + ph + 16, label)
    end
  end
  -- Parity: B as fast as A.
  o[#o + 1] = string.format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333" stroke-dasharray="5 3"/>', L, Y(1), L + pw, Y(1))
  o[#o + 1] = string.format('<text x="%d" y="%.1f" font-size="11" fill="#333">B = A</text>', L + pw + 6, Y(1) + 4)
  o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>', L, T + ph, L + pw, T + ph)
  o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>', L, T, L, T + ph)
  o[#o + 1] = string.format('<text x="%d" y="%d" font-size="12" text-anchor="middle">%s</text>', L + math.floor(pw / 2), Hh - 8,
    categorical and esc(string.format("every point at %g tokens: one bar per point", 2 ^ xmin)) or "tokens (log2)")
  o[#o + 1] = string.format('<text transform="translate(16,%d) rotate(-90)" font-size="12" text-anchor="middle">B/A time (below 1: B faster)</text>', T + math.floor(ph / 2))
  local function tip(s, p)
    return string.format("%s: %g tokens, B/A %.3f, %s", s.name, p[1], p[2], p[3] or "")
  end
  if categorical then
    local w = math.max(2, math.min(36, pw / #bars * 0.6))
    for i, b in ipairs(bars) do
      local y0, y1 = Y(1), Y(b.p[2])
      o[#o + 1] = string.format('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.75"><title>%s</title></rect>',
        X(i) - w / 2, math.min(y0, y1), w, math.max(math.abs(y1 - y0), 1), b.s.color, esc(tip(b.s, b.p)))
      o[#o + 1] = marker(b.p[3], X(i), y1, b.s.color, tip(b.s, b.p))
      o[#o + 1] = string.format('<text transform="translate(%.1f,%d) rotate(-40)" font-size="10.5" text-anchor="end" fill="#333">%s</text>',
        X(i) + 3, T + ph + 12, esc(b.s.name))
    end
  else
    for _, s in ipairs(series) do
      local pts = {}
      for _, p in ipairs(s.points) do pts[#pts + 1] = string.format("%.1f,%.1f", X(p[1]), Y(p[2])) end
      o[#o + 1] = string.format('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>', s.color, table.concat(pts, " "))
      for _, p in ipairs(s.points) do o[#o + 1] = marker(p[3], X(p[1]), Y(p[2]), s.color, tip(s, p)) end
    end
  end
  for i, s in ipairs(series) do
    local ly = T + 8 + (i - 1) * 18
    o[#o + 1] = string.format('<rect x="%d" y="%d" width="24" height="8" fill="%s"/>', L + pw + 50, ly - 4, s.color)
    o[#o + 1] = string.format('<text x="%d" y="%d" font-size="11">%s</text>', L + pw + 80, ly + 4, esc(s.name))
  end
  -- Verdict key: shapes, in one neutral colour.
  local ky = T + 8 + (#series + 1) * 18
  for _, v in ipairs{"SAME", "FAST", "SLOW", "AMBIGUOUS"} do
    o[#o + 1] = marker(v, L + pw + 62, ky, "#555")
    o[#o + 1] = string.format('<text x="%d" y="%d" font-size="11">%s</text>', L + pw + 80, ky + 4, v)
    ky = ky + 16
  end
  o[#o + 1] = "</svg>"
  return table.concat(o, "\n")
end

-- The fragment for sides a, b ({run=, kernel=, label=} from
-- compare.resolve_side) of db; opts as compare's (floor_pct, floor_ms).
function M.render(db, a, b, opts)
  opts = opts or compare.defaults
  local rows, gate, matched, host_rows, host_pct, spread_rows = compare.compare(db, a.kernel and a or a.run,
    b.kernel and b or b.run, opts)
  local o = {}
  o[#o + 1] = string.format("<h2>Comparison: %s (A, baseline) vs %s (B)</h2>", esc(a.label), esc(b.label))
  o[#o + 1] = '<div class="muted">Per point as <code>vsalab compare</code> matches them: medians, B/A time and the verdict, and each side\'s rel L2 error against the fp64 oracle.</div>'
  local counts = compare.counts(rows)
  o[#o + 1] = string.format('<div class="note">%d matching point%s; SAME %d, FAST %d, <span class="%s">SLOW %d</span>, AMBIGUOUS %d, ONLY A %d, ONLY B %d, <span class="%s">MISSING %d</span>; floors %.3g%% and %.3g ms%s. %s</div>',
    matched, matched == 1 and "" or "s", counts.SAME, counts.FAST,
    counts.SLOW > 0 and "fail" or "", counts.SLOW, counts.AMBIGUOUS,
    counts["ONLY A"], counts["ONLY B"], counts.MISSING > 0 and "fail" or "", counts.MISSING,
    opts.floor_pct or 2, opts.floor_ms or 0.005,
    -- As compare's header says it: a B/A of 1.8 called SAME needs the reason.
    (host_rows or 0) > 0 and string.format(" (%d point%s timed on the host clock (CPU): a %.3g%% floor, "
      .. "or A's plus B's measured spread where larger (%d point%s), as host timings scatter run to run)",
      host_rows, host_rows == 1 and "" or "s", host_pct, spread_rows or 0, spread_rows == 1 and "" or "s") or "",
    gate and '<b class="fail">`vsalab compare` would fail this pair (SLOW, NEW FAIL or MISSING).</b>'
      or "`vsalab compare` passes this pair.")
  -- Ratio chart per experiment: one series per kernel, heads, density and
  -- list kind (compare matches on it: random and vsa:2 points of one
  -- density are two points, not one series that doubles back).
  local pair = a.kernel and b.kernel
  local groups, order = {}, {}
  for _, r in ipairs(rows) do
    if r.ratio and r.S then
      local g = r.experiment .. " · B/A of " .. a.label .. " → " .. b.label
      if not groups[g] then groups[g] = {}; order[#order + 1] = g end
      -- Kernel pairs are named in the title; runs compare kernel by kernel.
      local key = string.format("%sH%s %.0f%%%s%s%s%s", pair and "" or (r.kernel .. " "), tostring(r.H),
        100 * (r.density or 0), r.ragged == 1 and " ragged" or "",
        (r.lists and r.lists ~= "random") and (" " .. r.lists) or "",
        (r.block or 64) ~= 64 and (" blk" .. r.block) or "",
        (r.layout or "bhsd") ~= "bhsd" and (" " .. r.layout) or "")
      local s = groups[g][key]
      if not s then s = {name = key, points = {}}; groups[g][key] = s end
      s.points[#s.points + 1] = {r.S, r.ratio, r.verdict}
    end
  end
  for _, g in ipairs(order) do
    local series = {}
    for _, s in pairs(groups[g]) do series[#series + 1] = s end
    table.sort(series, function(x, y) return x.name < y.name end)
    for i, s in ipairs(series) do s.color = palette[(i - 1) % #palette + 1] end
    o[#o + 1] = M.ratio_chart(g, series)
  end
  if #order == 0 then o[#o + 1] = '<div class="note">No point is timed on both sides.</div>' end
  -- Per point: medians, ratio and verdict; then the errors side by side.
  local t1 = {'<div class="scroll"><table style="white-space:nowrap"><tr><th class="l">experiment · kernel</th><th>B·H</th><th>S</th><th>density</th><th class="l">lists</th><th class="l">mode</th>'
    .. '<th>A ms</th><th>B ms</th><th>B/A</th><th class="l">verdict</th><th class="l">flags</th></tr>'}
  local t2 = {'<h3>Errors against the fp64 oracle, side by side (rel L2)</h3><div class="scroll"><table style="white-space:nowrap"><tr><th class="l">experiment · kernel</th><th>B·H</th><th>S</th><th>density</th><th class="l">lists</th>'
    .. '<th>dq A</th><th>dq B</th><th>dk A</th><th>dk B</th><th>dv A</th><th>dv B</th><th>check A</th><th>check B</th></tr>'}
  local function err(r, name)
    local e = r and r.errors and r.errors[name]
    if not e then return "<td></td>" end
    return string.format('<td class="%s">%s</td>', e.passed == 0 and "fail" or "", num(e.rel_l2, "%.2e"))
  end
  local function passed(r)
    if not r or r.passed == nil then return "<td></td>" end
    return r.passed == 1 and '<td class="pass">pass</td>' or '<td class="fail">FAIL</td>'
  end
  -- Matched points by experiment, kernel, heads, density, list kind, then
  -- tokens; the points of one side only last (compare's order).
  local shown = {}
  for i, r in ipairs(rows) do shown[i] = r end
  local function rank(r) return (r.verdict == "ONLY A" or r.verdict == "ONLY B") and 1 or 0 end
  table.sort(shown, function(x, y)
    if rank(x) ~= rank(y) then return rank(x) < rank(y) end
    for _, k in ipairs{"experiment", "kernel", "H", "density", "lists", "block", "layout", "ragged", "mode", "B", "S"} do
      local u, v = x[k], y[k]
      if u ~= v then
        if type(u) == type(v) and (type(u) == "number" or type(u) == "string") then return u < v end
        return tostring(u) < tostring(v)
      end
    end
    return false
  end)
  for _, r in ipairs(shown) do
    -- THROTTLED explains a verdict (the timing met a power limit); the
    -- other flags are failures.
    -- Nor is a floor taken from the measured spread a failure.
    local bad_flags = (r.flags or ""):gsub("THROTTLED [AB]", ""):gsub("floor %d+%% %(spread%)", "")
      :gsub("[, ]", "") ~= ""
    local vcls = (r.verdict == "SLOW" or bad_flags) and "fail" or (r.verdict == "FAST" and "pass" or "")
    local kernel = pair and b.kernel or r.kernel
    local head = string.format('<tr><td class="l">%s · %s</td><td>%s·%s</td><td>%s</td><td>%s</td><td class="l">%s</td>',
      esc(r.experiment), esc(kernel), num(r.B, "%d"), num(r.H, "%d"), num(r.S, "%d"), num(r.density, "%.3f"),
      esc(r.lists or "random"))
    t1[#t1 + 1] = head .. string.format('<td class="l">%s</td><td>%s</td><td>%s</td><td>%s</td><td class="l %s">%s</td><td class="l %s">%s</td></tr>',
      esc(r.mode or ""), num(r.a_ms, "%.4f"), num(r.b_ms, "%.4f"), num(r.ratio, "%.3f"), vcls, esc(r.verdict),
      bad_flags and "fail" or "", esc(r.flags or ""))
    t2[#t2 + 1] = head .. err(r.a, "dq") .. err(r.b, "dq") .. err(r.a, "dk") .. err(r.b, "dk")
      .. err(r.a, "dv") .. err(r.b, "dv") .. passed(r.a) .. passed(r.b) .. "</tr>"
  end
  o[#o + 1] = table.concat(t1, "\n") .. "</table></div>"
  o[#o + 1] = table.concat(t2, "\n")
  o[#o + 1] = "</table></div>"
  return table.concat(o, "\n")
end

return M
