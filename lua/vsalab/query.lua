-- Reading results: `vsalab runs`, `vsalab show RUN`, `vsalab query "SQL"`.
--
--   vsalab runs  [--db PATH] [--format table|csv|json|markdown] [--limit N]
--   vsalab show  [--db PATH] [--format ...] RUN      (id, latest, latest~N, revision)
--   vsalab query [--db PATH] [--format ...] "SQL" [values...]
--
-- The DB is opened read-only. Tables print aligned; csv quotes per RFC 4180;
-- json is an array of row objects (`show`: {"run": {...}, "rows": [...]});
-- markdown is a pipe table. Tables and markdown round numbers to 6
-- significant digits for the eye; csv and json write them exactly.
local json = require "vsalab.json"
local cli = require "vsalab.cli"

local M = {}

-- csv writes numbers exactly (json.shortest): csv is for programs, and 6
-- digits lost what was measured.
local exact = json.shortest

local function cell(v, full)
  if v == nil then return "" end
  if type(v) == "number" then
    -- Every integer a double holds exactly prints as digits (db:q hands
    -- larger INTEGERs over as their decimal strings).
    if v == math.floor(v) and math.abs(v) <= 2^53 then return string.format("%d", v) end
    return full and exact(v) or string.format("%.6g", v)
  end
  return tostring(v)
end

-- One JSON object per row, written field by field, so keys keep the
-- SELECT's order.
local function json_object(r, cols)
  local f = {}
  for k, c in ipairs(cols) do
    f[k] = json.encode(c) .. ":" .. json.encode(r[c] == nil and json.null or r[c])
  end
  return "{" .. table.concat(f, ",") .. "}"
end

local function json_rows(rows, cols)
  local t = {}
  for i, r in ipairs(rows) do t[i] = json_object(r, cols) end
  return "[" .. table.concat(t, ",") .. "]"
end

-- Print rows (array of tables) with columns cols in one of the formats.
function M.print_rows(rows, cols, format, out)
  out = out or io.stdout
  if format == "json" then
    out:write(json_rows(rows, cols), "\n")
    return
  end
  if format == "csv" then
    local function q(s)
      if s:find('[,"\n\r]') then return '"' .. s:gsub('"', '""') .. '"' end
      return s
    end
    local head = {}
    for i, c in ipairs(cols) do head[i] = q(c) end
    out:write(table.concat(head, ","), "\n")
    for _, r in ipairs(rows) do
      local line = {}
      for i, c in ipairs(cols) do line[i] = q(cell(r[c], true)) end
      out:write(table.concat(line, ","), "\n")
    end
    return
  end
  local widths = {}
  for i, c in ipairs(cols) do widths[i] = #c end
  local cells = {}
  for k, r in ipairs(rows) do
    cells[k] = {}
    for i, c in ipairs(cols) do
      local s = cell(r[c]):gsub("[\n\r]", " ")
      if format == "markdown" then s = s:gsub("|", "\\|") end
      cells[k][i] = s
      if #s > widths[i] then widths[i] = #s end
    end
  end
  local function line(vals, sep, edge)
    local parts = {}
    for i, v in ipairs(vals) do parts[i] = v .. string.rep(" ", widths[i] - #v) end
    out:write(edge, table.concat(parts, sep), edge == "" and "" or " |", "\n")
  end
  local rule = {}
  for i = 1, #cols do rule[i] = string.rep("-", widths[i]) end
  if format == "markdown" then
    line(cols, " | ", "| ")
    line(rule, " | ", "| ")
    for _, c in ipairs(cells) do line(c, " | ", "| ") end
  else
    line(cols, "  ", "")
    line(rule, "  ", "")
    for _, c in ipairs(cells) do line(c, "  ", "") end
  end
end

local formats = {table = true, csv = true, json = true, markdown = true}
local options = {
  ["--format"] = {key = "format", check = function(v)
    if formats[v] then return v end
    return nil, "must be table, csv, json or markdown, got '" .. v .. "'"
  end},
  ["--limit"] = {key = "limit", check = function(v)
    local n = tonumber(v)
    if n and n >= 1 and n == math.floor(n) and n <= 2^53 then return n end
    return nil, "expects a positive integer, got '" .. v .. "'"
  end},
}

local function columns_of(rows, preferred)
  if preferred then return preferred end
  local cols, seen = {}, {}
  for _, r in ipairs(rows) do
    for k in pairs(r) do if not seen[k] then seen[k] = true; cols[#cols + 1] = k end end
  end
  table.sort(cols)
  return cols
end

local usage = {
  runs = "usage: vsalab runs [--db PATH] [--format table|csv|json|markdown] [--limit N]",
  show = "usage: vsalab show [--db PATH] [--format ...] RUN",
  query = "usage: vsalab query [--db PATH] [--format ...] \"SQL\" [values...]",
}
local about = {
  runs = "the latest N runs (default 50) of the DB, opened read-only",
  show = "a run's environment, args and context, then its rows; RUN: an id, latest,\n"
    .. "latest~N or a revision prefix; --format table, csv (rows only), json or markdown",
  query = "one read-only SQL statement, ? values bound in order; --format table, csv,\n"
    .. "json or markdown",
}

local function main(argv)
  local cmd = table.remove(argv, 1)
  local o, rest = cli.parse(cmd, argv, {options = options, usage = usage[cmd] or "",
    about = about[cmd]})
  if not o then return rest end
  o.format, o.rest = o.format or "table", rest
  -- runs takes no positional argument: name the one given (an unknown
  -- option lands here too, since query values may start with '-'), before
  -- the DB is opened.
  -- --limit counts runs: a query or show would ignore it silently.
  if cmd ~= "runs" and o.limit then
    cli.fail(cmd, "--limit applies to runs only (a query says LIMIT in its SQL)\n" .. (usage[cmd] or ""))
    return 2
  end
  if cmd == "runs" and #rest > 0 then
    local what = rest[1]:sub(1, 1) == "-" and "unknown option '" or "unexpected argument '"
    cli.fail(cmd, what .. rest[1] .. "'\n" .. usage.runs)
    return 2
  end
  local db = cli.open_db(cmd, o.db)
  if not db then return 2 end
  local function fail(msg, code) db:close(); io.stderr:write("vsalab ", cmd, ": ", msg, "\n"); return code or 2 end
  if cmd == "runs" then
    local cols = {"id", "status", "started_at", "ended_at", "script", "args", "git_rev", "gpu_name", "rows"}
    local rows
    if require("vsalab.shard").has_sweeps(db) then
      -- The shards of one sweep are one logical run: one line, its first
      -- id, the worst status, every row; `sweep` and `shards` say which.
      rows = db:q([[SELECT min(r.id) AS id,
          CASE WHEN sum(r.status = 'failed') > 0 THEN 'failed'
               WHEN sum(r.status = 'interrupted') > 0 THEN 'interrupted'
               WHEN sum(r.status = 'running') > 0 THEN 'running' ELSE 'finished' END AS status,
          min(r.started_at) AS started_at,
          CASE WHEN sum(r.ended_at IS NULL) > 0 THEN NULL ELSE max(r.ended_at) END AS ended_at,
          min(r.script) AS script, min(r.args) AS args, min(r.git_rev) AS git_rev, min(r.gpu_name) AS gpu_name,
          sum((SELECT count(*) FROM result WHERE run_id = r.id)) AS rows,
          r.sweep_id AS sweep,
          CASE WHEN r.sweep_id IS NULL THEN NULL
               ELSE count(*) || '/' || coalesce(max(r.shard_count), count(*)) END AS shards
        FROM run r GROUP BY coalesce(r.sweep_id, 'run:' || r.id) ORDER BY max(r.id) DESC LIMIT ?]],
        tonumber(o.limit or 50))
      cols[#cols + 1], cols[#cols + 2] = "sweep", "shards"
    else
      rows = db:q([[SELECT r.id, r.status, r.started_at, r.ended_at, r.script, r.args, r.git_rev,
          r.gpu_name, (SELECT count(*) FROM result WHERE run_id = r.id) AS rows
        FROM run r ORDER BY r.id DESC LIMIT ?]], tonumber(o.limit or 50))
    end
    -- args: the script's arguments as they were typed, one line (the
    -- column holds them as a JSON list: json gives that list, as `show`
    -- does, and csv keeps its text).
    if o.format == "json" then
      for _, r in ipairs(rows) do
        local okj, list = pcall(json.decode, r.args or "[]")
        if okj and type(list) == "table" then r.args = list end
      end
    end
    if o.format == "table" or o.format == "markdown" then
      for _, r in ipairs(rows) do
        local okj, list = pcall(json.decode, r.args or "[]")
        if okj and type(list) == "table" then
          -- vsalab writes strings only; another writer's null (nil here:
          -- a hole that ended ipairs and broke concat) or nested value
          -- shows as its JSON.
          local words = {}
          for i = 1, table.maxn(list) do
            local v = list[i]
            if v == nil then v = "null"
            elseif type(v) == "table" then
              local oke, text = pcall(json.encode, v)
              v = oke and text or tostring(v)
            else v = tostring(v) end
            words[i] = (v == "" or v:find("[^%w%%+,./:=@_%-]")) and ("'" .. v:gsub("'", "'\\''") .. "'") or v
          end
          r.args = table.concat(words, " ")
        end
      end
    end
    M.print_rows(rows, cols, o.format)
  elseif cmd == "show" then
    if #o.rest ~= 1 then
      return fail(string.format("expected one RUN (an id, latest, latest~N or a revision prefix), got %s\n%s",
        #o.rest == 0 and "none" or (#o.rest .. ": '" .. table.concat(o.rest, "', '") .. "'"), usage.show))
    end
    local okr, id = pcall(require("vsalab.compare").resolve, db, o.rest[1])
    if not okr then return fail(tostring(id)) end
    local runq = db:q("SELECT * FROM run WHERE id = ?", id)
    local run = runq[1]
    if o.format == "table" or o.format == "markdown" then
      local has_gpu = require("vsalab.run").has_gpu(run.gpu_name)
      local gpu = has_gpu and string.format("%s (cc %s, %s SMs), driver %s", run.gpu_name,
        tostring(run.gpu_cc), tostring(run.sm_count), tostring(run.driver_version))
        or ("no GPU" .. (run.gpu_name and (" (" .. run.gpu_name .. ")") or ""))
      local head = {
        string.format("run %d  %s  %s  %s → %s", run.id, run.status, tostring(run.script),
          tostring(run.started_at), tostring(run.ended_at or "-")),
        string.format("%s, CUDA runtime %s, rev %s, seed %s", gpu,
          tostring(run.runtime_version), tostring(run.git_rev), tostring(run.seed)),
        -- A run without --context has none (json: null): print nothing for it.
        string.format("args %s%s", tostring(run.args or "[]"),
          run.context and (", context " .. tostring(run.context)) or ""),
      }
      if run.error then head[#head + 1] = "error: " .. run.error:gsub("\n.*", "") end
      if o.format == "table" then
        for i, l in ipairs(head) do print((i > 1 and "  " or "") .. l) end
      else
        -- Markdown (pasted into an issue) keeps the environment too: one
        -- list item a line, code spans so nothing in it is read as markup,
        -- then a blank line before the pipe table.
        for _, l in ipairs(head) do print("- `" .. l:gsub("`", "'") .. "`") end
        print("")
      end
    end
    -- lists: 'random' or 'vsa:ℓ'; sharing: the lists' pair sharing
    -- (vsalab.list_sharing), both from the row's extra.
    -- throttled: timed while a power or thermal limit held the clocks down
    -- (a column since schema version 2; a read-only older file lacks it).
    local thr = #db:q("SELECT 1 FROM pragma_table_info('result') WHERE name = 'throttled'") > 0
      and "throttled, " or ""
    -- block: the block size (64 for rows from before the axis); layout:
    -- a column since schema version 5 (a read-only older file reads bhsd).
    local lay = #db:q("SELECT 1 FROM pragma_table_info('result') WHERE name = 'layout'") > 0
      and "layout" or "'bhsd'"
    local rows = db:q([[SELECT id, experiment, kernel, B, H, Sq, D, coalesce(block, 64) AS block,
        ]] .. lay .. [[ AS layout, density, topk, ragged, ]]
      .. require("vsalab.compare").lists_sql .. [[ AS lists,
        CASE WHEN json_valid(extra) THEN json_extract(extra, '$.sharing') END AS sharing, mode,
        samples, ms_median, tflops, ]] .. thr .. [[passed, worst_output, worst_rel_l2, note
        FROM result_summary WHERE run_id = ? ORDER BY id]], id)
    if o.format == "json" then
      -- The run's context too (what the table form prints above the rows):
      -- every run column, its JSON-text columns as JSON values (those an
      -- older schema has).
      local has, sel = {}, {}
      for _, c in ipairs(runq.columns) do has[c] = true end
      for _, c in ipairs{"args", "context", "devices"} do
        if has[c] then sel[#sel + 1] = string.format("CASE WHEN json_valid(%s) THEN json(%s) END AS %s", c, c, c) end
      end
      local raw = db:q("SELECT " .. table.concat(sel, ", ") .. " FROM run WHERE id = ?", id)[1]
      local f = {}
      for _, c in ipairs(runq.columns) do
        local v = raw[c] or json.encode(run[c] == nil and json.null or run[c])
        f[#f + 1] = json.encode(c) .. ":" .. v
      end
      io.stdout:write('{"run":{', table.concat(f, ","), '},"rows":', json_rows(rows, rows.columns), "}\n")
    else
      M.print_rows(rows, rows.columns, o.format)
    end
  elseif cmd == "query" then
    if #o.rest < 1 then return fail(usage.query) end
    local sql = table.remove(o.rest, 1)
    -- Nothing to run (a shell variable that expanded to ''): say so, not
    -- a blank line and exit 0.
    if not sql:find("%S") then return fail("the SQL is empty") end
    local vals = {}
    -- A value binds as a number only when written as a plain integer
    -- ('3', '-2', '0'; no leading zero, below 2^53) or a decimal with digits
    -- on both sides of the point ('0.5', '1.0', '-0.0',
    -- '0.30000000000000004', as csv output writes them). Anything else
    -- stays text as typed: '0123', '0x10', '1e3' (a revision prefix can
    -- look like it), '.5', ' 5', 'nan', 'inf'.
    for i, v in ipairs(o.rest) do
      local n = tonumber(v)
      local int = v:match("^%-?[1-9]%d*$") or v == "0" or v == "-0"
      if n and int and math.abs(n) < 2 ^ 53 then
        vals[i] = n
      elseif n and v:match("^%-?%d+%.%d+$") and n > -math.huge and n < math.huge then
        vals[i] = {real = n} -- REAL, as SQLite reads the literal: 1.0 / 2 is 0.5
      else
        vals[i] = v
      end
    end
    -- Lua passes at most a few thousand values to a call; SQLite binds
    -- ?1..?32766: beyond 999 a statement is not what anyone typed.
    if #vals > 999 then return fail(string.format("at most 999 values, got %d", #vals)) end
    local okq, rows = pcall(db.q, db, sql, unpack(vals))
    -- Only ';' or comments: SQLite prepared no statement (a statement's
    -- result always has its column list, empty or not).
    if okq and not rows.columns then
      return fail("the SQL has no statement (only ';' or comments)")
    end
    if not okq then
      local msg = tostring(rows)
      -- The values given or a second statement: the command line's fault,
      -- not SQLite's (a usage error, exit 2); what SQLite refuses exits 1.
      local more = msg:match("^db:q runs one statement; (found more after it.*)$")
      local mine = msg:match("^db:q: (the SQL takes .*)$") or (more and "one statement a query; " .. more)
      if mine then return fail(mine, 2) end
      -- Damage found only when a statement reads the page: the same exit 2
      -- as damage found on opening the file.
      -- One line, as the damage found on opening reads (not the SQL again).
      local sqlite_says = msg:match("database disk image is malformed") or msg:match("file is not a database")
      if sqlite_says then
        local path = msg:match("db '([^']*)'") or o.db or "?"
        return fail(string.format("db '%s': the database file is corrupt (%s)", path, sqlite_says), 2)
      end
      -- A first query guesses names: say which tables this DB has.
      if msg:find("no such table", 1, true) then
        local okt, names = pcall(db.q, db, "SELECT group_concat(name, ', ') AS n FROM (SELECT name FROM "
          .. "sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite%' ORDER BY type, name)")
        local have = okt and names[1] and names[1].n
        msg = msg .. " (" .. (have and ("this DB has: " .. have) or "this DB has no tables")
          .. "; docs/db.md has the schema)"
      end
      return fail(msg, 1)
    end
    M.print_rows(rows, rows.columns or columns_of(rows), o.format)
  else
    return fail("unknown command")
  end
  db:close()
  return 0
end

-- An interrupt that lands while rows are printed (not inside SQLite, which
-- says it itself) reads as one line, as everywhere else, not a traceback;
-- the host turns a Ctrl-C into exit 130.
function M.main(argv)
  local cmd = argv[1]
  local ok, rc = pcall(main, argv)
  if ok then return rc end
  local msg = tostring(rc)
  local stop = msg:match("interrupted![^\n]*")
  -- Not an interrupt, or stdout's reader gone (the host stops quietly
  -- then, with 141): the host's own handling.
  if not stop or stop:find("SIGPIPE", 1, true) then error(rc, 0) end
  io.stderr:write("vsalab ", tostring(cmd), ": ", stop, "\n")
  return 1
end

return M
