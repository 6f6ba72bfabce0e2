-- vsalab merge OUT.db IN.db...: combine results DBs (the shards of a
-- sweep) into one.
--
-- Every run of every IN is copied into OUT with its result and error rows,
-- under a new id. Provenance is kept: run.source_db (the IN file's absolute
-- path), run.source_run_id (its id there) and run.merged_at, beside what
-- the run already records (host, shard_index/shard_count, sweep_id) and
-- each row's GPU. A run already in OUT (same run.uid, a unique id given at
-- insert) is skipped, so merging the same file again adds nothing; a run
-- merged before keeps its first provenance. The IN files are opened
-- read-only and must have OUT's schema version (this vsalab's): another
-- version is refused before anything is written. The whole merge is one
-- transaction: if anything fails, OUT is left as it was (and removed if
-- the merge created it).
--
-- Exit status: 0 merged, 1 the merge failed (OUT unchanged), 2 usage: a
-- missing IN, OUT named as an input, a schema version mismatch, a damaged file.
local core = require "vsalab.core"
local paths = require "vsalab.paths"

local M = {}

local usage = "usage: vsalab merge OUT.db IN.db..."

local function fail(msg, code)
  io.stderr:write("vsalab merge: ", msg, "\n")
  return code or 2
end

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end

local function version(db)
  return db:q("PRAGMA user_version")[1].user_version
end

local function columns(db, tbl)
  local cols = {}
  for _, r in ipairs(db:q("SELECT name FROM pragma_table_info(?) ORDER BY cid", tbl)) do
    cols[#cols + 1] = r.name
  end
  return cols
end

-- INSERT INTO tbl (cols) VALUES (?, ...) for the columns in `cols`.
local function inserter(db, tbl, cols)
  local marks = {}
  for i = 1, #cols do marks[i] = "?" end
  local sql = string.format("INSERT INTO %s (%s) VALUES (%s)", tbl, table.concat(cols, ", "),
    table.concat(marks, ", "))
  return function(row)
    local vals = {}
    for i, c in ipairs(cols) do vals[i] = row[c] end
    db:q(sql, unpack(vals, 1, #cols))
    return db:q("SELECT last_insert_rowid() AS id")[1].id
  end
end

-- Copy the runs of src (opened read-only, path in_path) into out, inside
-- the caller's transaction. Returns runs added, rows added, runs skipped.
local function merge_one(out, src, in_path, ins)
  local added, rows, skipped = 0, 0, 0
  local now = out:q("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS t")[1].t
  for _, r in ipairs(src:q("SELECT * FROM run ORDER BY id")) do
    local have = out:q("SELECT id, status, (SELECT count(*) FROM result WHERE run_id = run.id) AS n "
      .. "FROM run WHERE uid = ?", r.uid)[1]
    if have then
      -- The same run merged before: skipped when nothing changed since; a
      -- run that went on (resumed, finished) would lose its new rows.
      local n = src:q("SELECT count(*) AS n FROM result WHERE run_id = ?", r.id)[1].n
      if n ~= have.n or r.status ~= have.status then
        error(string.format("%s: run %d is already in OUT as run %d with %d rows (%s), but has %d "
          .. "rows (%s) now: merge into a new OUT file", in_path, r.id, have.id, have.n,
          tostring(have.status), n, tostring(r.status)), 0)
      end
      skipped = skipped + 1
    else
      -- The shards of one sweep are one measurement: the same seed, script
      -- arguments and shard count, and one run per slice. Anything else
      -- would read as one complete logical run that is not.
      if r.sweep_id then
        for _, o in ipairs(out:q("SELECT id, seed, args, shard_count, shard_index FROM run "
            .. "WHERE sweep_id = ? AND uid IS NOT ?", r.sweep_id, r.uid)) do
          local why = require("vsalab.shard").conflict(o, r)
          if why then
            error(string.format("%s: run %d of sweep %s has %s, unlike run %d already in OUT: "
              .. "a sweep's shards must be measured alike (merge them into separate files)",
              in_path, r.id, r.sweep_id, why, o.id), 0)
          end
        end
      end
      if r.status == "running" then
        io.stderr:write(string.format("vsalab merge: %s: run %d is still 'running' (alive elsewhere, or it died): merged as it is\n",
          in_path, r.id))
      end
      local src_id = r.id
      r.source_db = r.source_db or paths.absolute(in_path)
      r.source_run_id = r.source_run_id or src_id
      r.merged_at = r.merged_at or now
      local new_run = ins.run(r)
      for _, row in ipairs(src:q("SELECT * FROM result WHERE run_id = ? ORDER BY id", src_id)) do
        local src_row = row.id
        row.run_id = new_run
        local new_row = ins.result(row)
        for _, e in ipairs(src:q("SELECT * FROM result_error WHERE result_id = ?", src_row)) do
          e.result_id = new_row
          ins.error(e)
        end
        rows = rows + 1
      end
      added = added + 1
    end
  end
  return added, rows, skipped
end

function M.main(argv)
  if argv[1] == "--help" or argv[1] == "-h" then
    print(usage .. "\ncopies every run of the INs, with its rows, into OUT in one transaction;\n"
      .. "a run already in OUT (same uid) is skipped")
    return 0
  end
  if #argv < 2 or argv[1]:sub(1, 1) == "-" then return fail(usage) end
  local out_path = argv[1]
  if out_path == ":memory:" then return fail("OUT :memory: would keep nothing: name a file") end
  local inputs = {}
  for i = 2, #argv do
    local p = argv[i]
    if not exists(p) then return fail("no file " .. p) end
    if exists(out_path) and core.same_file(p, out_path) then
      return fail(p .. " is OUT itself: name another output file")
    end
    inputs[#inputs + 1] = p
  end
  -- Every input readable, a vsalab DB, and of this vsalab's schema version,
  -- before OUT is touched.
  local srcs = {}
  local function close_all()
    for _, s in ipairs(srcs) do s.db:close() end
  end
  local want = core.db_schema_version
  for _, p in ipairs(inputs) do
    -- Finished shards, often on a shared filesystem: read as they stand,
    -- making no -shm or -wal file beside them (SQLite's shared memory and
    -- locks are unreliable there), unless a writer's log is pending.
    local ok, db = pcall(core.db_open, p, {snapshot = true})
    if not ok then close_all(); return fail(tostring(db)) end
    srcs[#srcs + 1] = {db = db, path = p}
    local v = version(db)
    if v ~= want then
      close_all()
      return fail(string.format("%s has schema version %d, this vsalab writes version %d: "
        .. "merge only files written by the same vsalab version (open an older file once with "
        .. "this vsalab, e.g. `vsalab run --db %s` of any script that logs, to upgrade it)", p, v, want, p))
    end
  end
  local created = not exists(out_path)
  local ok_open, out = pcall(core.db_open, out_path)
  if not ok_open then close_all(); return fail(tostring(out)) end
  local ins = {
    run = inserter(out, "run", (function()
      local c = {}
      for _, n in ipairs(columns(out, "run")) do if n ~= "id" then c[#c + 1] = n end end
      return c
    end)()),
    result = inserter(out, "result", (function()
      local c = {}
      for _, n in ipairs(columns(out, "result")) do if n ~= "id" then c[#c + 1] = n end end
      return c
    end)()),
    error = inserter(out, "result_error", columns(out, "result_error")),
  }
  local lines = {}
  local ok, err = pcall(function()
    out:q("BEGIN IMMEDIATE")
    for _, s in ipairs(srcs) do
      local added, rows, skipped = merge_one(out, s.db, s.path, ins)
      lines[#lines + 1] = string.format("  %s: %d run%s (%d rows) added, %d already in %s", s.path,
        added, added == 1 and "" or "s", rows, skipped, out_path)
    end
    out:q("COMMIT")
  end)
  close_all()
  if not ok then
    pcall(out.q, out, "ROLLBACK")
    out:close()
    if created then
      for _, suffix in ipairs{"", "-wal", "-shm", "-journal"} do os.remove(out_path .. suffix) end
    end
    -- A file SQLite finds damaged mid-read is the user's to mend, as at
    -- open (exit 2); the message names the file, not a line of merge.lua.
    local msg = tostring(err):gsub("\nstack traceback:.*", ""):gsub("^[^:\n]*%.lua:%d+: ", "")
    local damaged = msg:find("malformed", 1, true) or msg:find("not a database", 1, true)
    return fail("failed, " .. out_path .. (created and " not created" or " unchanged") .. ": "
      .. msg, damaged and 2 or 1)
  end
  out:close()
  print(string.format("merged %d file%s into %s", #srcs, #srcs == 1 and "" or "s", out_path))
  for _, l in ipairs(lines) do print(l) end
  return 0
end

return M
