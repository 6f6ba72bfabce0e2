-- vsalab compare A B: per matching point of two runs, the speed ratio and a
-- verdict, error changes and pass->fail flags.
--
--   vsalab compare [--db PATH] [--floor-pct 2] [--floor-pct-host 50]
--                  [--floor-ms 0.005] [--floor-ms-host 0.05] [--partial] A B
--
-- A and B are run ids, `latest`, `latest~N` (N runs before the latest), or
-- a project revision prefix of 4+ hex digits (the latest run built from it). A is the
-- baseline. RUN:KERNEL takes only that kernel's rows of the run, and
-- points then match without the kernel: `vsalab compare 7:sm90a 7:triton`
-- sets two kernels of one run (the same inputs) side by side.
-- Points match on (experiment, kernel, B, H, Sq, Skv, D, block,
-- density, topk, ragged, list kind, timing mode); block is the block size
-- (64 when a row has none: rows of a DB not yet upgraded to schema 4, read
-- read-only); the table shows it per point. The list kind is the
-- row's extra.point.lists ('random' when absent: rows of random lists and
-- rows logged before the axis existed); when a run measured a point twice
-- the last row counts; a point timed in one run only is listed as ONLY A
-- or ONLY B. Verdicts, from the medians and each run's measured range
-- [ms_min, ms_max]:
--   SAME       |ratio - 1| <= floor-pct, or |B - A| < floor-ms (tiny kernels)
--   SLOW/FAST  the ranges do not overlap and the medians differ by more than
--              floor-pct (B's fastest sample slower than A's slowest, or
--              the reverse)
--   AMBIGUOUS  the medians differ by more than the floor but the ranges
--              overlap: rerun with more samples
-- A row that passed in A and fails in B is flagged NEW FAIL; an output
-- whose rel L2 grew more than 2x is flagged ERR UP; a row marked
-- result.throttled (NVML: a power or thermal limit held the clocks down for
-- 1% or more of its timed burst, even after the retries; power_cap.lua,
-- kernels/NOTES.md "Timing under the power cap") is flagged THROTTLED A or
-- THROTTLED B, so its verdict is read as the limiter's as much as the
-- kernel's; a point of A that B
-- lacks is flagged MISSING. A run that is a shard of a sweep (run.sweep_id,
-- after `vsalab merge`) stands for every shard of it: one logical run. Rows
-- timed on the host clock (CPU points: a few samples on a shared machine
-- scatter by 10% to 2x run to run) are judged with a floor derived from
-- their measured spread: the larger of floor-pct-host (default 50%, never
-- below floor-pct) and the two runs' relative spreads added
-- ((max - min) / median of A, plus B's), so a busy host's noise, which
-- widens each run's range, widens its floor too (M.host_floor_pct); the
-- header says so, and a row whose floor came from its spread says it in
-- its flags. Their absolute floor is floor-ms-host (default 0.05 ms): a
-- host call of a few microseconds (the CPU inversion's first, cold call)
-- moves by that much from one run to the next on a busy machine.
-- Exit status 1 when any point is SLOW, NEW FAIL
-- or MISSING (--partial: B may measure a subset, as a rerun does), or no
-- point matches (so it can gate a CI job), 2 on usage errors.
local cli = require "vsalab.cli"
local report = require "vsalab.report"
local shard = require "vsalab.shard"

local M = {}

M.defaults = {floor_pct = 2, floor_ms = 0.005, floor_pct_host = 50, floor_ms_host = 0.05}

-- Verdict for one point: a, b = {median, min, max} in ms. Returns the
-- verdict, B/A and, for a SAME under the absolute floor, "floor_ms".
function M.verdict(a, b, opts)
  opts = opts or M.defaults
  local floor = (opts.floor_pct or M.defaults.floor_pct) / 100
  local ratio = b.median / a.median
  if math.abs(b.median - a.median) < (opts.floor_ms or M.defaults.floor_ms) then
    return "SAME", ratio, "floor_ms"
  end
  if math.abs(ratio - 1) <= floor then return "SAME", ratio end
  if ratio > 1 and b.min > a.max then return "SLOW", ratio end
  if ratio < 1 and b.max < a.min then return "FAST", ratio end
  return "AMBIGUOUS", ratio
end

local key_cols = {"experiment", "kernel", "B", "H", "Sq", "Skv", "D", "block",
  "layout", "density", "topk", "ragged", "lists", "mode"}

-- SQL for a result row's list kind: 'random' or 'vsa:ℓ' (extra.point.lists).
M.lists_sql = [[coalesce(CASE WHEN json_valid(extra) THEN json_extract(extra, '$.point.lists') END, 'random')]]

local function point_key(r, no_kernel)
  local parts = {}
  for i, c in ipairs(key_cols) do
    local v = r[c]
    if no_kernel and c == "kernel" then v = "*" end
    if c == "block" and v == nil then v = 64 end -- rows from before the block axis
    -- rows from before the layout axis (a read-only schema-4 file has no column)
    if c == "layout" and v == nil then v = "bhsd" end
    if type(v) == "number" and c == "density" then v = string.format("%.6f", v) end
    parts[i] = tostring(v)
  end
  return table.concat(parts, "|")
end

-- One logical run: a sweep's shards share its sweep id.
local LOGICAL_RUN = "coalesce(sweep_id, 'run:' || id)"

-- What the DB holds, for a reference that matches no run: "the DB has 3
-- runs, ids 1 to 3" (latest~N counts logical runs: "latest~0 to latest~2").
function M.runs_hint(db, logical)
  local r = db:q("SELECT count(*) AS n, min(id) AS lo, max(id) AS hi FROM run")[1]
  if r.n == 0 then return "the DB has no runs" end
  if logical then
    local n = shard.has_sweeps(db)
      and #db:q("SELECT 1 FROM run GROUP BY " .. LOGICAL_RUN) or r.n
    return string.format("the DB has %d %srun%s: latest~0 to latest~%d", n,
      n ~= r.n and "logical " or "", n == 1 and "" or "s", n - 1)
  end
  return string.format("the DB has %d run%s, ids %d to %d", r.n, r.n == 1 and "" or "s", r.lo, r.hi)
end

-- Resolve a run reference to an id; raises "no run matches 'REF' (...)",
-- saying what the DB holds, when none does.
function M.resolve(db, ref)
  local function none(why, logical)
    error(string.format("no run matches '%s' (%s%s)", ref, why and (why .. "; ") or "",
      M.runs_hint(db, logical)), 0)
  end
  local back = (ref == "latest" and "0") or ref:match("^latest~(%d+)$")
  if back then
    if #back > 15 then none(nil, true) end
    -- Counted in logical runs: the shards of one sweep are one.
    local r = shard.has_sweeps(db)
      and db:q("SELECT min(id) AS id FROM run GROUP BY " .. LOGICAL_RUN
                 .. " ORDER BY max(id) DESC LIMIT 1 OFFSET ?", tonumber(back))
      or db:q("SELECT id FROM run ORDER BY id DESC LIMIT 1 OFFSET ?", tonumber(back))
    if #r == 0 then none(nil, true) end
    return r[1].id
  end
  if ref:match("^%d+$") then
    if #ref > 15 then none() end
    local r = db:q("SELECT id FROM run WHERE id = ?", tonumber(ref))
    if #r == 0 then
      -- Digits are an id first; say so when a revision starts with them.
      local rev = #ref >= 4 and db:q("SELECT git_rev FROM run WHERE substr(git_rev, 1, ?) = ? LIMIT 1",
        #ref, ref)[1]
      none(rev and ("read as a run id; revision " .. rev.git_rev .. " starts with it too: give a "
        .. "longer prefix that has a letter") or nil)
    end
    return r[1].id
  end
  -- A revision: its latest run. A prefix of several revisions is refused,
  -- and so is one too short to name a revision (git's minimum: 4 hex digits).
  if not ref:match("^%x%x%x%x") then
    none("a run is an id, 'latest', 'latest~N' or a revision prefix of 4+ hex digits")
  end
  local revs = db:q("SELECT DISTINCT git_rev FROM run WHERE substr(git_rev, 1, ?) = ?", #ref, ref)
  if #revs == 0 then none("no run was built from a revision starting so") end
  if #revs > 1 then
    local names = {}
    for i, v in ipairs(revs) do names[i] = v.git_rev end
    error("revision '" .. ref .. "' is ambiguous: " .. table.concat(names, ", "), 0)
  end
  local r = db:q("SELECT id FROM run WHERE git_rev = ? ORDER BY id DESC LIMIT 1", revs[1].git_rev)
  return r[1].id
end

-- A side of a comparison: "REF" or "REF:KERNEL" -> {run=, kernel=, label=}.
function M.resolve_side(db, ref)
  if ref:match(".:$") then
    error(string.format("'%s' names no kernel after ':' (RUN:KERNEL, e.g. %sreference)", ref, ref), 0)
  end
  local r, kernel = ref:match("^(.-):([%w_.:%-]+)$")
  if not r or r == "" then r, kernel = ref, nil end
  local id = M.resolve(db, r)
  -- Any shard's id names its logical run: the kernel may be in another
  -- shard's rows (this shard's slice can even be empty).
  local shard = require "vsalab.shard"
  local in_members = "run_id IN " .. shard.in_list(shard.members(db, id))
  if kernel and #db:q("SELECT 1 FROM result WHERE " .. in_members .. " AND kernel = ? LIMIT 1", kernel) == 0 then
    -- Plug-ins and peers are named by vsalab (libmine.so: mine): say what it has.
    local has = {}
    for _, k in ipairs(db:q("SELECT DISTINCT kernel FROM result WHERE " .. in_members .. " ORDER BY kernel")) do
      has[#has + 1] = k.kernel
    end
    error(string.format("run %d has no rows of kernel '%s'%s (%s)", id, kernel,
      require("vsalab.usage").did_you_mean(kernel, has),
      #has > 0 and "its kernels: " .. table.concat(has, ", ") or "it has no rows"), 0)
  end
  return {run = id, kernel = kernel, label = kernel and (id .. ":" .. kernel) or tostring(id)}
end

-- The timed rows of a side's logical run (every shard of its sweep); side:
-- a run id, or {run=, kernel=} (rows of that kernel only, matched without
-- the kernel).
local function load(db, side)
  local id, kernel = side, nil
  if type(side) == "table" then id, kernel = side.run, side.kernel end
  -- host_clock: timed on the host clock (the experiments record extra.clock).
  local rows = db:q("SELECT *, " .. M.lists_sql .. [[ AS lists,
                      coalesce(CASE WHEN json_valid(extra) THEN json_extract(extra, '$.clock') END, '') = 'host'
                        AS host_clock FROM result
                      WHERE run_id IN ]] .. shard.in_list(shard.members(db, id))
    .. [[ AND ms_median IS NOT NULL AND (?1 IS NULL OR kernel = ?1) ORDER BY id]], kernel)
  local by = {}
  for _, r in ipairs(rows) do
    r.errors = {}
    for _, e in ipairs(db:q("SELECT * FROM result_error WHERE result_id = ?", r.id)) do
      r.errors[e.output] = e
    end
    by[point_key(r, kernel ~= nil)] = r
  end
  return by
end

-- A result row's relative spread, (max - min) / median (0 when unknown).
local function rel_spread(r)
  if type(r.spread) == "number" and r.spread >= 0 and r.spread < math.huge then return r.spread end
  if r.ms_max and r.ms_min and r.ms_median and r.ms_median > 0 then
    return (r.ms_max - r.ms_min) / r.ms_median
  end
  return 0
end

-- The floor (in %) of a host-clock point timed in rows ra and rb: the larger
-- of host_pct and the two runs' relative spreads added. On a loaded host a
-- run's samples scatter with the load, and its median can sit anywhere in
-- that range: two identical runs' medians then differ by up to about both
-- ranges, which a fixed floor does not cover. Returns the floor and
-- whether the spread set it.
function M.host_floor_pct(ra, rb, host_pct)
  local from_spread = 100 * (rel_spread(ra) + rel_spread(rb))
  if from_spread > host_pct then return from_spread, true end
  return host_pct, false
end

local function point_row(r, verdict)
  return {experiment = r.experiment, kernel = r.kernel, B = r.B, H = r.H, S = r.Sq,
    block = r.block or 64, layout = r.layout or "bhsd",
    ragged = r.ragged, density = r.density, lists = r.lists, mode = r.mode,
    verdict = verdict, flags = ""}
end

-- Compare runs a and b (ids, or {run=, kernel=} sides: then both should
-- name a kernel) of db; returns the list of point rows, whether
-- the comparison gates (SLOW, NEW FAIL, or, unless opts.partial, a point of
-- A that B did not measure) and the number of matching points. Points in
-- one run only come last, as verdict ONLY A / ONLY B.
function M.compare(db, a, b, opts)
  opts = opts or {}
  local A, B = load(db, a), load(db, b)
  local out, gate = {}, false
  local keys, only_a, only_b = {}, {}, {}
  for k in pairs(B) do
    if A[k] then keys[#keys + 1] = k else only_b[#only_b + 1] = k end
  end
  for k in pairs(A) do if not B[k] then only_a[#only_a + 1] = k end end
  table.sort(keys)
  table.sort(only_a)
  table.sort(only_b)
  local host_ms = math.max(opts.floor_ms or M.defaults.floor_ms, opts.floor_ms_host or M.defaults.floor_ms_host)
  local host_opts = {floor_ms = host_ms,
    floor_pct = math.max(opts.floor_pct or M.defaults.floor_pct, opts.floor_pct_host or M.defaults.floor_pct_host)}
  local host_rows, spread_rows = 0, 0
  for _, k in ipairs(keys) do
    local ra, rb = A[k], B[k]
    local host = ra.host_clock == 1 or rb.host_clock == 1
    local point_opts, spread_floor = opts, nil
    if host then
      host_rows = host_rows + 1
      local pct, by_spread = M.host_floor_pct(ra, rb, host_opts.floor_pct)
      point_opts = {floor_ms = host_ms, floor_pct = pct}
      if by_spread then spread_rows = spread_rows + 1; spread_floor = pct end
    end
    local v, ratio, judged_by = M.verdict(
      {median = ra.ms_median, min = ra.ms_min or ra.ms_median, max = ra.ms_max or ra.ms_median},
      {median = rb.ms_median, min = rb.ms_min or rb.ms_median, max = rb.ms_max or rb.ms_median},
      point_opts)
    local flags = {}
    if ra.passed == 1 and rb.passed == 0 then flags[#flags + 1] = "NEW FAIL" end
    if ra.throttled == 1 then flags[#flags + 1] = "THROTTLED A" end
    if rb.throttled == 1 then flags[#flags + 1] = "THROTTLED B" end
    for name, eb in pairs(rb.errors) do
      local ea = ra.errors[name]
      if ea and ea.rel_l2 and eb.rel_l2 and eb.rel_l2 > 2 * ea.rel_l2 and eb.rel_l2 > 1e-6 then
        flags[#flags + 1] = "ERR UP " .. name
      end
    end
    -- Name the floor that judged: a SAME under the absolute floor says so
    -- (a spread floor of 156% did not make a 3x ratio SAME).
    if judged_by == "floor_ms" and host then
      flags[#flags + 1] = string.format("under %g ms (host floor)", point_opts.floor_ms)
    elseif spread_floor then
      flags[#flags + 1] = string.format("floor %.0f%% (spread)", spread_floor)
    end
    if v == "SLOW" or flags[1] == "NEW FAIL" then gate = true end
    local row = point_row(rb, v)
    -- Two kernels side by side (RUN:KERNEL on each side): name both.
    if ra.kernel ~= rb.kernel then row.kernel = ra.kernel .. " -> " .. rb.kernel end
    row.a_ms, row.b_ms, row.ratio, row.flags = ra.ms_median, rb.ms_median, ratio, table.concat(flags, ", ")
    row.a, row.b = ra, rb -- the result rows (with .errors), for the HTML view
    out[#out + 1] = row
  end
  local matched = #out
  -- A point B lost (a timeout, an error, a shorter sweep, another timing
  -- mode) must not let a gate pass silently.
  for _, k in ipairs(only_a) do
    local row = point_row(A[k], "ONLY A")
    row.a_ms, row.a = A[k].ms_median, A[k]
    if not opts.partial then row.flags = "MISSING"; gate = true end
    out[#out + 1] = row
  end
  for _, k in ipairs(only_b) do
    local row = point_row(B[k], "ONLY B")
    row.b_ms, row.b = B[k].ms_median, B[k]
    out[#out + 1] = row
  end
  return out, gate, matched, host_rows, host_opts.floor_pct, spread_rows
end

-- Points per verdict, and MISSING: the ONLY A points that gate (all of
-- them unless --partial), as the summary line and the HTML view count them.
function M.counts(rows)
  local c = {SAME = 0, FAST = 0, SLOW = 0, AMBIGUOUS = 0, ["ONLY A"] = 0, ["ONLY B"] = 0, MISSING = 0,
    ["NEW FAIL"] = 0}
  for _, r in ipairs(rows) do
    c[r.verdict] = (c[r.verdict] or 0) + 1
    if r.flags == "MISSING" then c.MISSING = c.MISSING + 1 end
    if type(r.flags) == "string" and r.flags:find("NEW FAIL", 1, true) then c["NEW FAIL"] = c["NEW FAIL"] + 1 end
  end
  return c
end

local usage = "usage: vsalab compare [--db PATH] [--floor-pct P] [--floor-pct-host P] [--floor-ms MS] [--floor-ms-host MS] [--partial] A[:KERNEL] B[:KERNEL]"

local about = [[
A is the baseline; a run is an id, latest, latest~N or a revision prefix (4+
hex digits); RUN:KERNEL takes one kernel's rows. Per point: B/A and a verdict
(SAME, FAST, SLOW, AMBIGUOUS; NEW FAIL, ERR UP, THROTTLED A/B; ONLY A / ONLY B,
MISSING).
Exit 1 on SLOW, NEW FAIL or MISSING (--partial: B may be a subset).
A point is SAME when B/A is within --floor-pct of 1 (default ]] .. M.defaults.floor_pct
  .. [[%) or the
medians differ by less than --floor-ms (default ]] .. M.defaults.floor_ms .. [[ ms); host-clock (CPU)
rows use the larger of --floor-pct-host (default ]] .. M.defaults.floor_pct_host .. [[%) and the two runs'
relative spreads added, and --floor-ms-host (default ]] .. M.defaults.floor_ms_host .. [[ ms) as their absolute floor. Past the floor, SLOW and FAST need the two runs'
sample ranges apart.]]

-- When no point matched: "run A was timed hot, run B sustained: ..." if the
-- two runs' rows share no timing mode, else nil.
local function mode_mismatch(rows, label_a, label_b)
  local ma, mb = {}, {}
  for _, r in ipairs(rows) do
    if r.a then ma[r.a.mode or "hot"] = true end
    if r.b then mb[r.b.mode or "hot"] = true end
  end
  if not (next(ma) and next(mb)) then return nil end
  for m in pairs(ma) do if mb[m] then return nil end end
  local function names(set)
    local l = {}
    for m in pairs(set) do l[#l + 1] = m end
    table.sort(l)
    return table.concat(l, "/")
  end
  return string.format("run %s was timed %s, run %s %s: rows of different timing modes never compare",
    label_a, names(ma), label_b, names(mb))
end

-- Entry point of `vsalab compare`: returns the exit status.
function M.main(argv)
  local function floor(v)
    local n = tonumber(v)
    -- inf would judge every point SAME: a gate that can never fail.
    if n and n >= 0 and n < math.huge then return n end
    return nil, "expects a finite number >= 0, got '" .. tostring(v) .. "'"
  end
  local o, refs = cli.parse("compare", argv, {usage = usage, strict = true, about = about, options = {
    ["--floor-pct"] = {key = "floor_pct", check = floor},
    ["--floor-ms"] = {key = "floor_ms", check = floor},
    ["--floor-pct-host"] = {key = "floor_pct_host", check = floor},
    ["--floor-ms-host"] = {key = "floor_ms_host", check = floor},
    ["--partial"] = {key = "partial", flag = true}}})
  if not o then return refs end
  local opts = {floor_pct = o.floor_pct or M.defaults.floor_pct,
    floor_ms = o.floor_ms or M.defaults.floor_ms, partial = o.partial,
    floor_pct_host = o.floor_pct_host or M.defaults.floor_pct_host,
    floor_ms_host = o.floor_ms_host or M.defaults.floor_ms_host}
  if #refs ~= 2 then
    local got = #refs == 0 and "none" or (#refs .. ": '" .. table.concat(refs, "', '") .. "'")
    io.stderr:write("vsalab compare: expected two runs, A (the baseline) and B, got ", got, "\n", usage, "\n")
    return 2
  end
  local db = cli.open_db("compare", o.db)
  if not db then return 2 end
  local ok2, sa = pcall(M.resolve_side, db, refs[1])
  local ok3, sb = pcall(M.resolve_side, db, refs[2])
  if not (ok2 and ok3) then
    -- Damage found mid-read names the command already: not prefixed again.
    local err = ok2 and sb or sa
    if require("vsalab.usage").is(err) then error(err, 0) end
    io.stderr:write("vsalab compare: ", tostring(err), "\n")
    return 2
  end
  -- Shards of one sweep are one run: name the run by its first shard.
  local function first(id) return shard.members(db, id)[1] end
  if sa.run ~= sb.run and first(sa.run) == first(sb.run) and sa.kernel == sb.kernel then
    local one = first(sa.run)
    db:close()
    io.stderr:write(string.format("vsalab compare: %s and %s are shards of one sweep (one logical run %d)\n",
      refs[1], refs[2], one))
    return 2
  end
  sa.run, sb.run = first(sa.run), first(sb.run)
  if (sa.kernel == nil) ~= (sb.kernel == nil) then
    db:close()
    io.stderr:write("vsalab compare: give a kernel on both sides (RUN:KERNEL) or on neither\n")
    return 2
  end
  -- The inversion's rows time q2k -> k2q, not a backward: a figure to set
  -- beside another inversion only.
  if sa.kernel and (sa.kernel == "invert") ~= (sb.kernel == "invert") then
    db:close()
    io.stderr:write(string.format("vsalab compare: %s times the q2k -> k2q inversion and %s a "
      .. "backward: compare an inversion with an inversion\n", sa.kernel == "invert" and refs[1] or refs[2],
      sa.kernel == "invert" and refs[2] or refs[1]))
    return 2
  end
  if sa.run == sb.run and sa.kernel == sb.kernel then -- e.g. a revision and `latest` naming the same run
    db:close()
    io.stderr:write(string.format("vsalab compare: %s and %s both name run %s\n", refs[1], refs[2], sa.label))
    return 2
  end
  local a, b = sa.kernel and sa or sa.run, sb.kernel and sb or sb.run
  local rows, gate, matched, host_rows, host_pct, spread_rows = M.compare(db, a, b, opts)
  db:close()
  -- The GPU floors judge GPU-clock points only: a run of host-clock points
  -- (the CPU smoke runs) names them not, as the next line gives its floors.
  local gpu_floors = host_rows < matched
    and string.format(", floors %.3g%% and %.3g ms%s", opts.floor_pct, opts.floor_ms,
      host_rows > 0 and " (GPU-clock points)" or "")
    or (matched > 0 and ", all timed on the host clock" or "")
  print(string.format("run %s (baseline) vs run %s: %d matching point%s%s",
    sa.label, sb.label, matched, matched == 1 and "" or "s", gpu_floors))
  if host_rows > 0 then
    -- Which floor judged them: the fixed one, or one derived from the spread.
    print(string.format("%d point%s timed on the host clock (CPU): each judged with a floor derived "
      .. "from its measured spread, the larger of %.3g%% (--floor-pct-host) and A's plus B's "
      .. "(max - min) / median, as host timings scatter run to run, and at least %.3g ms "
      .. "(--floor-ms-host); %d point%s used the spread-based floor",
      host_rows, host_rows == 1 and "" or "s", host_pct,
      math.max(opts.floor_ms or M.defaults.floor_ms, opts.floor_ms_host or M.defaults.floor_ms_host),
      spread_rows, spread_rows == 1 and "" or "s"))
  end
  -- Timing modes never match: a hot run against a sustained one would read
  -- as every point ONLY A / ONLY B for no visible reason, so the reason
  -- comes first and the table of unmatched rows is left out.
  local counts = M.counts(rows)
  local mismatch = matched == 0 and mode_mismatch(rows, sa.label, sb.label)
  if not mismatch then
    report.table(rows, {{key = "experiment"}, {key = "kernel"}, {key = "B", fmt = "%d"},
      {key = "H", fmt = "%d"}, {key = "ragged", fmt = "%d"},
      {key = "S", fmt = "%d"}, {key = "block", fmt = "%d"}, {key = "layout"}, {key = "density", fmt = "%.3f"}, {key = "lists"}, {key = "mode"},
      {key = "a_ms", title = "A ms", fmt = "%.4f"}, {key = "b_ms", title = "B ms", fmt = "%.4f"},
      {key = "ratio", title = "B/A", fmt = "%.3f"}, {key = "verdict"}, {key = "flags"}})
  end
  local function no_match()
    io.stderr:write("vsalab compare: no point of run ", sb.label, " matches run ", sa.label,
      mismatch and (" (" .. mismatch .. ")") or "", "\n")
  end
  if mismatch then io.stdout:flush(); no_match() end
  print(string.format("SAME %d  FAST %d  SLOW %d  AMBIGUOUS %d  ONLY A %d  ONLY B %d  MISSING %d",
    counts.SAME, counts.FAST, counts.SLOW, counts.AMBIGUOUS, counts["ONLY A"], counts["ONLY B"],
    counts.MISSING))
  if matched == 0 then
    if not mismatch then no_match() end
    return 1
  end
  if gate then
    -- Why the exit status is 1, in words: a missing point alone (an -a that
    -- narrowed B) is a gate too, unless --partial says a subset is meant.
    local why = {}
    if counts.SLOW > 0 then why[#why + 1] = counts.SLOW .. " SLOW" end
    if counts["NEW FAIL"] > 0 then why[#why + 1] = counts["NEW FAIL"] .. " NEW FAIL" end
    if counts.MISSING > 0 then
      why[#why + 1] = counts.MISSING .. " MISSING (points of A that B did not measure; --partial accepts a subset)"
    end
    io.stdout:flush()
    io.stderr:write("vsalab compare: exit 1: ", table.concat(why, ", "), "\n")
  end
  return gate and 1 or 0
end

return M
