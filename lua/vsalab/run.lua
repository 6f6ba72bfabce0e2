-- The run row: opened on first use, closed by the host when the script ends.
--
-- vsalab.run() opens the results DB (vsalab.context.db_path, from --db) and
-- begins a run row capturing the environment: GPU, capability, SM count,
-- driver and runtime, host, pid, project revision, script, args, seed. Each
-- vsalab.log(row) commits one result row at once, so a run that dies keeps
-- every finished row (its status stays 'running', ended_at NULL). The host
-- calls vsalab.run_finish(status, err) after the script: 'finished',
-- 'failed' or 'interrupted'. Scripts that never log open no DB.
local core = require "vsalab.core"
local json = require "vsalab.json"

local M = {}
local state = nil -- {db=, id=}
local closed = false -- the run was closed: a later log must not begin another
-- src/storage/db.c's busy timeout, and how long a measured row and the run's close
-- wait for another writer's lock instead.
local BUSY_MS, LOCK_WAIT_MS = 5000, 60000

local function context()
  local v = package.loaded.vsalab
  return (v and v.context) or {}
end

-- vsalab run --check of a script that is not an experiment (no
-- experiment.run to plan its points): its arguments were read by the time
-- it builds a problem, times something or logs a row, so it stops there,
-- exit 0. Run whole it would measure where slurm-sweep.sh checks it (the
-- login node) and write a run into that directory's results.db.
function M.check_stop(what)
  local ctx = context()
  if not ctx.check then return end
  local name = (tostring(ctx.script or "script"):match("([^/]+)$") or "script"):gsub("%.lua$", "")
  io.stderr:write(name, ": --check: the arguments check out (stopped at its first ", what,
    "); nothing was run\n")
  io.stderr:flush()
  os.exit(0)
end

-- Under `vsalab run --devices` this process is a worker of a coordinator
-- (lua/vsalab/devices.lua), which set VSALAB_WORKER_FD (its socket),
-- VSALAB_WORKER_RUN (the run row it began) and VSALAB_WORKER_GPU,
-- _GPU_NAME, _GPU_UUID (the GPU it gave this process). Returns that, or nil.
local worker_info
function M.worker()
  if worker_info == nil then
    local fd = tonumber(os.getenv("VSALAB_WORKER_FD") or "")
    worker_info = fd and {fd = fd, run_id = tonumber(os.getenv("VSALAB_WORKER_RUN") or ""),
      gpu_index = tonumber(os.getenv("VSALAB_WORKER_GPU") or ""),
      gpu_name = os.getenv("VSALAB_WORKER_GPU_NAME"),
      gpu_uuid = os.getenv("VSALAB_WORKER_GPU_UUID")} or false
  end
  return worker_info or nil
end

-- The GPU that this process measures on, as result columns: a worker's
-- GPU, else the --device ordinal's name and UUID when CUDA works here
-- ({} without CUDA).
local gpu_cols
function M.gpu()
  if gpu_cols then return gpu_cols end
  local w = M.worker()
  if w then
    gpu_cols = {gpu_index = w.gpu_index, gpu_name = w.gpu_name, gpu_uuid = w.gpu_uuid}
  else
    gpu_cols = {}
    local ok, avail = pcall(core.cuda_available)
    if ok and avail then
      local ok2, d = pcall(core.device_info)
      if ok2 then gpu_cols = {gpu_index = d.index, gpu_name = d.name, gpu_uuid = d.uuid} end
    end
  end
  return gpu_cols
end

-- The environment of this run, as run-table columns.
function M.environment()
  local ctx = context()
  local env = {
    script = ctx.script, args = json.encode(ctx.args or {}),
    seed = ctx.seed, host = ctx.host, pid = ctx.pid,
    git_rev = core.git_rev, vsalab_version = core.version,
    runtime_version = core.runtime_version(),
    device_index = ctx.device,
    cuda_visible_devices = os.getenv("CUDA_VISIBLE_DEVICES"),
    nvcc_flags = core.nvcc_flags,
    dirty = (core.git_rev or ""):match("%-dirty$") and 1 or 0,
  }
  -- --context pairs, plus the --timing mode asked for (rows say what ran).
  local pairs_ = {}
  for k, v in pairs(ctx.pairs or {}) do pairs_[k] = v end
  if ctx.timing and pairs_.timing == nil then pairs_.timing = ctx.timing end
  if next(pairs_) then env.context = json.encode(pairs_) end
  -- Shards of one sweep share its id (lua/vsalab/shard.lua).
  env.sweep_id = require("vsalab.shard").sweep_id(ctx)
  if ctx.shard then env.shard_index, env.shard_count = ctx.shard.index, ctx.shard.count end
  local ok, avail = pcall(core.cuda_available)
  if ok and avail then
    local d = core.device_info()
    env.gpu_name, env.gpu_cc, env.sm_count = d.name, d.cc, d.sm_count
    env.driver_version = d.driver
  else
    -- No GPU: the rows were timed on this CPU; `runs` says which.
    env.gpu_name = "cpu: " .. M.cpu_model()
  end
  return env
end

-- This host's CPU model (/proc/cpuinfo's "model name", else its
-- "Hardware" or "CPU part" line, else "unknown").
function M.cpu_model()
  local f = io.open("/proc/cpuinfo")
  local text = f and f:read("*a") or ""
  if f then f:close() end
  for _, key in ipairs{"model name", "Hardware", "CPU part"} do
    local v = text:match("\n" .. key .. "%s*:%s*([^\n]-)%s*\n") or text:match("^" .. key .. "%s*:%s*([^\n]-)%s*\n")
    if v and v ~= "" then return (v:gsub("%s+", " ")) end
  end
  return "unknown"
end

-- Whether a run's gpu_name names a GPU (not nil, not "cpu: <model>").
function M.has_gpu(gpu_name)
  return type(gpu_name) == "string" and gpu_name:sub(1, 5) ~= "cpu: "
end

-- --resume's RUN as the other commands name a run (an id, latest,
-- latest~N, a revision prefix): its id, or an error saying what the DB has.
local function resume_id(db, ref, path)
  local compare = require "vsalab.compare"
  if type(ref) == "number" or ref:match("^%d+$") then
    if db:q("SELECT 1 FROM run WHERE id = ?", tonumber(ref))[1] then return tonumber(ref) end
    error("--resume: no run " .. ref .. " in " .. path .. " (" .. compare.runs_hint(db) .. ")", 0)
  end
  local ok, id = pcall(compare.resolve, db, ref)
  if not ok then error("--resume: " .. tostring(id), 0) end
  return id
end

-- Why run row r (id, status, pid, host) cannot be resumed by this
-- process, or nil: it is running here, its process alive. Two writers
-- would measure the same points twice.
function M.still_running(r, ctx)
  if r.status == "running" and r.host == ctx.host and r.pid and r.pid ~= ctx.pid then
    local alive = io.open("/proc/" .. tostring(r.pid) .. "/stat")
    if alive then
      alive:close()
      return string.format("--resume: run %d is still running (pid %d)", r.id, r.pid)
    end
  end
  return nil
end

-- --resume RUN, before the script starts (the host calls this): the run
-- must exist and have run the same script with the same arguments; its
-- seed and --timing mode are taken over, so the points it still lacks are
-- built from the inputs its rows were (each point's seed derives from the
-- run seed) and timed the same way. A --seed or --timing that differs
-- from the run's is refused, as are other arguments.
function M.adopt_resume()
  local ctx = context()
  if not ctx.resume then return end
  local path = ctx.db_path or "results.db"
  local okdb, db = pcall(core.db_open, path, {readonly = true})
  if not okdb then error("--resume: " .. tostring(db):gsub("^[^:\n]*%.lua:%d+: ", ""), 0) end
  local ok, r = pcall(resume_id, db, ctx.resume, path)
  if ok then
    ctx.resume = r
    -- (sweep columns since schema 3; an older file read as it is lacks them)
    local sweeps = require("vsalab.shard").has_sweeps(db)
      and "sweep_id, shard_index, shard_count" or "NULL AS sweep_id"
    ok, r = pcall(db.q, db, [[SELECT id, script, seed, args, status, pid, host, ]] .. sweeps .. [[,
      json_extract(context, '$.timing') AS timing FROM run WHERE id = ?]], ctx.resume)
  end
  db:close()
  if not ok then error(r, 0) end
  r = r[1]
  local busy = M.still_running(r, ctx)
  if busy then error(busy, 0) end
  -- The same script: by file when the recorded path still names one from
  -- here, else by name.
  if r.script and ctx.script then
    local recorded = io.open(r.script)
    local same
    if recorded then
      recorded:close()
      same = core.same_file(r.script, ctx.script)
    else
      same = r.script:match("[^/]+$") == ctx.script:match("[^/]+$")
    end
    if not same then
      error(string.format("--resume: run %d ran %s, not %s", r.id, r.script, ctx.script), 0)
    end
  end
  if r.seed then
    if ctx.seed_given and ctx.seed ~= r.seed then
      error(string.format("--resume: run %d used --seed %d, not %d (leave --seed out to take the run's)",
        r.id, r.seed, ctx.seed), 0)
    end
    ctx.seed = r.seed
  end
  local args = json.encode(ctx.args or {})
  if r.args and args ~= r.args then
    error(string.format("--resume: run %d ran with the script arguments %s, not %s (give the same)",
      r.id, r.args, args), 0)
  end
  if ctx.timing and ctx.timing ~= (r.timing or "hot") then
    error(string.format("--resume: run %d timed %s, not %s (leave --timing out to take the run's)",
      r.id, r.timing or "hot (the default)", ctx.timing), 0)
  end
  ctx.timing = ctx.timing or r.timing
  -- A shard's run holds its slice only: resumed with another slice (or
  -- none) it took the other shards' points too, which the merge then holds
  -- twice in one logical run. Its slice is taken over like its seed.
  local here = ctx.shard
  if r.shard_count then
    local theirs = string.format("%d/%d", r.shard_index, r.shard_count)
    if here and (here.index ~= r.shard_index or here.count ~= r.shard_count) then
      error(string.format("--resume: run %d is shard %s of sweep '%s', not %d/%d (leave --shard out to take the run's)",
        r.id, theirs, tostring(r.sweep_id), here.index, here.count), 0)
    end
    ctx.shard = {index = r.shard_index, count = r.shard_count}
  elseif here then
    error(string.format("--resume: run %d is not a shard: resume it without --shard", r.id), 0)
  end
  if ctx.sweep_id and ctx.sweep_id ~= r.sweep_id then
    error(string.format("--resume: run %d belongs to sweep %s, not '%s' (leave --sweep-id out to take the run's)",
      r.id, r.sweep_id and ("'" .. r.sweep_id .. "'") or "none", ctx.sweep_id), 0)
  end
  ctx.sweep_id = ctx.sweep_id or r.sweep_id
end

-- The rest of M.current once the DB is open: the run row this process
-- writes to (a worker's, a resumed one, or a new one).
local function begin(db, ctx, path, extra)
  local id
  local w = M.worker()
  if w then
    -- A worker logs into the run its coordinator began, and never ends it.
    if not (w.run_id and db:q("SELECT id FROM run WHERE id = ?", w.run_id)[1]) then
      db:close()
      error("worker: no run " .. tostring(w.run_id) .. " in " .. path, 0)
    end
    state = {db = db, id = w.run_id, path = path, worker = true}
    return state
  end
  if ctx.resume then
    -- --resume RUN (checked by adopt_resume): the same run row goes on;
    -- experiments skip what it has.
    -- (The REPL's --resume comes here unresolved.)
    local okr, rid = pcall(resume_id, db, ctx.resume, path)
    if not okr then
      db:close()
      error(rid, 0)
    end
    local r = db:q([[SELECT id, status, pid, host, ended_at,
      (SELECT count(*) FROM result WHERE run_id = run.id) AS rows FROM run WHERE id = ?]], rid)[1]
    -- Claimed for this process (its pid and host, which a later --resume
    -- checks) only if no other resume claimed it since it was read: the
    -- row kept the first process's pid, so a second --resume started while
    -- one ran measured the same points again.
    local busy, claimed = M.still_running(r, ctx), 0
    -- state first: finish() must close the row whatever interrupts below
    -- (claiming: only if the row is this process's by then). prior: how
    -- the run ended before, kept when this pass adds no row (counted in
    -- the DB: under --devices the workers log them).
    state = {db = db, id = r.id, path = path, resumed = true, claiming = true,
      prior = {status = r.status, ended_at = r.ended_at, rows = r.rows}}
    if not busy then
      local _, n = db:q([[UPDATE run SET status = 'running', ended_at = NULL, error = NULL,
        pid = ?, host = ? WHERE id = ? AND status IS ? AND pid IS ? AND host IS ?]],
        ctx.pid, ctx.host, r.id, r.status, r.pid, r.host)
      claimed = n
    end
    if busy or claimed ~= 1 then
      state = nil
      db:close()
      require("vsalab.usage").error(busy or string.format(
        "--resume: run %d was resumed by another process as this one started", r.id))
    end
    state.claiming = nil
    id = r.id
  else
    local env = M.environment()
    for k, v in pairs(extra or {}) do env[k] = v or nil end
    -- A sweep id this DB already holds (--sweep-id reused for another
    -- sweep, a slice measured twice): the runs would read as one logical
    -- run (`runs` said "shards 4/3"), as merge refuses them.
    if env.sweep_id and require("vsalab.shard").has_sweeps(db) then
      local name = function(p) return tostring(p or ""):match("[^/]*$") end
      for _, o in ipairs(db:q([[SELECT id, script, seed, args, shard_count, shard_index FROM run
          WHERE sweep_id = ? ORDER BY id]], env.sweep_id)) do
        local why = require("vsalab.shard").conflict(o, env)
        if not why and name(o.script) ~= name(env.script) then
          why = string.format("script %s, not %s", name(env.script), name(o.script))
        end
        if why then
          db:close()
          require("vsalab.usage").error(string.format("sweep %s: %s already holds run %d of it, and this "
            .. "run would have %s: a sweep's shards are measured alike, one run per slice (give another "
            .. "--sweep-id or --db%s)", env.sweep_id, path, o.id, why,
            why:find("one slice", 1, true) and string.format("; --resume %d finishes that slice", o.id) or ""))
        end
      end
    end
    -- A signal's hook can fire as begin_run returns, after its commit and
    -- before `id` is set: finish() then asks db:run_id() for the row.
    state = {db = db, path = path, resumed = false}
    id = db:begin_run(env)
    state.id = id
    -- The run began with the script, not at its first row.
    if ctx.started_at then db:q("UPDATE run SET started_at = ? WHERE id = ?", ctx.started_at, id) end
  end
  return state
end

-- The run of this process: begun on first use (extra: run columns to set
-- on the new row, false for NULL), or the coordinator's under --devices.
function M.current(extra)
  if state and not state.id then
    -- Interrupted as begin_run returned: the row it began, if any.
    state.id = state.db:run_id()
    if not state.id then pcall(state.db.close, state.db); state = nil end
  end
  if state then return state end
  M.check_stop("vsalab.log or vsalab.run")
  -- A finalizer run when the state closes (or code after run_finish)
  -- would begin a second run row that nothing ever closes.
  if closed then error("vsalab.log: this invocation's run is already closed", 0) end
  local ctx = context()
  local path = ctx.db_path or "results.db"
  -- A --db that cannot be opened is the user's to fix: a usage error.
  local ok, db = pcall(core.db_open, path)
  if not ok then
    -- The C layer's hint (readonly=true) is for Lua's vsalab.db_open; here
    -- the command line asked for a run, which must write its rows.
    require("vsalab.usage").error((tostring(db):gsub("; open it with readonly=true to read it",
      "; a run writes its rows there (runs, show and query can read it as it is)")))
  end
  -- Damage found past the header (a malformed page the first INSERT
  -- reads) is the user's to fix too, as `runs` and `show` report it.
  local okb, r = pcall(begin, db, ctx, path, extra)
  if okb then return r end
  local msg = tostring(r)
  if type(r) == "string" and (msg:find("malformed", 1, true) or msg:find("not a database", 1, true)) then
    if state and state.db == db then state = nil end
    pcall(db.close, db)
    -- Without the Lua position and the statement: one line a user can act on.
    msg = msg:gsub("^[%w_./]+%.lua:%d+: ", ""):gsub(" in: .*$", "")
    require("vsalab.usage").error("run: " .. path .. " is damaged: " .. msg)
  end
  error(r, 0)
end

-- {[point_hash] = {[kernel] = true}} of the rows the current run already
-- holds (empty for a new run): what --resume skips. experiment: that
-- experiment's rows only (a script that runs two experiments over the same
-- points has the same hashes in both: the second's were taken as done).
function M.measured(experiment)
  local r = M.current()
  local done = {}
  if not r.resumed then return done end
  for _, row in ipairs(r.db:q([[SELECT point_hash, kernel FROM result WHERE run_id = ?1
      AND point_hash IS NOT NULL AND (?2 IS NULL OR experiment = ?2)]], r.id, experiment)) do
    done[row.point_hash] = done[row.point_hash] or {}
    done[row.point_hash][row.kernel] = true
  end
  return done
end

-- Keys compare() and check_outputs() add that are not result_error columns.
local internal = {tol = true, diff2 = true, ref2 = true, x2 = true, n = true,
  nonfinite_x = true, nonfinite_ref = true, cosine = true}

-- Commit one result row (a table of result columns plus errors={...}).
function M.log(row)
  if type(row) ~= "table" then error("vsalab.log: expected a table of result columns", 2) end
  local r = M.current()
  local t = {}
  for k, v in pairs(row) do t[k] = v end
  -- The row goes to this run: another id would be overwritten unsaid.
  if t.run_id ~= nil and t.run_id ~= r.id then
    error(string.format("vsalab.log: field 'run_id' is %s, but rows go to this run (%d); leave it out",
      type(t.run_id) == "string" and string.format("%q", t.run_id) or tostring(t.run_id), r.id), 2)
  end
  t.run_id = r.id
  -- A block size no list, kernel or report knows would read as a point.
  if t.block ~= nil then
    local blocks = require "vsalab.blocks"
    if type(t.block) ~= "number" then
      error("vsalab.log: field 'block' must be a number, got " .. type(t.block), 2)
    end
    if not blocks.supported(t.block) then
      error(string.format("vsalab.log: field 'block' is %s, not a block size vsalab takes (%s)",
        tostring(t.block), blocks.text()), 2)
    end
  end
  -- The GPU that measured it, unless the row names one (a coordinator
  -- logging a worker's lost point does).
  if t.gpu_index == nil and t.gpu_uuid == nil then
    for k, v in pairs(M.gpu()) do t[k] = v end
  end
  -- A failed check voids the speed figure: never store TFLOPS of a wrong output.
  if t.passed == false or t.passed == 0 then t.tflops = nil end
  if type(t.extra) == "table" then
    local okx, text = pcall(json.encode, t.extra)
    if not okx then error("vsalab.log: field 'extra': " .. tostring(text), 2) end
    t.extra = text
  elseif type(t.extra) == "string" then
    -- JSON text, or the DB's CHECK refuses it as if the disk had failed.
    local okd = pcall(json.decode, t.extra)
    if not okd then error("vsalab.log: field 'extra' must be a table or JSON text, got '" .. t.extra:sub(1, 40) .. "'", 2) end
  end
  if t.errors ~= nil then
    if type(t.errors) ~= "table" then error("vsalab.log: field 'errors' must be a table", 2) end
    local errs = {}
    for name, e in pairs(t.errors) do
      if type(e) ~= "table" then
        error("vsalab.log: errors." .. tostring(name) .. " must be a table", 2)
      end
      errs[name] = {}
      -- Unknown keys go through, so the DB layer rejects typos by name.
      for k, v in pairs(e) do if not internal[k] then errs[name][k] = v end end
    end
    t.errors = errs
  end
  -- The DB layer names itself (db:log: field 'x' ...); the caller called vsalab.log.
  local ok, id = pcall(r.db.log, r.db, t)
  if not ok and tostring(id):find("database is locked", 1, true) then
    -- Another writer held the lock past the 5 s busy timeout (a merge into
    -- this DB, a sqlite3 session): a measured row is worth the minute the
    -- close waits too, rather than being lost with the run.
    pcall(r.db.q, r.db, "PRAGMA busy_timeout = " .. LOCK_WAIT_MS)
    ok, id = pcall(r.db.log, r.db, t)
    pcall(r.db.q, r.db, "PRAGMA busy_timeout = " .. BUSY_MS)
  end
  if not ok then
    local msg = tostring(id)
    -- Not the caller's row but the DB that failed (a full disk, damage:
    -- "db 'PATH': ..."), and no interrupt raised mid-call: the measurement
    -- goes to stderr, so it is not lost with the run.
    if msg:find("^db '") and not msg:find("interrupted!", 1, true) and not msg:find("point timeout!", 1, true) then
      local okj, text = pcall(json.encode, t)
      io.stderr:write("vsalab.log: this row could not be written to ", r.path, "; here it is: ",
        okj and text or "(not encodable)", "\n")
    end
    error((msg:gsub("^db:log: ", "vsalab.log: ")), 2)
  end
  return id
end

-- Close the run row. Another writer may hold the lock past the 5 s busy
-- timeout (a long transaction): the close waits up to a minute for it, then
-- tries twice more. If it still cannot be written (a full disk), the error
-- says which run stays 'running' and why, and how to close it by hand.
function M.finish(status, err)
  if not state then return end
  local s = state
  -- An interrupt reads the same wherever it landed ("interrupted!
  -- (SIGTERM)"): no source position (a script's or vsalab's own) and no
  -- traceback.
  if status == "interrupted" and type(err) == "string" then
    err = err:match("interrupted![^\n]*") or err
  end
  s.id = s.id or s.db:run_id()
  if s.claiming then
    -- Interrupted around --resume's claim: the row is ours only if it took.
    local okq, rows = pcall(s.db.q, s.db, "SELECT pid FROM run WHERE id = ?", s.id)
    if not (okq and rows[1] and rows[1].pid == context().pid) then s.id = nil end
  end
  local ok, why = true, nil
  if not s.worker and s.id then
    -- What the interrupt note says (M.interrupted_note).
    local okc, c = pcall(s.db.q, s.db, "SELECT count(*) AS n FROM result WHERE run_id = ?", s.id)
    M.ended = {id = s.id, status = status, rows = okc and c[1] and c[1].n or nil, path = s.path}
    pcall(s.db.q, s.db, "PRAGMA busy_timeout = " .. LOCK_WAIT_MS)
    for _ = 1, 3 do
      ok, why = pcall(s.db.end_run, s.db, s.id, status, err)
      if ok then break end
    end
    -- A resume that measured nothing and ends as the run had ended leaves
    -- its end time alone: the run's recorded duration is the measuring's.
    local p = s.prior
    if ok and p and p.status == status and p.ended_at then
      pcall(s.db.q, s.db, [[UPDATE run SET ended_at = ?1 WHERE id = ?2
        AND (SELECT count(*) FROM result WHERE run_id = ?2) = ?3]], p.ended_at, s.id, p.rows)
    end
  end
  pcall(s.db.close, s.db)
  state = nil
  closed = true
  if not ok then
    error(string.format("run %d could not be closed as '%s' (%s): it stays 'running' in %s; "
      .. "close it later with: sqlite3 %s \"UPDATE run SET status = '%s', ended_at = "
      .. "strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now') WHERE id = %d\"", s.id, status,
      tostring(why):gsub("^[^:\n]*%.lua:%d+: ", ""), s.path, s.path, status, s.id), 0)
  end
end

-- A word of a command line as a POSIX shell reads it back: quoted unless
-- it is made of safe characters only.
local function shell_word(w)
  if w ~= "" and not w:find("[^%w%%+,./:=@_%-]") then return w end
  return "'" .. w:gsub("'", "'\\''") .. "'"
end
M.shell_word = shell_word

-- After the host closed an interrupted run: "run N interrupted after K
-- rows; continue with `vsalab run ... --resume N`", the command line this
-- process was started with (vsalab.context.argv0 and .command: the words
-- after `run`) with --resume N before the script in place of any --resume
-- it had. nil when no run row was closed 'interrupted' by this process.
function M.interrupted_note()
  local e = M.ended
  if not (e and e.status == "interrupted" and e.id) then return nil end
  local ctx = context()
  local words = {shell_word(ctx.argv0 or "vsalab"), "run"}
  local cmd = ctx.command or {}
  local i, placed = 1, false
  while i <= #cmd do
    local w = cmd[i]
    if w == "--resume" then
      i = i + 2
    else
      -- The first word that is no option (nor an option's value) is the script.
      if not placed and (w:sub(1, 1) ~= "-" or w == "--") then
        words[#words + 1] = "--resume"
        words[#words + 1] = tostring(e.id)
        placed = true
        for j = i, #cmd do words[#words + 1] = shell_word(cmd[j]) end
        break
      end
      words[#words + 1] = shell_word(w)
      if w ~= "--check" then
        i = i + 1
        if cmd[i] then words[#words + 1] = shell_word(cmd[i]) end
      end
      i = i + 1
    end
  end
  if not placed then
    words[#words + 1] = "--resume"
    words[#words + 1] = tostring(e.id)
  end
  return string.format("run %d interrupted after %s row%s; continue with `%s`", e.id,
    e.rows and tostring(e.rows) or "its", e.rows == 1 and "" or "s", table.concat(words, " "))
end

-- After the host closed a finished run: where its rows went, "run N
-- finished: K rows in PATH; see them with `build/vsalab show N --db PATH`"
-- (the program as started). nil
-- when this process closed no run row as 'finished' (a script that logged
-- nothing, a --devices worker).
function M.finished_note()
  local e = M.ended
  if not (e and e.status == "finished" and e.id and e.path) then return nil end
  local db = e.path == "results.db" and "" or " --db " .. shell_word(e.path)
  -- The program as it was started (build/vsalab), as the resume note says it.
  return string.format("run %d finished: %s row%s in %s; see them with `%s show %d%s`",
    e.id, e.rows and tostring(e.rows) or "its", e.rows == 1 and "" or "s", e.path,
    shell_word(context().argv0 or "vsalab"), e.id, db)
end

-- os.exit from a script would skip the host's closing of the run row: close
-- it first ('finished' for a success code, 'failed' otherwise).
local real_exit = os.exit
os.exit = function(code, close)
  local ok = code == nil or code == true or code == 0
  pcall(M.finish, ok and "finished" or "failed",
    not ok and ("os.exit(" .. tostring(code) .. ")") or nil)
  return real_exit(code, close)
end

return M
