-- vsalab report: one self-contained HTML file (inline SVG and CSS, no
-- network, no JavaScript) for a PR or a notebook.
--
--   vsalab report [--db PATH] [-o report.html] [RUN...]
--   vsalab report A B   (RUN or RUN:KERNEL): the comparison view first
--
-- Default run: the latest one with timed rows that is not a `rerun` (a
-- one-row rerun says little), else the latest. Per run: its environment;
-- per experiment: TFLOPS on selected blocks against the axis its points
-- vary along (tokens on a log2 axis; else density or heads), one series
-- per kernel (and density when that is not the axis) and list kind (random
-- lists, or VSA-like 'vsa:ℓ' lists as their own series), with the
-- published Triton anchors of docs/ANCHORS.md dashed where the shape
-- matches; the worst error per output per kernel; and every row, one line
-- each, every column visible. The file is written to a temporary file
-- beside -o and renamed over it only when every write succeeded, so a full
-- disk leaves an earlier report as it was (exit 1).
local core = require "vsalab.core"
local cli = require "vsalab.cli"
local shard = require "vsalab.shard"

local M = {}

-- ANCHORS.md (H200, bf16, D128, 25% unless said): public Triton backward,
-- TFLOPS on selected blocks, B1 H8 by tokens.
M.anchors = {
  {name = "Triton bwd (ANCHORS, B1 H8 25%)", H = 8, density = 0.25,
   points = {{4096, 225}, {8192, 296}, {16384, 328}, {32768, 335}, {65536, 333}, {131072, 293}}},
}

local function esc(s)
  return (tostring(s):gsub("[&<>\"]", {["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;"}))
end

local function fmt(v, f)
  if v == nil then return "" end
  if type(v) == "number" and f then return string.format(f, v) end
  return esc(v)
end

local palette = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
  "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

-- Keep in each series only the points with a place on the axes (tx: the
-- x axis's transform): a damaged or hand-made DB can hold an infinite
-- TFLOPS, a median of 0 (an infinite B/A) or a token count of 0 (-inf on
-- log2), which would stretch an axis to infinity and never finish its
-- grid. The tables beside the charts still show them. Also the
-- comparison chart's (lua/vsalab/htmlcompare.lua).
function M.plottable(series, tx)
  local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end
  for _, s in ipairs(series) do
    local kept = {}
    for _, p in ipairs(s.points) do
      if type(p[1]) == "number" and finite(tx(p[1])) and finite(p[2]) then kept[#kept + 1] = p end
    end
    s.points = kept
  end
end

-- An SVG line chart: series = {{name, color, dashed, points = {{x, y}...}}};
-- axis = {label=, log2=} (default tokens on a log2 axis).
local function chart(title, series, axis)
  axis = axis or {label = "tokens (log2)", log2 = true}
  local tx = axis.log2 and function(v) return math.log(v) / math.log(2) end or function(v) return v end
  local W, Hh, L, R, T, B = 820, 360, 64, 290, 34, 46
  local xmin, xmax, ymax = math.huge, -math.huge, 0
  M.plottable(series, tx)
  for _, s in ipairs(series) do
    for _, p in ipairs(s.points) do
      local x = tx(p[1])
      xmin, xmax = math.min(xmin, x), math.max(xmax, x)
      ymax = math.max(ymax, p[2])
    end
  end
  if xmin == math.huge then return "" end
  if xmax == xmin then
    local pad = axis.log2 and 1 or math.max(math.abs(xmin) * 0.1, 0.05)
    xmin, xmax = xmin - pad, xmax + pad
  end
  ymax = ymax > 0 and ymax * 1.12 or 1
  local pw, ph = W - L - R, Hh - T - B
  local function X(v) return L + (tx(v) - xmin) / (xmax - xmin) * pw end
  local function Y(v) return T + ph - v / ymax * ph end
  local o = {string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img">', W, Hh, W, Hh)}
  o[#o + 1] = string.format('<text x="%d" y="20" font-size="15" font-weight="600">%s</text>', L, esc(title))
  -- grid and axes
  local step = 10 ^ math.floor(math.log10(ymax / 4))
  for _, m in ipairs{1, 2, 5, 10} do if ymax / (step * m) <= 6 then step = step * m; break end end
  -- A subnormal ymax underflows ymax / 4 to 0: a step of 0 loops forever.
  if not (step > 0) or ymax / step > 60 then step = ymax end
  for y = 0, ymax, step do
    o[#o + 1] = string.format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>', L, Y(y), L + pw, Y(y))
    o[#o + 1] = string.format('<text x="%d" y="%.1f" font-size="11" text-anchor="end" fill="#444">%g</text>', L - 6, Y(y) + 4, y)
  end
  local ticks = {}
  if axis.log2 then
    for e = math.ceil(xmin), math.floor(xmax) do ticks[#ticks + 1] = 2 ^ e end
  else
    for _, v in ipairs(axis.values or {}) do ticks[#ticks + 1] = v end
  end
  for _, v in ipairs(ticks) do
    local label = (axis.log2 and v >= 1024) and string.format("%gk", v / 1024) or string.format("%g", v)
    o[#o + 1] = string.format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#f0f0f0"/>', X(v), T, X(v), T + ph)
    o[#o + 1] = string.format('<text x="%.1f" y="%d" font-size="11" text-anchor="middle" fill="#444">%s</text>', X(v), T + ph + 16, label)
  end
  o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>', L, T + ph, L + pw, T + ph)
  o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>', L, T, L, T + ph)
  o[#o + 1] = string.format('<text x="%d" y="%d" font-size="12" text-anchor="middle">%s</text>', L + math.floor(pw / 2), Hh - 8, esc(axis.label))
  o[#o + 1] = string.format('<text transform="translate(16,%d) rotate(-90)" font-size="12" text-anchor="middle">TFLOPS on selected blocks</text>', T + math.floor(ph / 2))
  -- series and legend
  for i, s in ipairs(series) do
    table.sort(s.points, function(a, b) return a[1] < b[1] end)
    local pts = {}
    for _, p in ipairs(s.points) do pts[#pts + 1] = string.format("%.1f,%.1f", X(p[1]), Y(p[2])) end
    o[#o + 1] = string.format('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>',
      s.color, s.dashed and ' stroke-dasharray="6 4"' or "", table.concat(pts, " "))
    for _, p in ipairs(s.points) do
      o[#o + 1] = string.format('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s: %s %g, %.4g TFLOPS</title></circle>',
        X(p[1]), Y(p[2]), s.color, esc(s.name), esc(axis.key or "tokens"), p[1], p[2])
    end
    local ly = T + 8 + (i - 1) * 18
    o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>',
      L + pw + 14, ly, L + pw + 38, ly, s.color, s.dashed and ' stroke-dasharray="6 4"' or "")
    o[#o + 1] = string.format('<text x="%d" y="%d" font-size="11">%s</text>', L + pw + 44, ly + 4, esc(s.name))
  end
  o[#o + 1] = "</svg>"
  return table.concat(o, "\n")
end

local css = [[
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1,h2,.note,.muted,svg{max-width:1100px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:12.5px} td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f6f6f6} td.l,th.l{text-align:left} .muted{color:#777} .fail{color:#b00;font-weight:600}
.pass{color:#070} .note{background:#fffbe6;border:1px solid #f0e0a0;padding:6px 10px;margin:8px 0}
table.rows td,table.rows th{white-space:nowrap;padding:2px 4px;font-size:11.5px}
table.rows td.wrap{white-space:normal;text-align:left;min-width:10em;max-width:28em}
]]

-- The HTML text for runs (ids) of db; lead: an HTML fragment put first
-- (the comparison view of `report A B`, lua/vsalab/htmlcompare.lua);
-- kernels: {[id] = {names...}} for runs named only as RUN:KERNEL, whose
-- sections then show those kernels' rows.
function M.render(db, ids, lead, kernels)
  local o = {"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>vsalab report</title><style>", css, "</style></head><body>"}
  o[#o + 1] = string.format("<h1>vsalab report</h1><div class=\"muted\">run%s %s · generated %s · vsalab %s</div>",
    #ids > 1 and "s" or "",
    esc(table.concat(ids, ", ")), os.date("!%Y-%m-%d %H:%M UTC"), esc(core.version))
  if lead then o[#o + 1] = lead end
  for _, id in ipairs(ids) do
    local run = db:q("SELECT * FROM run WHERE id = ?", id)[1]
    -- The shards of one sweep are one logical run (lua/vsalab/shard.lua).
    local members = shard.members(db, id)
    local in_members = "run_id IN " .. shard.in_list(members)
    -- of_rows: the run's rows, or those kernels' (bound values, below).
    local only = kernels and kernels[id]
    local of_rows = in_members
    if only then
      local marks = {}
      for i = 1, #only do marks[i] = "?" end
      of_rows = in_members .. " AND kernel IN (" .. table.concat(marks, ", ") .. ")"
    end
    o[#o + 1] = string.format("<h2>Run %d — %s</h2>", id, esc(run.script or "(no script)"))
    if only then
      o[#o + 1] = string.format('<div class="muted">kernel%s %s only (RUN:KERNEL)</div>',
        #only > 1 and "s" or "", esc(table.concat(only, ", ")))
    end
    if #members > 1 then
      o[#o + 1] = string.format('<div class="muted">sweep %s: runs %s, one logical run</div>',
        esc(run.sweep_id), esc(table.concat(members, ", ")))
    end
    o[#o + 1] = "<table>"
    for _, k in ipairs{"status", "started_at", "ended_at", "gpu_name", "gpu_cc", "sm_count", "driver_version",
        "runtime_version", "git_rev", "seed", "host", "args", "context", "nvcc_flags", "error"} do
      if run[k] ~= nil then
        o[#o + 1] = string.format('<tr><th class="l">%s</th><td class="l">%s</td></tr>', k, esc(run[k]))
      end
    end
    o[#o + 1] = "</table>"
    local compare = require "vsalab.compare"
    local rows = db:q("SELECT *, " .. compare.lists_sql .. [[ AS lists,
      CASE WHEN json_valid(extra) THEN json_extract(extra, '$.sharing') END AS sharing
      FROM result_summary WHERE ]] .. of_rows .. [[ ORDER BY experiment, kernel, block, H, density, Sq]], unpack(only or {}))
    -- One chart per experiment, against the axis its points vary along:
    -- tokens (log2) when Sq varies, else density, else heads (a sweep of
    -- densities at one token count would otherwise draw one dot).
    local timed = {}
    for _, r in ipairs(rows) do
      if r.tflops and r.Sq and r.kernel ~= "gemm_bf16" then timed[#timed + 1] = r end
    end
    local varies = {}
    for _, r in ipairs(timed) do
      local v = varies[r.experiment] or {Sq = {}, density = {}, H = {}}
      varies[r.experiment] = v
      v.Sq[r.Sq] = true
      v.density[string.format("%.6f", r.density or 0)] = true
      v.H[r.H or 0] = true
    end
    local function count(t) local n = 0 for _ in pairs(t) do n = n + 1 end return n end
    local groups, order = {}, {}
    for _, r in ipairs(timed) do
      local v = varies[r.experiment]
      local x = count(v.Sq) > 1 and "Sq" or count(v.density) > 1 and "density" or count(v.H) > 1 and "H" or "Sq"
      local g = r.experiment .. " · B" .. tostring(r.B) .. " D" .. tostring(r.D)
      if x ~= "H" then g = g .. " H" .. tostring(r.H) end
      if x ~= "Sq" then g = g .. " S" .. tostring(r.Sq) end
      if not groups[g] then
        groups[g] = {series = {}, H = r.H, x = x, values = {}}
        order[#order + 1] = g
      end
      local key = x == "density" and r.kernel or string.format("%s %.0f%%", r.kernel, 100 * (r.density or 0))
      if r.lists and r.lists ~= "random" then key = key .. " " .. r.lists end
      -- A series per block size: TFLOPS at 64 and at 128 are different curves.
      if (r.block or 64) ~= 64 then key = key .. " blk" .. r.block end
      -- ...and per layout (a read-only schema-4 file has no layout: bhsd).
      if (r.layout or "bhsd") ~= "bhsd" then key = key .. " " .. r.layout end
      local s = groups[g].series[key]
      if not s then
        s = {name = key, points = {}, kernel = r.kernel, density = r.density or 0, lists = r.lists,
          block = r.block or 64, layout = r.layout or "bhsd"}
        groups[g].series[key] = s
      end
      local xv = r[x] or 0
      groups[g].values[xv] = true
      s.points[#s.points + 1] = {xv, r.tflops}
    end
    local any_anchor = false
    for _, g in ipairs(order) do
      local series = {}
      for _, s in pairs(groups[g].series) do series[#series + 1] = s end
      -- Legend by kernel, then density as a number.
      table.sort(series, function(a, b)
        if a.kernel ~= b.kernel then return a.kernel < b.kernel end
        if a.block ~= b.block then return a.block < b.block end
        if a.layout ~= b.layout then return a.layout < b.layout end
        if a.density ~= b.density then return a.density < b.density end
        -- extra.point.lists is free JSON: a number in a hand-made row.
        return tostring(a.lists) < tostring(b.lists)
      end)
      for i, s in ipairs(series) do s.color = palette[(i - 1) % #palette + 1] end
      local axis
      if groups[g].x == "Sq" then
        for _, a in ipairs(M.anchors) do
          if a.H == groups[g].H then
            series[#series + 1] = {name = a.name, color = "#555", dashed = true, points = a.points}
            any_anchor = true
          end
        end
      else
        local vals = {}
        for xv in pairs(groups[g].values) do vals[#vals + 1] = xv end
        table.sort(vals)
        axis = {label = groups[g].x == "H" and "heads" or "density (selected share of kv blocks)",
          key = groups[g].x, values = vals}
      end
      o[#o + 1] = chart(g, series, axis)
    end
    if #order == 0 then o[#o + 1] = '<div class="note">No timed rows with TFLOPS in this run.</div>' end
    local gemm = db:q("SELECT tflops FROM result WHERE " .. in_members .. " AND kernel = 'gemm_bf16' ORDER BY id DESC LIMIT 1")[1]
    gemm = gemm and gemm.tflops
    if gemm then
      o[#o + 1] = string.format('<div class="note">bf16 GEMM ceiling measured in this run (cuBLAS): <b>%.0f TFLOPS</b>; the pct_gemm column gives each figure as a share of it.</div>', gemm)
    else
      o[#o + 1] = '<div class="note">The bf16 GEMM ceiling was not measured in this run, so no "% of GEMM" figure is shown.</div>'
    end
    if any_anchor then
      o[#o + 1] = '<div class="note">Dashed lines are published figures (docs/ANCHORS.md) from another run on the same kind of card, not side-by-side measurements.</div>'
    end
    -- Worst error per output per kernel.
    local errs = db:q([[SELECT r.kernel, e.output, max(e.rel_l2) AS worst, sum(e.passed = 0) AS failed, count(*) AS n
      FROM result r JOIN result_error e ON e.result_id = r.id WHERE r.]] .. of_rows .. [[
      GROUP BY r.kernel, e.output ORDER BY r.kernel, e.output]], unpack(only or {}))
    if #errs > 0 then
      o[#o + 1] = "<h2>Errors against the fp64 oracle</h2><table><tr><th class=\"l\">kernel</th><th class=\"l\">output</th><th>worst rel L2</th><th>checks</th><th>failed</th></tr>"
      for _, e in ipairs(errs) do
        o[#o + 1] = string.format('<tr><td class="l">%s</td><td class="l">%s</td><td>%s</td><td>%d</td><td class="%s">%d</td></tr>',
          esc(e.kernel), esc(e.output), fmt(e.worst, "%.2e"), e.n, (e.failed or 0) > 0 and "fail" or "pass", e.failed or 0)
      end
      o[#o + 1] = "</table>"
    end
    local cols = {"id", "experiment", "kernel", "B", "H", "Sq", "D", "block", "layout", "density", "topk", "ragged", "lists", "sharing", "mode", "ms_median", "rel_stddev", "tflops", "pct_gemm", "throttled", "passed", "worst_output", "worst_rel_l2", "note"}
    for _, r in ipairs(rows) do
      if gemm and r.tflops and r.kernel ~= "gemm_bf16" then r.pct_gemm = 100 * r.tflops / gemm end
    end
    -- A column no row fills (pct_gemm without a GEMM ceiling, throttled
    -- off NVML) is left out, and said.
    local kept, empty = {}, {}
    for _, c in ipairs(cols) do
      local any = c == "id" or c == "experiment" or c == "kernel"
      for _, r in ipairs(rows) do
        if any then break end
        -- layout: shown when a row is not bhsd (the default), as throttled.
        any = r[c] ~= nil and not (c == "throttled" and r[c] ~= 1) and not (c == "layout" and r[c] == "bhsd")
      end
      if any then kept[#kept + 1] = c elseif c ~= "layout" then empty[#empty + 1] = c end
    end
    cols = kept
    o[#o + 1] = "<h2>All rows</h2>"
    if #rows > 0 and #empty > 0 then
      o[#o + 1] = string.format('<div class="muted">empty in every row, not shown: %s</div>',
        esc(table.concat(empty, ", ")))
    end
    -- Every column in view at 1,400 px (no scroll box hides any): the
    -- note alone wraps.
    o[#o + 1] = '<table class="rows"><tr>'
    local left = {experiment = true, kernel = true, worst_output = true, lists = true, note = true}
    for _, c in ipairs(cols) do o[#o + 1] = string.format('<th class="%s">%s</th>', left[c] and "l" or "", c) end
    o[#o + 1] = "</tr>"
    for _, r in ipairs(rows) do
      o[#o + 1] = "<tr>"
      for _, c in ipairs(cols) do
        local v = r[c]
        -- TFLOPS with 4 significant digits: CPU rows are ~0.001 (not 0.0).
        local f = ({density = "%.3f", sharing = "%.3f", ms_median = "%.4f", rel_stddev = "%.3f", tflops = "%.4g", pct_gemm = "%.0f%%", worst_rel_l2 = "%.2e"})[c]
        local cls = c == "note" and "wrap" or (left[c] and "l" or "")
        if c == "passed" and v ~= nil then cls = v == 1 and "pass" or "fail"; v = v == 1 and "pass" or "FAIL" end
        -- Timed while a power or thermal limit held the clocks down.
        if c == "throttled" then v = v == 1 and "yes" or nil end
        o[#o + 1] = string.format('<td class="%s">%s</td>', cls, fmt(v, f))
      end
      o[#o + 1] = "</tr>"
    end
    o[#o + 1] = "</table>"
  end
  o[#o + 1] = "</body></html>\n"
  return table.concat(o, "\n")
end

function M.main(argv)
  local o, refs = cli.parse("report", argv, {strict = true,
    usage = "usage: vsalab report [--db PATH] [-o report.html] [RUN...]",
    about = "one self-contained HTML file (default run: the latest with timed rows);\n"
      .. "two sides (RUN or RUN:KERNEL) open with a comparison view",
    options = {["-o"] = {key = "out"}}})
  if not o then return refs end
  local out = o.out or "report.html"
  if out == "" then
    io.stderr:write("vsalab report: -o expects a file name\n")
    return 2
  end
  -- The report is renamed over out: a device (/dev/null, /dev/stdout), a
  -- FIFO (reading its head would wait forever), a directory or a link
  -- would be replaced or hang; only a regular file or a new name is taken.
  local kind = core.file_type(out)
  if kind and kind ~= "file" then
    io.stderr:write("vsalab report: -o ", out, " is a ", kind == "other" and "device, FIFO or socket"
      or kind, ", not a regular file; not overwritten (name a file)\n")
    return 2
  end
  local db = cli.open_db("report", o.db)
  if not db then return 2 end
  if #refs == 0 then
    -- The latest run with timed rows that is not a rerun, else the latest.
    local r = db:q([[SELECT run.id FROM run WHERE coalesce(script, '') NOT LIKE 'rerun of row %'
      AND EXISTS (SELECT 1 FROM result WHERE run_id = run.id AND ms_median IS NOT NULL)
      ORDER BY run.id DESC LIMIT 1]])[1]
    refs = {r and tostring(r.id) or "latest"}
  end
  -- RUN or RUN:KERNEL; two of them add the comparison view.
  -- A run named only as RUN:KERNEL shows those kernels' rows (report 7:mine).
  local ids, sides, seen, kernels, whole = {}, {}, {}, {}, {}
  for _, ref in ipairs(refs) do
    local okr, side = pcall(require("vsalab.compare").resolve_side, db, ref)
    if not okr then
      db:close()
      -- Damage found mid-read is a usage error that names the command
      -- already ("report: X is damaged"): passed on, not prefixed again.
      if require("vsalab.usage").is(side) then error(side, 0) end
      io.stderr:write("vsalab report: ", tostring(side), "\n")
      return 2
    end
    -- A sweep's shards are one run, named by its first shard as `runs`
    -- and `compare` name it (any shard's id, or the default's latest row,
    -- may have named it).
    side.run = shard.members(db, side.run)[1]
    side.label = side.kernel and (side.run .. ":" .. side.kernel) or tostring(side.run)
    sides[#sides + 1] = side
    if not seen[side.run] then seen[side.run] = true; ids[#ids + 1] = side.run end
    if not side.kernel then
      whole[side.run], kernels[side.run] = true, nil
    elseif not whole[side.run] then
      kernels[side.run] = kernels[side.run] or {}
      table.insert(kernels[side.run], side.kernel)
    end
  end
  local two = #sides == 2 and sides[1].label ~= sides[2].label
  local html = M.render(db, ids, two and require("vsalab.htmlcompare").render(db, sides[1], sides[2]) or nil, kernels)
  db:close()
  -- Never write the report over a database, a WAL or a journal: an
  -- existing file is replaced only when it is empty or an earlier HTML
  -- report (the results DB is refused by inode too, whatever its name).
  for _, p in ipairs{o.db, o.db .. "-wal", o.db .. "-shm", o.db .. "-journal"} do
    if core.same_file(out, p) then
      io.stderr:write("vsalab report: -o ", out, " is the results database (", p, "); not overwritten\n")
      return 2
    end
  end
  local h = io.open(out, "rb")
  local head = h and h:read(15)
  if h then h:close() end
  if head and head ~= "<!DOCTYPE html>" then
    io.stderr:write("vsalab report: -o ", out, " exists and is not an HTML report; not overwritten\n")
    return 2
  end
  -- A temporary file beside out, renamed over it once every write and the
  -- close succeeded: a full disk leaves no half report and keeps the old.
  -- Its name has 64 random bits and must be free: a link planted at a
  -- predictable name would have been followed.
  local rnd = io.open("/dev/urandom", "rb")
  local bits = rnd and rnd:read(8)
  if rnd then rnd:close() end
  if not bits or #bits ~= 8 then
    io.stderr:write("vsalab report: could not write ", out, ": no /dev/urandom for a temporary name\n")
    return 1
  end
  local tmp = string.format("%s.tmp-%d-%s", out, (package.loaded.vsalab.context or {}).pid or 0,
    (bits:gsub(".", function(c) return string.format("%02x", c:byte()) end)))
  if core.file_type(tmp) then
    io.stderr:write("vsalab report: could not write ", out, ": ", tmp, " is in the way\n")
    return 1
  end
  local f, err = io.open(tmp, "wb")
  if not f then -- err names the temporary file; the user asked for out
    err = tostring(err)
    if err:sub(1, #tmp + 2) == tmp .. ": " then err = err:sub(#tmp + 3) end
    io.stderr:write("vsalab report: could not write ", out, ": ", err, "\n")
    return 1
  end
  -- An interrupt between here and the rename removes the temporary file.
  local done, okw, werr, okf, ferr, okc, cerr, okr, rerr = pcall(function()
    local w1, w2 = f:write(html)
    local f1, f2 = f:flush()
    local c1, c2 = f:close()
    local r1, r2
    if w1 and f1 and c1 then r1, r2 = os.rename(tmp, out) end
    return w1, w2, f1, f2, c1, c2, r1, r2
  end)
  if not done then
    pcall(f.close, f)
    os.remove(tmp)
    error(okw, 0)
  end
  if not okr then
    os.remove(tmp)
    io.stderr:write("vsalab report: could not write ", out, ": ",
      tostring(werr or ferr or cerr or rerr), " (an earlier file there is unchanged)\n")
    return 1
  end
  print(string.format("wrote %s (%d bytes, run%s %s)", out, #html, #ids == 1 and "" or "s",
    table.concat(ids, ", ")))
  return 0
end

return M
