-- vsalab runs / show / query on a DB built by the smoke experiment.
local H = require "helpers"

describe("result queries", function()
  local dir, db = H.smoke_db("q.db")
  -- A DB of two smoke runs (for compare), built on first use.
  local two
  local function two_run_db()
    if not two then two = select(2, H.smoke_db("q2.db", 2)) end
    return two
  end
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("lists runs in every format", function()
    local rc, out = H.vsalab("runs --db " .. db)
    assert.equal(0, rc)
    -- Read as it stands: no -shm or -wal left beside a DB no one writes.
    assert.is_nil(vsalab.file_type(db .. "-shm"))
    assert.is_nil(vsalab.file_type(db .. "-wal"))
    assert.truthy(out:match("finished"))
    assert.truthy(out:match("smoke%.lua"))
    rc, out = H.vsalab("runs --db " .. db .. " --format csv")
    assert.truthy(out:match("^id,status,started_at"))
    rc, out = H.vsalab("runs --db " .. db .. " --format json")
    assert.truthy(out:match('^%[{"id":1,"status":"finished","started_at"'), out)
    rc, out = H.vsalab("runs --db " .. db .. " --format markdown")
    assert.truthy(out:match("^| id | status"))
  end)

  it("lists each run's arguments and, without a GPU, its CPU", function()
    local adb = dir .. "/args.db"
    assert.equal(0, (H.vsalab("run --db " .. adb .. " " .. H.root .. "/experiments/smoke.lua -a 'density=[0.5]' kernels=reference")))
    local rc, out = H.vsalab("runs --db " .. adb)
    assert.equal(0, rc)
    assert.truthy(out:match("^id +status +started_at +ended_at +script +args +git_rev +gpu_name +rows"), out)
    -- As typed (quoted where a shell needs it), on one line.
    assert.truthy(out:find(" -a 'density=[0.5]' kernels=reference ", 1, true), out)
    -- The CPU that timed the rows, as /proc/cpuinfo names it.
    local f = io.open("/proc/cpuinfo")
    local model = f and f:read("*a"):match("\nmodel name%s*:%s*([^\n]-)%s*\n")
    if f then f:close() end
    assert.truthy(out:find("cpu: " .. (model or ""), 1, true), out)
    local _, js = H.vsalab("runs --db " .. adb .. " --format json")
    -- A JSON list, as `show --format json` gives it (it was the list's text).
    assert.truthy(js:find('"args":["-a","density=[0.5]","kernels=reference"]', 1, true), js)
    assert.truthy(js:find('"gpu_name":"cpu: ', 1, true), js)
  end)

  it("lists args another writer stored with nulls or nested values, as their JSON", function()
    -- [null, "a"] made `vsalab runs` end in a traceback (a hole in the
    -- decoded list broke table.concat); nested values read 'table: 0x...'.
    local adb = dir .. "/oddargs.db"
    assert.equal(0, (H.vsalab("run --db " .. adb .. " " .. H.root .. "/experiments/smoke.lua -a 'density=[0.5]' kernels=reference")))
    local d = vsalab.db_open(adb)
    d:q([[UPDATE run SET args = '[null,"x y",[1,2],{"k":"v"},true]']])
    d:close()
    local rc, out, err = H.vsalab("runs --db " .. adb)
    assert.equal(0, rc, err)
    assert.truthy(out:find(" null 'x y' '[1,2]' '{\"k\":\"v\"}' true ", 1, true), out)
  end)

  it("says where it looked for a DB that is not there, and how to make one", function()
    local cwd = H.tmpdir()
    local rc, out, err = H.sh("cd " .. cwd .. " && " .. H.exe .. " runs")
    assert.equal(2, rc)
    assert.equal("", out)
    assert.truthy(err:find("vsalab runs: no results DB at " .. cwd .. "/results.db (the default: "
      .. "results.db in this directory); `vsalab run SCRIPT` writes one", 1, true), err)
    assert.truthy(err:find("--db PATH", 1, true), err)
    local rc2, _, err2 = H.vsalab("compare --db " .. cwd .. "/none.db 1 2")
    assert.equal(2, rc2)
    assert.truthy(err2:find("no results DB at " .. cwd .. "/none.db (from --db)", 1, true), err2)
    os.execute("rm -rf " .. cwd)
  end)

  it("leaves no -wal or -shm beside a DB after any read-only command", function()
    -- Each command on its own copy (a WAL-mode file, as runs write it).
    local out = H.tmpdir()
    -- compare's floors so wide that host timings of a busy machine can
    -- only read SAME: its exit status is about the DB, not the host.
    for i, cmd in ipairs{"runs", "show latest", "query 'SELECT count(*) FROM result'",
                         "compare --floor-ms-host 1e9 1 2", "report -o " .. out .. "/r.html"} do
      local c = dir .. "/ro" .. i .. ".db"
      -- compare sets two runs' rows side by side: a DB with two.
      os.execute("cp " .. (cmd:find("^compare") and two_run_db() or db) .. " " .. c)
      local rc, _, err = H.vsalab(cmd .. " --db " .. c)
      assert.equal(0, rc, cmd .. ": " .. err)
      for _, ext in ipairs{"-wal", "-shm", "-journal"} do
        assert.is_nil(vsalab.file_type(c .. ext), cmd .. " left " .. ext)
      end
    end
    os.execute("rm -rf " .. out)
  end)

  -- A read-only filesystem (an archive's snapshot, a mount of finished
  -- results): a tmpfs remounted read-only in a user and mount namespace of
  -- this test alone. Hosts that allow no user namespaces skip it.
  local rofs = H.sh("unshare -rm sh -c 'd=$(mktemp -d) && mount -t tmpfs none $d && "
    .. "mount -o remount,ro $d && ! touch $d/x'") == 0
  local on_rofs = rofs and it or pending
  on_rofs("reads a DB on a read-only filesystem, through a writer's log when one is left", function()
    local src = H.tmpdir()
    -- plain: the file alone; logged: a writer killed with its WAL not yet
    -- checkpointed (its -wal and -shm left), whose change only the log holds.
    os.execute("cp " .. db .. " " .. src .. "/plain.db && cp " .. db .. " " .. src .. "/logged.db")
    H.sh("printf 'PRAGMA wal_autocheckpoint=0;\\nUPDATE run SET script = \\047from the log\\047;\\n"
      .. ".shell kill -9 $PPID\\n' | sqlite3 " .. src .. "/logged.db")
    assert.equal(0, (H.sh("test -s " .. src .. "/logged.db-wal")))
    H.write(src .. "/ro.sh", string.format([[
      set -e
      m=$(mktemp -d)
      mount -t tmpfs none "$m"
      cp %s/plain.db %s/logged.db %s/logged.db-wal %s/logged.db-shm "$m"/
      cp %s/logged.db "$m"/nolog.db && cp %s/logged.db-wal "$m"/nolog.db-wal
      mount -o remount,ro "$m"
      cd /
      for f in plain logged nolog; do
        echo "== $f"
        %s query --format csv --db "$m/$f.db" "SELECT script FROM run" 2>&1 || echo "exit $?"
      done
      ls "$m"
    ]], src, src, src, src, src, src, H.exe))
    local rc, out, err = H.sh("unshare -rm sh " .. src .. "/ro.sh")
    assert.equal(0, rc, out .. err)
    local function part(name) return out:match("== " .. name .. "\n(.-)\n==") or out:match("== " .. name .. "\n(.*)") end
    assert.truthy(part("plain"):find("^script\n[^\n]*smoke%.lua$"), out)
    assert.equal("script\nfrom the log", part("logged"))
    -- A log without its -shm cannot be read there: said, exit 2.
    assert.truthy(part("nolog"):find("without write access to its directory or filesystem: "
      .. "another writer's log %(.-/nolog%.db%-wal%) is pending.*exit 2"), out)
    -- Nothing could be written, and nothing was needed.
    assert.truthy(out:find("\nlogged.db\nlogged.db%-shm\nlogged.db%-wal\nnolog.db\nnolog.db%-wal\nplain.db\n$"), out)
    os.execute("rm -rf " .. src)
  end)

  it("does not read a file a rollback-mode writer left mid-transaction as it stands", function()
    -- A writer killed inside a transaction that spilled pages into the
    -- file: its hot journal holds the committed pages. Read as it stands,
    -- the file showed rows gone (or 'the database file is corrupt').
    local hot = dir .. "/hot.db"
    os.execute("cp " .. db .. " " .. hot)
    assert.equal(0, (H.sh("sqlite3 " .. hot .. " 'PRAGMA journal_mode=DELETE'")))
    H.sh("printf 'PRAGMA cache_size=1;\\nBEGIN;\\nDELETE FROM result;\\nCREATE TABLE junk(x);\\n"
      .. "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000) "
      .. "INSERT INTO junk SELECT randomblob(1000) FROM n;\\n.shell kill -9 $PPID\\n' | sqlite3 " .. hot)
    assert.equal("file", vsalab.file_type(hot .. "-journal"))
    for _, cmd in ipairs{"runs", "show 1", "query 'SELECT count(*) FROM result'"} do
      local rc, out, err = H.vsalab(cmd .. " --db " .. hot)
      assert.equal(2, rc, cmd .. ": " .. out .. err)
      assert.truthy(err:find("left its rollback journal (" .. hot .. "-journal)", 1, true), err)
    end
    -- Rolled back by a connection that may write, it reads in full.
    assert.equal(0, (H.sh("sqlite3 " .. hot .. " 'PRAGMA user_version'")))
    local rc, out, err = H.vsalab("query --format csv --db " .. hot .. " 'SELECT count(*) AS n FROM result'")
    assert.equal(0, rc, err)
    assert.equal("n\n8\n", out)
  end)

  it("shows a run's environment and rows", function()
    local rc, out = H.vsalab("show --db " .. db .. " latest")
    assert.equal(0, rc)
    assert.truthy(out:match("run 1  finished"))
    assert.truthy(out:match("reference"))
    -- What was asked (args, context) and how each row was timed.
    assert.truthy(out:find("  args [", 1, true), out)
    assert.falsy(out:find("context", 1, true), out) -- none given: none shown (json: null)
    assert.truthy(out:find(" mode ", 1, true) and out:find(" hot ", 1, true), out)
    local ctx = dir .. "/ctx.db"
    assert.equal(0, (H.vsalab("run --db " .. ctx .. " --context gpu_note=spare " .. H.root
      .. "/experiments/smoke.lua -a density=[0.5]")))
    local _, out2 = H.vsalab("show --db " .. ctx .. " latest")
    assert.truthy(out2:find(', context {"gpu_note":"spare"}', 1, true), out2)
    -- markdown (for an issue) keeps the environment too, not only the rows
    -- (a new user's paste lost which GPU, revision and seed measured them).
    local rcm, md = H.vsalab("show --format markdown --db " .. ctx .. " latest")
    assert.equal(0, rcm)
    assert.truthy(md:find("^%- `run 1  finished  "), md)
    assert.truthy(md:find("\n%- `no GPU %(cpu: [^\n]*%), CUDA runtime [^\n]*, seed 1234`\n"), md)
    assert.truthy(md:find('\n- `args ["-a","density=[0.5]"], context {"gpu_note":"spare"}`\n\n| id | experiment', 1, true), md)
    assert.equal(2, (H.vsalab("show --db " .. db .. " 42")))
    for _, bad in ipairs{"show latest~99999999999999999999", "show 123456789012345678901",
                         "runs --limit 1.5", "runs --limit inf"} do
      local rc2, _, err = H.vsalab(bad .. " --db " .. db)
      assert.equal(2, rc2, bad)
      assert.falsy(err:find("datatype mismatch", 1, true), err)
    end
  end)

  it("shows which rows were timed under a power or thermal limit", function()
    local thr = dir .. "/thr.db"
    os.execute("cp " .. db .. " " .. thr)
    local w = vsalab.db_open(thr)
    local id = w:q("SELECT max(id) AS id FROM result WHERE kernel = 'reference'")[1].id
    w:q("UPDATE result SET throttled = 1 WHERE id = ?", id)
    w:close()
    local rc, out = H.vsalab("show --db " .. thr .. " --format json latest")
    assert.equal(0, rc)
    local rows = vsalab.json.decode(out).rows
    local seen = 0
    for _, r in ipairs(rows) do
      if r.id == id then assert.equal(1, r.throttled); seen = seen + 1
      else assert.is_true(r.throttled == nil or r.throttled == vsalab.json.null or r.throttled == 0) end
    end
    assert.equal(1, seen)
    local _, tab = H.vsalab("show --db " .. thr .. " latest")
    assert.truthy(tab:find(" throttled ", 1, true), tab)
  end)

  it("runs any read-only SQL with bound values", function()
    local rc, out = H.vsalab("query --db " .. db .. " \"SELECT count(*) AS n FROM result WHERE kernel = ?\" reference --format csv")
    assert.equal(0, rc)
    assert.equal("n\n4\n", out)
    rc = H.vsalab("query --db " .. db .. " \"DELETE FROM result\"")
    assert.equal(1, rc) -- read-only
    local d = vsalab.db_open(db, {readonly = true})
    assert.equal(8, #d:q("SELECT id FROM result"))
    d:close()
    -- VACUUM INTO writes a new file from a read-only DB: refused too.
    local copy = db .. ".copy"
    local rcv, _, errv = H.vsalab("query --db " .. db .. " \"VACUUM INTO '" .. copy .. "'\"")
    assert.equal(1, rcv, errv)
    assert.truthy(errv:find("open read-only and this statement writes", 1, true), errv)
    assert.is_nil(io.open(copy))
    assert.equal(1, (H.vsalab("query --db " .. db .. " \"SELEC nonsense\"")))
    -- Nothing to run, or an option of another command: exit 2, said.
    for _, q in ipairs{"\";\"", "\"-- c\"", "\"/* c */ ;\""} do
      local rcn, _, errn = H.vsalab("query --db " .. db .. " " .. q)
      assert.equal(2, rcn, q)
      assert.truthy(errn:find("the SQL has no statement", 1, true), errn)
    end
    -- --db=PATH is --db PATH (it was read as the SQL: a "--" comment).
    local rce, oute, erre = H.vsalab("query --db=" .. db .. " --format=csv \"SELECT 7 AS x\"")
    assert.equal(0, rce, erre)
    assert.equal("x\n7\n", oute)
    -- An INTEGER a double cannot hold prints exactly, in every format (JSON
    -- as a string: most readers would round a bare number).
    local big = "\"SELECT 9007199254740993 AS big, -9223372036854775808 AS low, 9007199254740992 AS edge\""
    local _, outb = H.vsalab("query --db " .. db .. " --format csv " .. big)
    assert.equal("big,low,edge\n9007199254740993,-9223372036854775808,9007199254740992\n", outb)
    _, outb = H.vsalab("query --db " .. db .. " --format json " .. big)
    assert.equal('[{"big":"9007199254740993","low":"-9223372036854775808","edge":9007199254740992}]\n', outb)
    _, outb = H.vsalab("query --db " .. db .. " " .. big)
    assert.truthy(outb:find("9007199254740993  -9223372036854775808  9007199254740992", 1, true), outb)
    -- A decimal binds as REAL, as SQLite reads the literal.
    local _, outd = H.vsalab("query --db " .. db .. " --format csv \"SELECT ?1 / 2 AS h\" 1.0")
    assert.equal("h\n0.5\n", outd)
    for _, q in ipairs{"\"/* -- */\"", "\"/* open\""} do
      assert.equal(2, (H.vsalab("query --db " .. db .. " " .. q)), q)
    end
    local rcl, _, errl = H.vsalab("query --db " .. db .. " --limit 3 \"SELECT 1\"")
    assert.equal(2, rcl, errl)
    assert.truthy(errl:find("--limit applies to runs only", 1, true), errl)
    -- EXPLAIN describes a statement that writes, without writing; a PRAGMA
    -- without a value reads, but a checkpoint acts.
    assert.equal(0, (H.vsalab("query --db " .. db .. " \"EXPLAIN DELETE FROM run\"")))
    assert.equal(0, (H.vsalab("query --db " .. db .. " \"PRAGMA journal_mode\"")))
    assert.equal(1, (H.vsalab("query --db " .. db .. " \"PRAGMA journal_mode = DELETE\"")))
    assert.equal(1, (H.vsalab("query --db " .. db .. " \"pragma WAL_CHECKPOINT\"")))
    -- "--" ends the options: a value may be "--db".
    local rcx, outx = H.vsalab("query --db " .. db .. " --format csv \"SELECT ?1 AS a\" -- --db")
    assert.equal(0, rcx, outx)
    assert.equal("a\n--db\n", outx)
    -- A guessed table name gets the real ones.
    local rct, _, errt = H.vsalab("query --db " .. db .. " \"SELECT * FROM results\"")
    assert.equal(1, rct, errt)
    assert.truthy(errt:find("no such table: results", 1, true)
      and errt:find("(this DB has: result, result_error, run, result_summary;", 1, true), errt)
    -- Values bind as typed: only a number written as one binds as a number.
    local rcb, outb = H.vsalab("query --db " .. db .. " --format csv \"SELECT typeof(?1) AS a, ?1 AS a1, "
      .. "typeof(?2) AS b, typeof(?3) AS c, typeof(?4) AS d, typeof(?5) AS e, ?6 AS f, typeof(?7) AS g, "
      .. "typeof(?8) AS h, typeof(?9) AS i, ?10 < 1 AS j\" 0123 3 0.5 0x10 1e3 -7 1.0 nan inf 0.30000000000000004")
    assert.equal(0, rcb, outb)
    assert.equal("a,a1,b,c,d,e,f,g,h,i,j\ntext,0123,integer,real,text,text,-7,real,text,text,1\n", outb)
    -- One statement; a trailing comment is fine, a second statement is not.
    local rc2, out2 = H.vsalab("query --db " .. db .. " \"SELECT 7 AS x; -- why\" --format csv")
    assert.equal(0, rc2)
    assert.equal("x\n7\n", out2)
    -- A second statement, or values that do not fit the placeholders: the
    -- command line's fault (exit 2, named), not SQLite's (exit 1).
    local rc3, _, err3 = H.vsalab("query --db " .. db .. " \"SELECT 1; SELECT 2\"")
    assert.equal(2, rc3)
    assert.truthy(err3:find("vsalab query: one statement a query; found more after it: 'SELECT 2'", 1, true), err3)
    local rc4, _, err4 = H.vsalab("query --db " .. db .. " \"SELECT ?1 + ?2\" 1")
    assert.equal(2, rc4)
    assert.truthy(err4:find("vsalab query: the SQL takes 2 value(s) to bind, 1 given", 1, true), err4)
    assert.equal(2, (H.vsalab("query --db " .. db .. " \"SELECT ?\" 1 2")))
    -- Empty SQL (a shell variable that expanded to nothing) is no statement.
    local rc5, out5, err5 = H.vsalab("query --db " .. db .. " ' '")
    assert.equal(2, rc5, out5)
    assert.truthy(err5:find("vsalab query: the SQL is empty", 1, true), err5)
    assert.equal(2, (H.vsalab("query --db " .. db .. " --format xml \"SELECT 1\"")))
    assert.equal(2, (H.vsalab("runs --db " .. dir .. "/none.db")))
  end)

  it("writes valid JSON whatever bytes a column holds", function()
    local jdb = dir .. "/bytes.db"
    assert.equal(0, os.execute("cp " .. db .. " " .. jdb))
    local d = vsalab.db_open(jdb)
    -- A stray byte, a surrogate, an overlong '/', a truncated sequence, and
    -- a well-formed 4-byte one that must stay as it is.
    d:q("UPDATE result SET note = ? WHERE id = 1", "a\255b \237\160\128 \192\175 \226\130 ok \240\159\152\128")
    d:close()
    local rc, out, err = H.vsalab("query --db " .. jdb .. " \"SELECT note FROM result WHERE id = 1\" --format json")
    assert.equal(0, rc, err)
    local R = "\239\191\189"
    assert.truthy(out:find('"a' .. R .. 'b ' .. R:rep(3) .. ' ' .. R:rep(2) .. ' ' .. R:rep(2) .. ' ok \240\159\152\128"', 1, true), out)
  end)

  it("exits 2 for damage first seen when a statement reads the page", function()
    local cdb = dir .. "/damaged.db"
    assert.equal(0, os.execute("cp " .. db .. " " .. cdb))
    local d = vsalab.db_open(cdb, {readonly = true})
    local root = d:q("SELECT rootpage FROM sqlite_master WHERE name = 'result'")[1].rootpage
    local psize = d:q("PRAGMA page_size")[1].page_size
    d:close()
    -- The header opens fine; the table's first page is garbage (an
    -- impossible page type first, random bytes after).
    local f = assert(io.open(cdb, "r+b"))
    f:seek("set", (root - 1) * psize)
    local junk = {"\255"}
    math.randomseed(os.time())
    for i = 2, psize do junk[i] = string.char(math.random(0, 255)) end
    f:write(table.concat(junk))
    f:close()
    local rc, _, err = H.vsalab("query --db " .. cdb .. " \"SELECT * FROM result\"")
    assert.equal(2, rc, err)
    assert.truthy(err:find("vsalab query: db '" .. cdb .. "': the database file is corrupt (database disk "
      .. "image is malformed)\n", 1, true), err)
    assert.falsy(err:find("SELECT", 1, true), err)
    -- SQLite's other "malformed" (a function's argument) is the statement's
    -- fault: exit 1, not a damaged file.
    local rc2, _, err2 = H.vsalab("query --db " .. db .. " \"SELECT json_extract('{', '$.a')\"")
    assert.equal(1, rc2, err2)
    assert.falsy(err2:find("corrupt", 1, true), err2)
  end)

  it("stops a statement that runs for ever at the first signal", function()
    local errf = H.tmpdir() .. "/err"
    -- Counts an endless recursive CTE: only the signal ends it.
    local job = H.spawn(H.exe .. " query --db " .. db .. " 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
      .. "SELECT x + 1 FROM c) SELECT count(*) FROM c WHERE x < 0' 2>" .. errf)
    os.execute("sleep 0.5")
    os.execute("kill -INT " .. job.pid)
    local rc = job.wait("the query to stop after SIGINT", 60)
    local err = H.read(errf)
    assert.equal(130, rc, err) -- 128 + SIGINT, as a run stopped by Ctrl-C
    assert.truthy(err:find("vsalab query: interrupted", 1, true), err)
  end)

  it("takes a --db that reads as a URI as a file name, for run and runs alike", function()
    local cwd = H.tmpdir()
    local name = "file:u.db?mode=memory"
    assert.equal(0, (H.sh("cd " .. cwd .. " && " .. H.exe .. " run --db '" .. name .. "' "
      .. H.root .. "/experiments/smoke.lua -a 'density=[0.5]' >/dev/null 2>&1")))
    assert.equal("file", vsalab.file_type(cwd .. "/" .. name))
    local rc, out = H.sh("cd " .. cwd .. " && " .. H.exe .. " runs --format csv --db '" .. name .. "'")
    assert.equal(0, rc, out)
    assert.truthy(out:find("\n1,finished,", 1, true), out)
    os.execute("rm -rf " .. cwd)
  end)

  it("keeps every column when names repeat (a join's two ids)", function()
    local rc, out = H.vsalab("query --db " .. db .. " --format csv \"SELECT 1 AS x, 2 AS x, NULL AS y\"")
    assert.equal(0, rc)
    assert.equal("x,x (2),y\n1,2,\n", out)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT run.id, result.id FROM run JOIN result ON result.run_id = run.id ORDER BY result.id DESC LIMIT 1")
    assert.same({"id", "id (2)"}, rows.columns)
    assert.equal(8, rows[1]["id (2)"])
    d:close()
  end)

  it("reads a DB whose directory it cannot write (a teammate's results)", function()
    -- A directory this user may read but not write: as root (CI) that
    -- needs another user, so a copy of the binary runs as nobody.
    local ro = H.tmpdir()
    os.execute("cp " .. db .. " " .. ro .. "/t.db && cp " .. two_run_db() .. " " .. ro .. "/t2.db && cp "
      .. H.exe .. " " .. ro .. "/vsalab")
    H.write(ro .. "/log.lua", "vsalab.log{experiment = 'x', kernel = 'k'}\n")
    os.execute("chmod 644 " .. ro .. "/log.lua")
    local root = H.sh("test \"$(id -u)\" = 0") == 0
    os.execute("chmod 755 " .. ro .. " " .. ro .. "/vsalab && chmod 644 " .. ro .. "/t.db " .. ro .. "/t2.db")
    if not root then os.execute("chmod 555 " .. ro) end
    local as = root and "runuser -u nobody -- " or ""
    local function ro_vsalab(args)
      return H.sh("cd / && " .. as .. ro .. "/vsalab " .. args)
    end
    -- The directory really is read-only to that user.
    assert.is_not.equal(0, (H.sh(as .. "touch " .. ro .. "/probe")))
    for _, cmd in ipairs{"runs", "show latest", "query \"SELECT count(*) AS n FROM result\"",
                         "compare --floor-ms-host 1e9 1 2"} do
      local rc, out, err = ro_vsalab(cmd .. " --db " .. ro .. (cmd:find("^compare") and "/t2.db" or "/t.db"))
      assert.equal(0, rc, cmd .. ": " .. err)
      assert.truthy(#out > 0, cmd)
    end
    local _, out = ro_vsalab("query --format csv --db " .. ro .. "/t.db \"SELECT count(*) AS n FROM result\"")
    assert.equal("n\n8\n", out)
    -- A run there is refused as the command line's (it named the Lua
    -- option readonly=true as the way out).
    local rcr, _, errr = ro_vsalab("run --db " .. ro .. "/t.db " .. ro .. "/log.lua")
    assert.equal(2, rcr, errr)
    assert.truthy(errr:find("a run writes its rows there", 1, true), errr)
    assert.falsy(errr:find("readonly=true", 1, true), errr)
    -- A path with a leading "//" is a path, not a URI's host.
    local rc2, out2, err2 = ro_vsalab("query --format csv --db /" .. ro .. "/t.db \"SELECT count(*) AS n FROM result\"")
    assert.equal(0, rc2, err2)
    assert.equal("n\n8\n", out2)
    -- Another writer's log pending beside it: refused, saying why.
    os.execute("chmod 755 " .. ro .. " && head -c 64 /dev/urandom > " .. ro .. "/t.db-wal && chmod 644 " ..
      ro .. "/t.db-wal")
    if not root then os.execute("chmod 555 " .. ro) end
    local rc, _, err = ro_vsalab("runs --db " .. ro .. "/t.db")
    assert.equal(2, rc, err)
    assert.truthy(err:find("another writer's log (" .. ro .. "/t.db-wal) is pending", 1, true), err)
    -- Named through a symbolic link (another name, another directory): the
    -- log lies beside the file, and the link must not hide it.
    local links = H.tmpdir()
    os.execute("chmod 755 " .. links .. " && ln -s " .. ro .. "/t.db " .. links .. "/mine.db")
    rc, _, err = ro_vsalab("runs --db " .. links .. "/mine.db")
    assert.equal(2, rc, err)
    assert.truthy(err:find("another writer's log (" .. ro .. "/t.db-wal) is pending", 1, true), err)
    os.execute("rm -rf " .. links)
    os.execute("chmod 755 " .. ro .. " && rm -rf " .. ro)
  end)
end)
