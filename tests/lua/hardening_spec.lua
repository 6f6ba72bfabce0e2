-- What a breaker and a new user found, one test per finding:
-- crashes and lost runs first, then silent garbage, exit codes, messages.
-- Children run the real binary, so a crash is a failed exit status here.
local H = require "helpers"

local function script(dir, name, text)
  H.write(dir .. "/" .. name, text)
  return dir .. "/" .. name
end

-- A command that starts a process holding db's write lock for 7 s (past
-- the 5 s busy timeout); it creates DIR/held once it holds the lock.
local function lock_holder(dir, db)
  script(dir, "hold.lua", string.format([[
    local d = vsalab.db_open(%q)
    d:q("BEGIN IMMEDIATE")
    io.open(%q, "w"):close()
    os.execute("sleep 7")
    d:q("COMMIT")
    d:close()
  ]], db, dir .. "/held"))
  return H.exe .. " run " .. dir .. "/hold.lua &"
end

local function run_row(db, id)
  local d = vsalab.db_open(db, {readonly = true})
  local r = d:q("SELECT * FROM run WHERE id = ?", id or 1)[1]
  local n = d:q("SELECT count(*) AS n FROM result")[1].n
  d:close()
  return r, n
end

describe("crashes and lost runs", function()
  it("keeps tensor arguments alive when an options table frees one mid-call", function()
    local dir = H.tmpdir()
    -- q is 128 KiB+ (malloc maps it): a read after free faults.
    local s = script(dir, "uaf.lua", [[
      local p = vsalab.problem.build{H = 2, Sq = 1024, D = 64, topk = 2, seed = 1, device = 'cpu'}
      local o, lse = vsalab.forward_ref(p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs,
        setmetatable({}, {__index = function() p.q:free() end}))
      assert(p.q.freed and o.shape[3] == 1024)
      local p2 = vsalab.problem.build{H = 2, Sq = 1024, D = 64, topk = 2, seed = 2, device = 'cpu'}
      local dq = vsalab.backward_ref(p2.dO, p2.q, p2.k, p2.v, p2.o, p2.lse, p2.k2q_idx, p2.k2q_num,
        p2.vbs, setmetatable({}, {__index = function() p2.dO:free(); p2.k:free() end}))
      assert(dq.shape[3] == 1024)
      print("survived")
    ]])
    local rc, out, err = H.vsalab("run " .. s)
    assert(rc == 0 and out:match("survived"), "exit " .. tostring(rc) .. "\n" .. err)
    os.execute("rm -rf " .. dir)
  end)

  it("keeps tensor arguments alive when finalizers free them mid-call", function()
    local dir = H.tmpdir()
    local s = script(dir, "gc.lua", [[
      collectgarbage("setpause", 100)
      for i = 1, 60 do
        local p = vsalab.problem.build{H = 2, Sq = 1024, D = 64, topk = 2, seed = i, device = 'cpu'}
        for _ = 1, 20 do
          local u = newproxy(true)
          getmetatable(u).__gc = function()
            for _, k in ipairs{"dO", "q", "k", "v", "o", "lse", "vbs"} do
              if not p[k].freed then p[k]:free() end
            end
          end
        end
        pcall(vsalab.backward_ref, p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs)
      end
      print("survived")
    ]])
    local rc, out, err = H.vsalab("run " .. s)
    assert(rc == 0 and out:match("survived"), "exit " .. tostring(rc) .. "\n" .. err)
    os.execute("rm -rf " .. dir)
  end)

  it("returns the caller's out buffers themselves (the pins stay inside the call)", function()
    local p = vsalab.problem.build{H = 1, Sq = 128, D = 16, topk = 1, seed = H.seed(), device = "cpu"}
    local ki = vsalab.zeros(p.k2q_idx.shape, {dtype = "i32"})
    local kn = vsalab.zeros(p.k2q_num.shape, {dtype = "i32"})
    local a, b = vsalab.invert_indices(p.q2k_idx, p.q2k_num, p.nkv, {out = {ki, kn}})
    assert.is_true(rawequal(a, ki) and rawequal(b, kn))
    local outs = {vsalab.empty(p.q.shape, {dtype = "bf16"}), vsalab.empty(p.k.shape, {dtype = "bf16"}),
      vsalab.empty(p.v.shape, {dtype = "bf16"})}
    local dq, dk, dv = vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num,
      p.vbs, {out = outs})
    assert.is_true(rawequal(dq, outs[1]) and rawequal(dk, outs[2]) and rawequal(dv, outs[3]))
  end)

  it("lets the collector see host tensors: a loop of fresh 32 MiB tensors stays small", function()
    local dir = H.tmpdir()
    local s = script(dir, "rss.lua", [[
      for i = 1, 100 do local t = vsalab.zeros({2^23}) end
      for l in io.lines("/proc/self/status") do
        local v = l:match("^VmHWM:%s+(%d+)")
        if v then print("peak " .. math.floor(tonumber(v) / 1024)) end
      end
    ]])
    local rc, out, err = H.vsalab("run " .. s)
    assert(rc == 0, err)
    local peak = tonumber(out:match("peak (%d+)"))
    -- 100 x 32 MiB allocated; without the collector's help the peak is 3.2 GiB.
    assert(peak < 1024, "peak RSS " .. tostring(peak) .. " MiB")
    os.execute("rm -rf " .. dir)
  end)

  it("report -o on a full disk fails and leaves the earlier report as it was", function()
    local dir = H.tmpdir()
    local db = dir .. "/r.db"
    local d = vsalab.db_open(db)
    local id = d:begin_run{script = "x"}
    for i = 1, 300 do
      d:log{run_id = id, experiment = "e", kernel = "k", Sq = 64 * i, ms_median = i, tflops = i,
        note = string.rep("long note ", 20)}
    end
    d:end_run(id, "finished")
    d:close()
    local out = dir .. "/report.html"
    H.write(out, "<!DOCTYPE html><p>the earlier report</p>")
    -- A file size limit makes writes past 64 KiB fail (EFBIG), as a full
    -- disk would (the report is ~150 KiB; the DB's files stay below it).
    local rc, o, err = H.sh("cd " .. dir .. " && trap '' XFSZ; ulimit -f 64; " .. H.exe
      .. " report --db " .. db .. " -o " .. out)
    assert.equal(1, rc, o .. err)
    assert.truthy(err:match("could not write"), err)
    assert.falsy(o:match("wrote"))
    assert.equal("<!DOCTYPE html><p>the earlier report</p>", H.read(out))
    local _, left = H.sh("ls " .. dir)
    assert.falsy(left:match("tmp"), left)
    -- Without the limit it is replaced.
    assert.equal(0, (H.vsalab("report --db " .. db .. " -o " .. out)))
    os.execute("rm -rf " .. dir)
  end)

  it("report -o writes through a temporary name no one can plant a link at", function()
    local dir = H.tmpdir()
    local db = dir .. "/r.db"
    local d = vsalab.db_open(db)
    local id = d:begin_run{script = "x"}
    d:log{run_id = id, experiment = "e", kernel = "k", Sq = 64, ms_median = 1, tflops = 1}
    d:end_run(id, "finished")
    d:close()
    -- The name was OUT.tmp-PID: a link there (exec keeps the shell's pid)
    -- had the report written into its target.
    H.write(dir .. "/victim", "untouched")
    local rc, o, err = H.sh("cd " .. dir .. " && sh -c 'ln -s " .. dir .. "/victim " .. dir
      .. "/out.html.tmp-$$; exec " .. H.exe .. " report --db " .. db .. " -o " .. dir .. "/out.html'")
    assert.equal(0, rc, o .. err)
    assert.equal("untouched", H.read(dir .. "/victim"))
    assert.equal("file", vsalab.file_type(dir .. "/out.html"))
    os.execute("rm -rf " .. dir)
  end)

  it("prints a row it cannot write (a full disk) on stderr, so the measurement is not lost", function()
    local dir = H.tmpdir()
    local s = script(dir, "full.lua", [[
      for i = 1, 1000 do
        vsalab.log{experiment = 'full', kernel = 'k', B = i, note = string.rep('x', 2000)}
      end
    ]])
    -- A file size limit fails the DB's writes as a full disk would.
    local rc, _, err = H.sh("cd " .. dir .. " && trap '' XFSZ; ulimit -f 128; " .. H.exe
      .. " run --db " .. dir .. "/f.db " .. s)
    assert.equal(1, rc, err)
    local row = err:match("this row could not be written to [^;]+; here it is: (%b{})")
    assert.truthy(row, err)
    local t = vsalab.json.decode(row)
    assert.equal("full", t.experiment)
    -- It is the row the DB lacks: the next after the last one committed.
    local d = vsalab.db_open(dir .. "/f.db", {readonly = true})
    local last = d:q("SELECT max(B) AS b FROM result")[1].b or 0
    d:close()
    assert.equal(last + 1, t.B)
    os.execute("rm -rf " .. dir)
  end)

  it("closes the run 'interrupted' on SIGHUP and SIGUSR1, rows kept", function()
    local dir = H.tmpdir()
    for _, sig in ipairs{"HUP", "USR1"} do
      local db = dir .. "/" .. sig .. ".db"
      local s = script(dir, sig .. ".lua", string.format([[
        vsalab.log{experiment = 't', kernel = 'k'}
        os.execute("kill -%s " .. vsalab.context.pid)
        vsalab.log{experiment = 't', kernel = 'never'}
      ]], sig))
      local rc, _, err = H.vsalab("run --db " .. db .. " " .. s)
      assert.equal(1, rc, err)
      local r, n = run_row(db)
      assert.equal("interrupted", r.status)
      assert.truthy(r.error:match("SIG" .. sig), r.error)
      assert.equal(1, n)
    end
    os.execute("rm -rf " .. dir)
  end)

  it("stops quietly when stdout's reader goes away, the run closed 'interrupted'", function()
    local dir = H.tmpdir()
    local db = dir .. "/p.db"
    local s = script(dir, "pipe.lua", [[
      vsalab.log{experiment = 't', kernel = 'k'}
      for i = 1, 1e7 do print(string.rep("line ", 20) .. i) end
    ]])
    local rc, out, err = H.sh("bash -c 'set -o pipefail; " .. H.exe .. " run --db " .. db .. " " .. s
      .. " | head -1; echo status ${PIPESTATUS[0]}'")
    assert(rc ~= 0 or true)
    assert.truthy(out:match("status 141"), out .. err)
    assert.falsy(err:find("traceback", 1, true), err)
    local r, n = run_row(db)
    assert.equal("interrupted", r.status)
    assert.equal(1, n)
    -- A results command stops quietly too.
    local _, out2, err2 = H.sh("bash -c '" .. H.exe .. " query --db " .. db
      .. [[ "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) SELECT x FROM c"]]
      .. " | head -1; echo status ${PIPESTATUS[0]}'")
    assert.truthy(out2:match("status 141"), out2 .. err2)
    assert.equal("", err2)
    -- A reader that left before anything was written (an output small
    -- enough for the exit flush, `vsalab runs | true`): 141 too, not a
    -- silent 0 with the output lost. The pipe's read end is closed first,
    -- so this does not race.
    if os.execute("python3 -c '' 2>/dev/null") == 0 then
      H.write(dir .. "/closed.py", "import os, subprocess, sys\n"
        .. "r, w = os.pipe(); os.close(r)\n"
        .. "rc = subprocess.call(sys.argv[1:], stdout=w)\n"
        .. "print('status', rc if rc >= 0 else 128 - rc)\n")
      for _, cmd in ipairs{{"runs", "--db", db}, {"query", "--db", db, "SELECT 1"}} do
        local _, out3, err3 = H.sh("python3 " .. dir .. "/closed.py " .. H.exe .. " '"
          .. table.concat(cmd, "' '") .. "'")
        assert.truthy(out3:match("status 141"), cmd[1] .. ": " .. out3 .. err3)
        assert.equal("", err3)
      end
      -- A run whose table is printed at its end: the run is closed
      -- 'interrupted', not 'finished' with its output lost.
      local rdb = dir .. "/piped.db"
      local _, out4, err4 = H.sh("python3 " .. dir .. "/closed.py " .. H.exe .. " run --db " .. rdb .. " "
        .. H.root .. "/experiments/smoke.lua -a 'density=[0.5]'")
      assert.truthy(out4:match("status 141"), out4 .. err4)
      local d = vsalab.db_open(rdb, {readonly = true})
      local r = d:q("SELECT status, error FROM run")[1]
      assert.equal("interrupted", r.status)
      assert.equal("interrupted! (SIGPIPE: stdout closed)", r.error)
      d:close()
    end
    os.execute("rm -rf " .. dir)
  end)

  it("waits for another writer's lock to close the run", function()
    local dir = H.tmpdir()
    local db = dir .. "/l.db"
    -- The holder takes the write lock for 7 s (past the 5 s busy timeout)
    -- just as the script ends.
    local s = script(dir, "end.lua", string.format([[
      vsalab.log{experiment = 't', kernel = 'k'}
      os.execute(%q)
      while not io.open(%q) do os.execute("sleep 0.05") end
    ]], lock_holder(dir, db), dir .. "/held"))
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. s)
    assert(rc == 0, err)
    assert.equal("finished", (run_row(db)).status)
    os.execute("rm -rf " .. dir)
  end)

  it("stops a long C loop at an interrupt, and pcall cannot swallow it", function()
    local dir = H.tmpdir()
    local db = dir .. "/i.db"
    -- A 2^36-element fill takes minutes; the interrupt lands inside pcall.
    local s = script(dir, "long.lua", [[
      vsalab.log{experiment = 't', kernel = 'k'}
      local ok, e = pcall(function()
        -- (TERM: os.execute's system() ignores SIGINT while it waits)
        os.execute("kill -TERM " .. vsalab.context.pid)
        vsalab.zeros({1}):expand({2^36}):fill(1)
      end)
      print("swallowed: " .. tostring(e))
      vsalab.log{experiment = 't', kernel = 'after'}
    ]])
    -- The fill takes minutes (4 ns an element here: 275 s; 69 s at 1 ns),
    -- so a run that got into it unstopped is killed at 60 s: exit 137.
    local rc, out, err = H.sh("timeout -s KILL 60 " .. H.exe .. " run --db " .. db .. " " .. s)
    assert.equal(1, rc, err)
    assert.falsy(out:match("swallowed"), out)
    local r, n = run_row(db)
    assert.equal("interrupted", r.status)
    assert.equal(1, n)
    -- The C loop itself polls: a signal from outside stops it in seconds.
    -- The signal comes once the run is inside the fill: the script names
    -- its pid, and the test waits until the run has spent 0.3 s of CPU
    -- since (the fill's; a signal before it would be raised by the hook
    -- and prove nothing, one before the handler kills the run). A fill
    -- that did not poll runs on until timeout's KILL 30 s after the signal.
    local ready = dir .. "/pid"
    local s2 = script(dir, "long2.lua", string.format("local f = io.open(%q, 'w') f:write(vsalab.context.pid, '\\n') f:close()\n"
      .. "vsalab.zeros({1}):expand({2^36}):fill(1)\n", ready))
    local job = H.spawn("timeout --preserve-status -s INT -k 30 600 " .. H.exe .. " run " .. s2 .. " >/dev/null 2>"
      .. dir .. "/err")
    local pid = H.wait_until("the script's pid", function()
      local f = io.open(ready)
      local p = f and tonumber(f:read("*l"))
      if f then f:close() end
      return p
    end)
    local function cpu_ticks() -- utime + stime, in 1/100 s
      local st = H.read("/proc/" .. pid .. "/stat")
      local u, k = (st or ""):match("^%d+ %b() %S+" .. string.rep(" %S+", 10) .. " (%d+) (%d+)")
      return u and tonumber(u) + tonumber(k)
    end
    local t_ready = assert(cpu_ticks(), "the run ended before the fill")
    H.wait_until("0.3 s of the fill's CPU time", function() return (cpu_ticks() or math.huge) >= t_ready + 30 end)
    os.execute("kill -INT " .. job.pid)
    assert.equal(128 + 2, job.wait("the run to stop at SIGINT"))
    -- Said as an interrupt (the still-armed hook made it "error in error
    -- handling").
    local err2 = assert(H.read(dir .. "/err"))
    assert.truthy(err2:find("interrupted! (SIGINT)", 1, true), err2)
    assert.falsy(err2:find("error in error handling", 1, true), err2)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("silent garbage", function()
  it("refuses fills, comparisons and checks that would be meaningless", function()
    local t = vsalab.zeros({4})
    assert.truthy(H.err(function() t:fill_randn{seed = 1, std = 1e300} end):match("infinite samples"))
    assert.truthy(H.err(function() t:fill_randn{seed = 1, mean = 1e39} end):match("infinite samples"))
    local c = vsalab.compare(vsalab.full({4}, 1e300, {dtype = "f64"}), vsalab.full({4}, 1.25e300, {dtype = "f64"}))
    assert.equal(0, c.nonfinite)
    assert.near(0.2, c.rel_l2, 1e-12)
    assert.near(0.25e300, c.max_abs, 1e288)
    local e = vsalab.zeros({0})
    assert.truthy(H.err(vsalab.check_outputs, {dq = e}, {dq = e}):match("no elements"))
    local p = vsalab.problem.build{H = 1, Sq = 64, D = 16, topk = 1, seed = H.seed(), device = "cpu"}
    assert.truthy(H.err(vsalab.oracle, {q = p.q, k = p.k, v = p.v, dO = p.dO, q2k_idx = p.q2k_idx,
      q2k_num = p.q2k_num, variable_block_sizes = p.vbs, sm_scale = 1e300}):match("sm_scale"))
    local d = vsalab.db_open(":memory:")
    local id = d:begin_run{script = "x"}
    assert.truthy(H.err(function() d:log{run_id = id, experiment = "e", kernel = "k", B = -2^63} end):match("'B'"))
    d:close()
  end)

  it("refuses empty, holed and non-list id fields and a head dim of 0 in the oracle", function()
    local p = vsalab.problem.build{H = 2, Sq = 256, D = 16, topk = 1, seed = H.seed(), device = "cpu"}
    local function args(k, ids)
      local a = {q = p.q, k = p.k, v = p.v, dO = p.dO, q2k_idx = p.q2k_idx, q2k_num = p.q2k_num,
        variable_block_sizes = p.vbs}
      a[k] = ids
      return a
    end
    for _, k in ipairs{"bh", "q_blocks", "kv_blocks"} do
      -- {} would check nothing; {0, nil, 1} might read as {0}; a map is no list.
      for _, ids in ipairs{{}, {0, nil, 1}, {[2] = 1}, {0, x = 1}} do
        local e = H.err(vsalab.oracle, args(k, ids))
        assert.truthy(e:find("field '" .. k .. "' must be a non-empty list of ids", 1, true), e)
      end
      -- A proper list still works (the check is not a blanket refusal).
      local r = vsalab.oracle(args(k, {0, 1}))
      assert.equal("f64", r.dq.dtype)
    end
    local z = vsalab.zeros({1, 2, 256, 0}, {dtype = "bf16"})
    local e = H.err(vsalab.oracle, {q = z, k = z, v = z, dO = z, q2k_idx = p.q2k_idx,
      q2k_num = p.q2k_num, variable_block_sizes = p.vbs})
    assert.truthy(e:find("q: head dim D must be at least 1, got 0", 1, true), e)
    -- [B,H,S,D] tensors called as bshd: the message names the layout read.
    local a = args("bh", nil)
    a.layout = "bshd"
    e = H.err(vsalab.oracle, a)
    assert.truthy(e:find("q: sequence length 2 (dim 2, layout bshd [B,S,H,D]) is not a positive multiple of 64", 1, true), e)
  end)

  it("names an i64 count or list entry past 32 bits as itself, not as the saturated 2147483647", function()
    local p = vsalab.problem.build{H = 1, Sq = 256, D = 16, topk = 1, seed = H.seed(), device = "cpu"}
    local n64 = p.q2k_num:to_dtype("i64")
    n64:set(1, 1, 3, 2 ^ 40)
    local a = {q = p.q, k = p.k, v = p.v, dO = p.dO, q2k_idx = p.q2k_idx, q2k_num = n64,
      variable_block_sizes = p.vbs}
    local want = "q2k_num: the entry at flat index 2 (0-based) is 1099511627776, not a 32-bit value"
    for _, e in ipairs{H.err(vsalab.oracle, a), H.err(vsalab.invert_indices, p.q2k_idx, n64, 4),
                       H.err(vsalab.list_sharing, p.q2k_idx, n64, 4)} do
      assert.truthy(e:find(want, 1, true), e)
    end
    local i64 = p.q2k_idx:to_dtype("i64")
    i64:set(1, 1, 1, 1, 2 ^ 40)
    a.q2k_num, a.q2k_idx = p.q2k_num, i64
    local e = H.err(vsalab.oracle, a)
    assert.truthy(e:find("q2k_idx: index 1099511627776 out of range (not a 32-bit block id) at (b=0, h=0, row=0)", 1, true), e)
  end)

  it("returns the given forward as the oracle's o and lse", function()
    local p = vsalab.problem.build{H = 1, Sq = 128, D = 16, topk = 1, seed = H.seed(), device = "cpu"}
    local r = vsalab.oracle{q = p.q, k = p.k, v = p.v, dO = p.dO, o = p.o, lse = p.lse,
      q2k_idx = p.q2k_idx, q2k_num = p.q2k_num, variable_block_sizes = p.vbs}
    for _, c in ipairs{vsalab.compare(r.o, p.o:to_dtype("f64")), vsalab.compare(r.lse, p.lse:to_dtype("f64"))} do
      assert.equal(0, c.nonfinite) -- not NaN placeholders
      assert.equal(0, c.max_abs)
    end
  end)

  it("refuses q2k lists passed where k2q lists belong", function()
    local p = vsalab.problem.build{H = 1, Sq = 256, D = 16, topk = 1, seed = H.seed(), device = "cpu"}
    local e = H.err(vsalab.backward_ref, p.dO, p.q, p.k, p.v, p.o, p.lse, p.q2k_idx, p.q2k_num, p.vbs)
    assert.truthy(e:match("k2q_idx: expected shape %[1,1,4,4%]"), e)
  end)
end)

describe("exit codes and messages", function()
  local dir = H.tmpdir()
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("exits 2 without a traceback on usage errors", function()
    local smoke = H.root .. "/experiments/smoke.lua"
    for _, cmd in ipairs{
      "run --db " .. dir .. "/u.db " .. smoke .. " --seed 5",
      "run --db " .. dir .. "/u.db " .. smoke .. " -a foo=1",
      "run --db " .. dir .. "/u.db " .. smoke .. " -a density=",
      "run --db /dev/full " .. smoke,
      "query --db " .. dir .. "/u.db 'SELECT 1' " .. string.rep("1 ", 5000),
    } do
      local rc, _, err = H.vsalab(cmd)
      H.usage_error(rc, err, nil, cmd)
    end
  end)

  it("exits 2 when damage is found mid-read", function()
    local db = dir .. "/dmg.db"
    local d = vsalab.db_open(db)
    local id = d:begin_run{script = "x"}
    for i = 1, 300 do d:log{run_id = id, experiment = "e", kernel = "k", note = string.rep("n", 300)} end
    d:end_run(id, "finished")
    d:close()
    -- Wreck a page in the middle (the schema on page 1 stays readable).
    local f = io.open(db, "r+b")
    local size = f:seek("end")
    f:seek("set", math.floor(size / 4096 / 2) * 4096)
    f:write(string.rep("\255", 4096))
    f:close()
    local rc, _, err = H.vsalab("show --db " .. db .. " 1")
    H.usage_error(rc, err, "damaged")
  end)

  it("says there is no NVIDIA GPU, without a traceback", function()
    if vsalab.cuda_available() then return end -- this host has one
    for _, x in ipairs{"wan720p", "invert_bench", "seed_sweep"} do
      local rc, _, err = H.vsalab("run --db " .. dir .. "/g.db " .. H.root .. "/experiments/" .. x .. ".lua")
      assert.equal(2, rc, err)
      assert.truthy(err:match("no NVIDIA GPU or driver found"), err)
      assert.falsy(err:find("insufficient", 1, true), err)
      assert.falsy(err:find("traceback", 1, true), err)
    end
    local p = vsalab.problem.build{H = 1, Sq = 64, D = 16, topk = 1, seed = 1}
    assert.equal("cpu", p.q.device)
  end)

  it("refuses bad lists= and kernels= arguments as usage errors", function()
    local db = dir .. "/k.db"
    local function usage_err(args, pattern)
      local rc, _, err = H.vsalab("run --db " .. db .. " " .. args)
      H.usage_error(rc, err, pattern)
    end
    local smoke = H.root .. "/experiments/smoke.lua"
    for _, bad in ipairs{"bogus", "vsa:65", "vsa:-1", "vsa:", "4"} do
      usage_err(smoke .. " -a lists=" .. bad, "argument 'lists': expected 'random' or 'vsa:")
    end
    usage_err(smoke .. " kernels=all,reference", "'all' stands alone")
    usage_err(smoke .. " kernels=triton", "needs peers=NAME too")
    -- Registered here but unable to run on this device: refused up front
    -- instead of a run that times nothing for it and exits 0.
    -- On a host without a GPU it says so at once, not after device=cuda.
    usage_err(smoke .. " kernels=sm90a", "argument 'kernels': sm90a cannot run here: sm90a runs on "
      .. "CUDA tensors and smoke's points are on the CPU (" .. (vsalab.cuda_available() and "give device=cuda)"
      or "and this host has no CUDA device: no NVIDIA GPU or driver found"))
    -- With device=cuda on a host without a GPU: the README's message.
    if not vsalab.cuda_available() then
      usage_err(smoke .. " kernels=sm90a device=cuda", "smoke needs a CUDA device: no NVIDIA GPU or driver found")
    end
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. smoke .. " -a density=[0.5]"
      .. " 'kernels= reference'")
    assert.equal(0, rc, err)
  end)

  it("names the function and the value in errors", function()
    assert.truthy(H.err(function() return vsalab.zeros({4}):reshape({3}) end):match("^t:reshape: "))
    local t = vsalab.zeros({4})
    t:free()
    assert.truthy(H.err(function() return t:get(1) end):match("t:get: tensor was freed"))
    assert.truthy(H.err(vsalab.empty, {2^62}):match("shape: entry 1 is 4%.6"))
    local d = vsalab.db_open(":memory:")
    d:begin_run{script = "x"}
    assert.truthy(H.err(function() d:log{experiment = "e", kernel = "k", tflopz = 1} end)
      :match("db:log: field 'tflopz' is unknown"))
    d:close()
    local dir = H.tmpdir()
    local s = script(dir, "log.lua", "vsalab.log{experiment = 'e', kernel = 'k', tflopz = 1}\n")
    local _, _, err = H.vsalab("run --db " .. dir .. "/l.db " .. s)
    assert.truthy(err:match("vsalab.log: field 'tflopz' is unknown"), err)
    os.execute("rm -rf " .. dir)
    local qi = vsalab.from_table({{{{2^32}}}}, {dtype = "i64"})
    local qn = vsalab.from_table({{{1}}}, {dtype = "i32"})
    assert.truthy(H.err(vsalab.invert_indices, qi, qn, 2):match("index 4294967296"))
  end)

  it("names modules, not build paths, in tracebacks", function()
    local s = script(dir, "bp.lua", "vsalab.problem.build{H = 1, Sq = 65, D = 16, topk = 1, seed = 1, device = 'cpu'}\n")
    local _, _, err = H.sh("env -u VSALAB_LUA_DIR " .. H.exe .. " run " .. s)
    assert.truthy(err:match("vsalab/problem%.lua:%d+"), err)
    assert.falsy(err:find("/lua/vsalab/", 1, true), err) -- no absolute build path
  end)
end)

describe("what a new user sees", function()
  it("prints CPU TFLOPS with their digits and compares host-clock rows with a wider floor", function()
    local dir = H.tmpdir()
    local db = dir .. "/c.db"
    local rc, out, err = H.vsalab("run --db " .. db .. " " .. H.root .. "/experiments/smoke.lua -a density=[0.5]")
    assert(rc == 0, err)
    local line = out:match("\n(reference[^\n]+)")
    assert.falsy(line:match(" 0%.0 "), line)
    -- ragged reads 0/1 here as in `show` and `compare` (it read no/yes).
    assert.truthy(out:find("\nreference +2 +2 +768 +0%.500 +6 +1 "), out)
    assert.falsy(out:find(" yes ", 1, true), out)
    -- Two runs of host-clock rows 30% apart with disjoint ranges: SAME at
    -- the host floor (and said), SLOW on CUDA events.
    local d = vsalab.db_open(db)
    local function synthetic(gpu, scale, clock)
      local id = d:begin_run{script = "s", gpu_name = gpu}
      d:log{run_id = id, experiment = "x", kernel = "k", Sq = 64, ms_median = 10 * scale,
        ms_min = 9.9 * scale, ms_max = 10.1 * scale, extra = clock and ('{"clock":"' .. clock .. '"}')}
      return id
    end
    local a, b = synthetic(nil, 1, "host"), synthetic(nil, 1.3, "host")
    local g1, g2 = synthetic("NVIDIA H200", 1, "cuda"), synthetic("NVIDIA H200", 1.3, "cuda")
    d:close()
    local rc1, out1 = H.vsalab("compare --db " .. db .. " " .. a .. " " .. b)
    assert.equal(0, rc1, out1)
    assert.truthy(out1:match("host clock"), out1)
    assert.truthy(out1:match("SAME 1"), out1)
    local rc2, out2 = H.vsalab("compare --db " .. db .. " " .. g1 .. " " .. g2)
    assert.equal(1, rc2, out2)
    assert.truthy(out2:match("SLOW 1"), out2)
    os.execute("rm -rf " .. dir)
  end)

  it("reports every column in view, one row a line but for its wrapped note, against the axis that varies, for the latest timed run", function()
    local dir = H.tmpdir()
    local db = dir .. "/r.db"
    local d = vsalab.db_open(db)
    local id = d:begin_run{script = "sweep"}
    for _, dens in ipairs{0.25, 0.5, 1.0} do
      d:log{run_id = id, experiment = "smoke", kernel = "reference", B = 1, H = 2, Sq = 768, D = 64,
        density = dens, ms_median = 10 * dens, tflops = 0.001 * dens, passed = 1}
    end
    d:end_run(id, "finished")
    local rr = d:begin_run{script = "rerun of row 1"}
    d:log{run_id = rr, experiment = "smoke", kernel = "reference", B = 1, H = 2, Sq = 768, D = 64,
      density = 0.25, ms_median = 2.5, tflops = 0.00025, passed = 1}
    d:end_run(rr, "finished")
    d:close()
    local out = dir .. "/r.html"
    local rc, o, err = H.vsalab("report --db " .. db .. " -o " .. out)
    assert(rc == 0, err)
    assert.truthy(o:match("bytes, run " .. id .. "%)"), o)
    local html = assert(H.read(out))
    assert.truthy(html:find("density (selected share of kv blocks)", 1, true))
    assert.falsy(html:find("overflow-x", 1, true))
    assert.truthy(html:find("white-space:nowrap", 1, true))
    assert.truthy(html:find(">0.0005<", 1, true)) -- TFLOPS digits, not 0.0
    os.execute("rm -rf " .. dir)
  end)

  it("records when the script started, not when it first logged", function()
    local dir = H.tmpdir()
    local db = dir .. "/s.db"
    local s = script(dir, "late.lua", "os.execute('sleep 1.2')\nvsalab.log{experiment = 't', kernel = 'k'}\n")
    assert.equal(0, (H.vsalab("run --db " .. db .. " " .. s)))
    local d = vsalab.db_open(db, {readonly = true})
    local r = d:q([[SELECT (julianday(r.created_at) - julianday(run.started_at)) * 86400 AS dt
      FROM result r JOIN run ON run.id = r.run_id]])[1]
    d:close()
    assert(r.dt >= 1.0, "started_at is " .. r.dt .. " s before the first row")
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a kernel engineer's findings", function()
  it("prints each command's usage for --help and -h, exit 0, and opens no DB", function()
    local dir = H.tmpdir()
    for _, cmd in ipairs{"run", "repl", "compare", "rerun", "report", "query", "show", "runs", "merge"} do
      for _, h in ipairs{"--help", "-h"} do
        local rc, out, err = H.sh("cd " .. dir .. " && " .. H.exe .. " " .. cmd .. " " .. h .. " </dev/null")
        assert.equal(0, rc, cmd .. " " .. h .. "\n" .. err)
        assert.truthy(out:find("usage: vsalab " .. cmd, 1, true), cmd .. " " .. h .. "\n" .. out)
        assert.equal("", err, cmd .. " " .. h)
      end
    end
    -- After other options too; run's help names its options.
    local rc, out = H.vsalab("run --db " .. dir .. "/x.db --seed 3 --help")
    assert.equal(0, rc)
    assert.truthy(out:find("--point-timeout", 1, true), out)
    assert.equal(0, (H.vsalab("compare --db " .. dir .. "/x.db 1 --help")))
    assert.is_nil(io.open(dir .. "/results.db"))
    assert.is_nil(io.open(dir .. "/x.db"))
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a kernel engineer's findings: run references", function()
  local dir = H.tmpdir()
  local db = dir .. "/r.db"
  local s = script(dir, "log.lua", "vsalab.log{experiment = 't', kernel = 'k', Sq = 64, ms_median = 1}\n")
  for _ = 1, 3 do assert.equal(0, (H.vsalab("run --db " .. db .. " " .. s))) end
  teardown(function() os.execute("rm -rf " .. dir) end)

  local function usage_err(args, text)
    local rc, out, err = H.vsalab(args)
    H.usage_error(rc, err, text, args)
    assert.equal("", out, args)
  end

  it("says which reference of compare, show or report matches no run, and what the DB has", function()
    usage_err("compare --db " .. db .. " latest~9 latest",
      "vsalab compare: no run matches 'latest~9' (the DB has 3 runs: latest~0 to latest~2)")
    usage_err("compare --db " .. db .. " 1 99", "no run matches '99' (the DB has 3 runs, ids 1 to 3)")
    usage_err("compare --db " .. db .. " abc 1", "no run matches 'abc' (a run is an id, 'latest'")
    usage_err("compare --db " .. db .. " 1", "vsalab compare: expected two runs, A (the baseline) and B, got 1: '1'")
    usage_err("compare --db " .. db, "expected two runs, A (the baseline) and B, got none")
    usage_err("show --db " .. db .. " 7", "vsalab show: no run matches '7' (the DB has 3 runs, ids 1 to 3)")
    usage_err("show --db " .. db, "vsalab show: expected one RUN")
    usage_err("report --db " .. db .. " -o " .. dir .. "/r.html latest~3", "no run matches 'latest~3'")
    -- A revision whose prefix is all digits: read as an id, and said so.
    local d = vsalab.db_open(db)
    d:q("UPDATE run SET git_rev = '41287553179c' WHERE id = 2")
    d:close()
    usage_err("show --db " .. db .. " 41287", "no run matches '41287' (read as a run id; revision "
      .. "41287553179c starts with it too: give a longer prefix that has a letter; the DB has 3 runs")
    assert.equal(0, (H.vsalab("show --db " .. db .. " 41287553179c")))
  end)

  it("says why rerun cannot take its argument", function()
    usage_err("rerun --db " .. db .. " abc", "vsalab rerun: 'abc' is not a result row id")
    usage_err("rerun --db " .. db, "vsalab rerun: expected a ROW")
    usage_err("rerun --db " .. db .. " 1 2", "expected one ROW (a result row's id), got 2: '1', '2'")
    usage_err("rerun --db " .. db .. " 99", "no result row 99 (the DB has 3 result rows, ids 1 to 3)")
  end)
end)

describe("a kernel engineer's findings: compare", function()
  it("counts MISSING points in the summary line and the HTML view", function()
    local dir = H.tmpdir()
    local db = dir .. "/m.db"
    local d = vsalab.db_open(db)
    local function sweep(heads)
      local id = d:begin_run{script = "s"}
      for _, h in ipairs(heads) do
        d:log{run_id = id, experiment = "t", kernel = "k", B = 1, H = h, Sq = 64, ms_median = 1,
          ms_min = 1, ms_max = 1, mode = "hot", passed = 1}
      end
      d:end_run(id, "finished")
    end
    sweep{1, 2, 3}
    sweep{1}
    d:close()
    local rc, out = H.vsalab("compare --db " .. db .. " 1 2")
    assert.equal(1, rc, out)
    assert.truthy(out:find("ONLY A 2  ONLY B 0  MISSING 2\n", 1, true), out)
    local rc2, out2 = H.vsalab("compare --db " .. db .. " --partial 1 2")
    assert.equal(0, rc2, out2)
    assert.truthy(out2:find("ONLY A 2  ONLY B 0  MISSING 0\n", 1, true), out2)
    local rc3, out3 = H.vsalab("compare --db " .. db .. " 2 1")
    assert.equal(0, rc3, out3)
    assert.truthy(out3:find("ONLY A 0  ONLY B 2  MISSING 0\n", 1, true), out3)
    assert.equal(0, (H.vsalab("report --db " .. db .. " -o " .. dir .. "/c.html 1 2")))
    local html = assert(H.read(dir .. "/c.html"))
    assert.truthy(html:find('<span class="fail">MISSING 2</span>', 1, true))
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a kernel engineer's findings: output formats", function()
  it("writes csv numbers that read back exactly, and show --format json with the run's context", function()
    local dir = H.tmpdir()
    local db = dir .. "/f.db"
    local d = vsalab.db_open(db)
    local id = d:begin_run{script = "s.lua", args = '["a=1"]', seed = 7, gpu_name = "NVIDIA H200",
      driver_version = "13.0", git_rev = "abcdef12", context = '{"k":"v"}'}
    local ms = 0.1234567890123
    d:log{run_id = id, experiment = "e", kernel = "k", Sq = 64, ms_median = ms, tflops = 1 / 3}
    d:end_run(id, "finished")
    d:close()
    local rc, out = H.vsalab("query --db " .. db .. " --format csv 'SELECT 0.1 + 0.2 AS x, ms_median FROM result'")
    assert.equal(0, rc)
    assert.equal("x,ms_median\n0.30000000000000004,0.1234567890123\n", out)
    local rc2, out2 = H.vsalab("show --db " .. db .. " --format csv 1")
    assert.equal(0, rc2)
    assert.truthy(out2:find(",0.1234567890123,0.3333333333333333,", 1, true), out2)
    local rc3, out3 = H.vsalab("show --db " .. db .. " --format json 1")
    assert.equal(0, rc3)
    local j = vsalab.json.decode(out3)
    assert.equal("NVIDIA H200", j.run.gpu_name)
    assert.equal("13.0", j.run.driver_version)
    assert.equal("abcdef12", j.run.git_rev)
    assert.equal(7, j.run.seed)
    assert.same({"a=1"}, j.run.args)
    assert.same({k = "v"}, j.run.context)
    assert.equal(1, #j.rows)
    assert.equal(ms, j.rows[1].ms_median)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a kernel engineer's findings: -a shapes", function()
  it("refuses -a B, H, Sq, Skv values the build cannot take, naming axis and value, before any run row", function()
    local dir = H.tmpdir()
    local s = script(dir, "shape.lua", [[
      local exp = require "vsalab.experiment"
      local sweep = require "vsalab.sweep"
      local sw = sweep.new{axes = {{"Sq", {128}}, {"Skv", {128}}, {"H", {1}}, {"B", {1}}, {"density", {0.5}}},
        fixed = {D = 16}}
      exp.args(sw:override(arg), {})
      exp.run{name = "shape", device = "cpu", sweep = sw, check = "full", seed = 1}
    ]])
    local db = dir .. "/s.db"
    local cases = {
      {"Sq=100", "argument 'Sq': expected a multiple of 64 in [64, 2^30], got 100"},
      {"Sq=0", "got 0"}, {"Sq=-64", "got -64"}, {"Sq=64.5", "got 64.5"}, {"Sq=1e15", "got 1e+15"},
      {"Sq[pow2]=[5:7]", "argument 'Sq': expected a multiple of 64 in [64, 2^30], got 32"},
      {"Skv=[128,96]", "argument 'Skv': expected a multiple of 64 in [64, 2^30], got 96"},
      {"H=0", "argument 'H': expected an integer in [1, 65535], got 0"},
      {"H=1.5", "got 1.5"}, {"H=-1", "got -1"}, {"H=1e9", "got 1000000000"},
      {"B=0", "argument 'B': expected an integer in [1, 65535], got 0"}, {"B=0.5", "got 0.5"},
    }
    for _, c in ipairs(cases) do
      local rc, _, err = H.vsalab("run --db " .. db .. " " .. s .. " -a '" .. c[1] .. "'")
      H.usage_error(rc, err, c[2], c[1])
    end
    assert.is_nil(io.open(db)) -- no run row, no DB
    -- A GPU experiment says so before it looks for the GPU.
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. H.root .. "/experiments/seed_sweep.lua -a Sq=4000")
    assert.equal(2, rc)
    assert.truthy(err:find("argument 'Sq': expected a multiple of 64 in [64, 2^30], got 4000", 1, true), err)
    -- Values in range still run.
    assert.equal(0, (H.vsalab("run --db " .. db .. " " .. s .. " -a Sq=[64,128] -a B=2 -a H=2")))
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a kernel engineer's findings: peers", function()
  it("refuses peers=numpy when python3 cannot import numpy, naming it and how to install it", function()
    local dir = H.tmpdir()
    -- A python3 without numpy, whatever this host has.
    script(dir, "python3", "#!/bin/sh\nexit 1\n")
    os.execute("chmod +x " .. dir .. "/python3")
    local db = dir .. "/p.db"
    local rc, _, err = H.sh("cd " .. H.root .. " && PATH=" .. dir .. ":$PATH " .. H.exe .. " run --db " .. db
      .. " experiments/smoke.lua -a density=[0.5] peers=numpy")
    H.usage_error(rc, err, "argument 'peers': numpy: python3 cannot import numpy (install it: python3 -m pip install numpy")
    assert.is_nil(io.open(db)) -- before any run row
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a kernel engineer's findings: runs that measure nothing", function()
  local dir = H.tmpdir()
  teardown(function() os.execute("rm -rf " .. dir) end)
  -- Every point out of host memory (logged as skipped), or filtered out.
  local oom = script(dir, "oom.lua", [[
    require("vsalab.experiment").run{name = "oom", device = "cpu", check = "full", seed = 1, configs = {
      {B = 1, H = 4096, Sq = 2^24, D = 256, topk = 1}, {B = 1, H = 4095, Sq = 2^24, D = 256, topk = 1}}}
  ]])
  local filtered = script(dir, "filtered.lua", [[
    local exp = require "vsalab.experiment"
    local sw = require("vsalab.sweep").new{axes = {{"Sq", {128, 256}}}, fixed = {H = 1, D = 16, density = 0.5},
      skip = function(p) return "not on this host" end}
    exp.run{name = "filtered", device = "cpu", sweep = sw, check = "full", seed = 1}
  ]])

  local function failed_run(db, rc, err, text, rows)
    assert.equal(1, rc, err)
    assert.truthy(err:find(text, 1, true), err)
    local d = vsalab.db_open(db, {readonly = true})
    local r = d:q("SELECT status, error, ended_at FROM run")[1]
    local n = d:q("SELECT count(*) AS n FROM result WHERE kernel = 'config'")[1].n
    d:close()
    assert.equal("failed", r.status)
    assert.truthy(r.ended_at)
    assert.truthy(r.error:find(text, 1, true), r.error)
    -- The user's to read, not a bug: no Lua traceback on stderr or in the row.
    assert.falsy(err:find("traceback", 1, true), err)
    assert.falsy(r.error:find("traceback", 1, true), r.error)
    assert.equal(rows, n) -- the skip rows are kept
  end

  it("exits 1, the run failed with the skip reasons, when every point was skipped", function()
    local db = dir .. "/o.db"
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. oom)
    failed_run(db, rc, err, "oom: every point was skipped, nothing was measured: 2 × out of memory", 2)
    db = dir .. "/f.db"
    rc, _, err = H.vsalab("run --db " .. db .. " " .. filtered)
    failed_run(db, rc, err, "filtered: every point was skipped, nothing was measured: "
      .. "2 × not on this host (filtered by the sweep)", 0)
    -- Under --devices the coordinator judges the whole run.
    db = dir .. "/d.db"
    rc, _, err = H.sh("VSALAB_FAKE_DEVICES=2 " .. H.exe .. " run --devices all --db " .. db .. " " .. oom)
    failed_run(db, rc, err, "every point was skipped, nothing was measured: 2 × out of memory", 2)
    -- A shard's slice alone is no verdict on the sweep; a sweep without points is.
    rc, _, err = H.vsalab("run --shard 0/1 --db " .. dir .. "/s.db " .. oom)
    assert.equal(0, rc, err)
    assert.truthy(err:find("every point of this slice was skipped", 1, true), err)
    rc, _, err = H.vsalab("run --shard 0/2 --db " .. dir .. "/s2.db " .. filtered)
    assert.equal(1, rc, err)
  end)

  it("says a shard's slice is empty instead of printing an empty table", function()
    -- Two points in 64 slices: of slices 0 to 2, one at least holds none.
    local empty = 0
    for i = 0, 2 do
      local rc, out, err = H.vsalab(string.format("run --shard %d/64 --db %s/e%d.db %s/experiments/smoke.lua -a 'density=[0.5]'",
        i, dir, i, H.root))
      assert.equal(0, rc, err)
      if err:find("shard " .. i .. "/64: 0 of 2 points", 1, true) then
        empty = empty + 1
        assert.equal("smoke: shard " .. i .. "/64 holds none of the sweep's 2 points (points go to shards by "
          .. "their hash): nothing to measure here; the other shards measure them\n", out)
      else
        assert.truthy(out:find("\nkernel ", 1, true), out)
      end
    end
    assert.is_true(empty >= 1)
  end)

  it("still passes a run that measured some points and skipped others", function()
    local some = script(dir, "some.lua", [[
      require("vsalab.experiment").run{name = "some", device = "cpu", check = "full", seed = 1, configs = {
        {B = 1, H = 4096, Sq = 2^24, D = 256, topk = 1}, {B = 1, H = 1, Sq = 128, D = 16, topk = 1}}}
    ]])
    local rc, _, err = H.vsalab("run --db " .. dir .. "/m.db " .. some)
    assert.equal(0, rc, err)
    local r = run_row(dir .. "/m.db")
    assert.equal("finished", r.status)
  end)
end)

describe("a breaker's findings: hostile scripts and hosts", function()
  local dir = H.tmpdir()
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("reads a script's usage-error table raw: an __index that raises is no LuaJIT panic", function()
    local db = dir .. "/panic.db"
    local s = script(dir, "panic.lua", [[
      vsalab.log{experiment = 't', kernel = 'k'}
      error(setmetatable({usage = true}, {__index = function() error("idx") end}))
    ]])
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. s)
    assert.equal(2, rc, err)
    assert.falsy(err:find("PANIC", 1, true), err)
    local r, n = run_row(db)
    assert.equal("failed", r.status)
    assert.equal(1, n)
  end)

  it("waits for another writer's lock to log a measured row, not losing it with the run", function()
    local db = dir .. "/lock.db"
    -- The holder takes the write lock for 7 s (past the 5 s busy timeout)
    -- between two rows.
    local s = script(dir, "rows.lua", string.format([[
      vsalab.log{experiment = 't', kernel = 'first'}
      os.execute(%q)
      while not io.open(%q) do os.execute("sleep 0.05") end
      vsalab.log{experiment = 't', kernel = 'second'}
    ]], lock_holder(dir, db), dir .. "/held"))
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. s)
    assert.equal(0, rc, err)
    local r, n = run_row(db)
    assert.equal("finished", r.status)
    assert.equal(2, n)
  end)

  it("keeps running under nohup when SIGHUP comes (it was interrupted)", function()
    local db = dir .. "/nohup.db"
    local s = script(dir, "nohup.lua", [[
      vsalab.log{experiment = 't', kernel = 'k'}
      os.execute("kill -HUP " .. vsalab.context.pid)
      vsalab.log{experiment = 't', kernel = 'after'}
    ]])
    local rc, _, err = H.sh("nohup " .. H.exe .. " run --db " .. db .. " " .. s)
    assert.equal(0, rc, err)
    local r, n = run_row(db)
    assert.equal("finished", r.status)
    assert.equal(2, n)
  end)

  it("exits 1 saying so when runs, show or query cannot write stdout (it was a silent 0)", function()
    local db = dir .. "/out.db"
    H.db_with_run(db)
    for _, cmd in ipairs{"runs", "show 1", "query 'SELECT 1'"} do
      local rc, _, err = H.sh("{ " .. H.exe .. " " .. cmd .. " --db " .. db .. " >/dev/full; }")
      assert.equal(1, rc, cmd .. ": " .. err)
      assert.truthy(err:find("cannot write standard output: No space left on device", 1, true), err)
    end
    local rc, _, err = H.sh("{ " .. H.exe .. " runs --db " .. db .. " >&-; }")
    assert.equal(1, rc, err)
    assert.truthy(err:find("cannot write standard output", 1, true), err)
    assert.equal(0, (H.vsalab("runs --db " .. db)))
  end)

  it("begins no second run for a row a finalizer logs as the state closes", function()
    local db = dir .. "/gc.db"
    local s = script(dir, "gc.lua", [[
      vsalab.log{experiment = 't', kernel = 'k'}
      keep = newproxy(true)
      getmetatable(keep).__gc = function() vsalab.log{experiment = 't', kernel = 'at close'} end
    ]])
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. s)
    assert.equal(0, rc, err)
    local d = vsalab.db_open(db, {readonly = true})
    local runs = d:q("SELECT status FROM run")
    local n = d:q("SELECT count(*) AS n FROM result")[1].n
    d:close()
    assert.equal(1, #runs)
    assert.equal("finished", runs[1].status)
    assert.equal(1, n)
  end)

  it("closes the run a signal interrupts as begin_run returns (it stayed 'running')", function()
    -- The signal lands while begin_run's row is committed but before its id
    -- reaches run.lua: the hook fires at the return, as a real one can.
    for _, resume in ipairs{false, true} do
      local db = dir .. "/begin" .. H.seed() .. ".db"
      if resume then
        local w = vsalab.db_open(db)
        w:end_run(w:begin_run{script = dir .. "/begin.lua"}, "interrupted")
        w:close()
      end
      local s = script(dir, "begin.lua", string.format([[
        local core = require "vsalab.core"
        local real_open = core.db_open
        core.db_open = function(...)
          local db = real_open(...)
          return setmetatable({}, {__index = function(_, k)
            return function(_, a, ...)
              local r = db[k](db, a, ...)
              if k == %q and tostring(a):find(%q, 1, true) then
                os.execute("kill -TERM " .. vsalab.context.pid)
              end
              return r
            end
          end})
        end
        vsalab.log{experiment = 't', kernel = 'never'}
      ]], resume and "q" or "begin_run", resume and "SET status = 'running'" or ""))
      local rc, _, err = H.vsalab("run --db " .. db .. (resume and " --resume 1 " or " ") .. s)
      assert.equal(1, rc, err)
      local r, n = run_row(db)
      assert.equal("interrupted", r.status, err)
      assert.truthy(r.error:match("SIGTERM"), r.error)
      assert.equal(0, n)
    end
  end)

  it("refuses report -o a FIFO, a link or a directory (a device such as /dev/null was replaced, a FIFO hung)", function()
    local db = dir .. "/rep.db"
    H.db_with_run(db)
    os.execute("mkfifo " .. dir .. "/fifo && mkdir " .. dir .. "/adir && echo '<!DOCTYPE html>' > "
      .. dir .. "/real.html && ln -s " .. dir .. "/real.html " .. dir .. "/link.html")
    for name, kind in pairs{fifo = "device, FIFO or socket", adir = "directory", ["link.html"] = "link"} do
      -- (timeout stops a hang only: generous for ASan on a loaded host)
      local rc, _, err = H.sh("timeout 120 " .. H.exe .. " report --db " .. db .. " -o " .. dir .. "/" .. name)
      assert.equal(2, rc, name .. ": " .. err)
      assert.truthy(err:find("is a " .. kind .. ", not a regular file", 1, true), err)
    end
    local _, kinds = H.sh("stat -c %F " .. dir .. "/fifo " .. dir .. "/link.html")
    assert.equal("fifo\nsymbolic link\n", kinds)
    local rc, _, err = H.vsalab("report --db " .. db .. " -o ''")
    assert.equal(2, rc, err)
    assert.equal(0, (H.vsalab("report --db " .. db .. " -o " .. dir .. "/real.html")))
  end)

  it("refuses an infinite compare floor (every point SAME: a gate that cannot fail)", function()
    for _, opt in ipairs{"--floor-pct inf", "--floor-pct-host 1e400", "--floor-ms inf"} do
      local rc, _, err = H.vsalab("compare --db " .. dir .. "/none.db " .. opt .. " 1 2")
      assert.equal(2, rc, opt .. ": " .. err)
      assert.truthy(err:find("expects a finite number >= 0, got '" .. opt:match("%S+$") .. "'", 1, true), err)
    end
  end)

  it("names the bad floor value (a new user's finding)", function()
    for _, opt in ipairs{"--floor-pct abc", "--floor-pct -5", "--floor-ms 1e999"} do
      local rc, out, err = H.vsalab("compare --db " .. dir .. "/none.db " .. opt .. " 1 2")
      assert.equal(2, rc, opt .. ": " .. err)
      assert.equal("", out)
      assert.truthy(err:find(opt:match("^%S+") .. " expects a finite number >= 0, got '"
        .. opt:match("%S+$") .. "'", 1, true), err)
    end
  end)
end)

describe("a new user's findings: run --check", function()
  it("checks the command and stops before the GPU, any measurement or the DB", function()
    local dir = H.tmpdir()
    local db = dir .. "/c.db"
    local exp = H.root .. "/experiments/"
    local rc, _, err = H.vsalab("run --check --db " .. db .. " " .. exp .. "smoke.lua")
    assert.equal(0, rc, err)
    assert.truthy(err:find("smoke: --check: the arguments check out (4 points to run); nothing was run", 1, true), err)
    -- GPU experiments plan their points here too (no GPU on CI), a shard its slice.
    rc, _, err = H.vsalab("run --check --db " .. db .. " --shard 1/2 " .. exp .. "seed_sweep.lua")
    assert.equal(0, rc, err)
    local n = err:match("shard 1/2: (%d+) of 6 points")
    assert.truthy(n and err:find("check out (" .. n .. " point", 1, true), err)
    rc, _, err = H.vsalab("run --check --db " .. db .. " " .. exp .. "invert_bench.lua")
    assert.equal(0, rc, err)
    assert.truthy(err:find("stopped before its GPU work", 1, true), err)
    -- A bad argument is the usage error the real run would give.
    for _, c in ipairs{
      {"smoke.lua -a foo=1", "sweep: no axis 'foo'"},
      {"seed_sweep.lua -a Sq=100", "argument 'Sq': expected a multiple of 64"},
      {"seed_sweep.lua kernels=nope", "argument 'kernels': no backward 'nope'"},
      {"wan720p.lua -a density=2", "argument 'density': expected a number in (0, 1]"},
    } do
      rc, _, err = H.vsalab("run --check --db " .. db .. " " .. exp .. c[1])
      assert.equal(2, rc, c[1] .. ": " .. err)
      assert.truthy(err:find(c[2], 1, true), err)
      assert.falsy(err:find("to run", 1, true), err) -- refused before the plan is printed
    end
    -- A CUDA kernel for smoke's CPU points fails on any host: --check said
    -- the arguments check out, then the run exited 2.
    rc, _, err = H.vsalab("run --check --db " .. db .. " " .. exp .. "smoke.lua kernels=sm90a")
    assert.equal(2, rc, err)
    assert.truthy(err:find("argument 'kernels': sm90a cannot run here: sm90a runs on CUDA tensors", 1, true), err)
    assert.falsy(err:find("check out", 1, true), err)
    assert.is_nil(io.open(db)) -- nothing was opened or written
    rc, _, err = H.vsalab("run --check --resume 1 --db " .. db .. " " .. exp .. "smoke.lua")
    assert.equal(2, rc, err)
    -- --devices (slurm-sweep.sh's whole-node shards) checks the same command in one process.
    rc, _, err = H.sh("VSALAB_FAKE_DEVICES=2 " .. H.exe .. " run --check --devices all --db " .. db .. " " .. exp .. "smoke.lua")
    assert.equal(0, rc, err)
    assert.truthy(err:find("(4 points to run)", 1, true), err)
    rc, _, err = H.vsalab("run --check --devices 0,1 --db " .. db .. " " .. exp .. "smoke.lua -a foo=1")
    assert.equal(2, rc, err)
    rc, _, err = H.vsalab("repl --check")
    assert.equal(2, rc, err)
    os.execute("rm -rf " .. dir)
  end)

  it("names no internal source line when --resume cannot open the DB", function()
    local dir = H.tmpdir()
    local rc, _, err = H.vsalab("run --db " .. dir .. "/none.db --resume 1 " .. H.root .. "/experiments/smoke.lua")
    assert.equal(2, rc, err)
    assert.truthy(err:find("--resume: db '" .. dir .. "/none.db': cannot open read-only", 1, true), err)
    assert.falsy(err:find(".lua:", 1, true), err)
    os.execute("rm -rf " .. dir)
  end)

  it("takes --seed in [0, 2^48), the range problem.build takes", function()
    local rc, _, err = H.vsalab("run --check --seed 281474976710656 " .. H.root .. "/experiments/smoke.lua")
    assert.equal(2, rc, err)
    assert.truthy(err:find("--seed expects an integer in [0, 2^48)", 1, true), err)
    assert.equal(0, (H.vsalab("run --check --seed 281474976710655 " .. H.root .. "/experiments/smoke.lua")))
  end)
end)

describe("a new user's findings: messages name the bad argument", function()
  it("runs names an argument it does not take", function()
    local dir = H.tmpdir()
    for arg, what in pairs{["--bogus"] = "unknown option '--bogus'", extra = "unexpected argument 'extra'"} do
      local rc, out, err = H.vsalab("runs --db " .. dir .. "/none.db " .. arg)
      H.usage_error(rc, err, "vsalab runs: " .. what)
      assert.equal("", out)
      assert.truthy(err:find("usage: vsalab runs", 1, true), err)
    end
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a new user's findings: --format names the bad value", function()
  it("runs, show and query say which --format they were given", function()
    local dir = H.tmpdir()
    for _, cmd in ipairs{"runs", "show 1", "query 'SELECT 1'"} do
      local rc, out, err = H.vsalab(cmd:gsub("^(%S+)", "%1 --db " .. dir .. "/none.db --format xml"))
      H.usage_error(rc, err, "--format must be table, csv, json or markdown, got 'xml'")
      assert.equal("", out)
    end
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a new user's findings: smoke's device=", function()
  it("refuses a device the tensors cannot take, also under --check, before any run row", function()
    local dir = H.tmpdir()
    local db = dir .. "/d.db"
    for _, flags in ipairs{"--check ", ""} do
      for _, dev in ipairs{"gpu", "cuda:x", "1"} do
        local rc, out, err = H.vsalab("run " .. flags .. "--db " .. db .. " " .. H.root
          .. "/experiments/smoke.lua device=" .. dev)
        H.usage_error(rc, err, "argument 'device': expected cpu, cuda or cuda:N, got '" .. dev .. "'")
        assert.equal("", out)
      end
    end
    assert.is_nil(io.open(db))
    assert.equal(0, (H.vsalab("run --check --db " .. db .. " " .. H.root .. "/experiments/smoke.lua device=cuda:0")))
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a new user's findings: report's last line", function()
  it("says 'run 2' for one run, not 'runs 2' (which reads as a count)", function()
    local dir = H.tmpdir()
    local db = dir .. "/r.db"
    local d = vsalab.db_open(db)
    for _ = 1, 2 do
      local id = d:begin_run{script = "s.lua", args = "[]", seed = 1}
      d:log{run_id = id, experiment = "e", kernel = "k", Sq = 64, ms_median = 1, tflops = 1}
      d:end_run(id, "finished")
    end
    d:close()
    local rc, out, err = H.vsalab("report --db " .. db .. " -o " .. dir .. "/one.html")
    assert.equal(0, rc, err)
    assert.truthy(out:find("bytes, run 2)", 1, true), out)
    rc, out, err = H.vsalab("report --db " .. db .. " -o " .. dir .. "/two.html 1 2")
    assert.equal(0, rc, err)
    assert.truthy(out:find("bytes, runs 1, 2)", 1, true), out)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a kernel engineer's findings: run --check of a script that is not an experiment", function()
  it("stops at its first problem.build, vsalab.bench or logged row: nothing measured, no DB", function()
    local dir = H.tmpdir()
    local db = dir .. "/c.db"
    -- A sweep written from the Lua API alone: its own loop, no experiment.run.
    local head = [[
local sw = vsalab.sweep.new{axes = {{"density", {0.25, 0.5}}}, fixed = {H = 1, D = 64, Sq = 256}}
local a = require("vsalab.experiment").args(sw:override(arg), {reps = 2})
]]
    local bodies = {
      ["problem.build"] = [[for _, pt in ipairs(sw:points()) do
  local p = vsalab.problem.build{H = pt.H, Sq = pt.Sq, D = pt.D, density = pt.density, seed = 1, device = "cpu"}
  vsalab.log{experiment = "mine", kernel = "reference", density = p.density}
end]],
      ["vsalab.bench"] = [[vsalab.bench(function() end, {repeats = a.reps})
vsalab.log{experiment = "mine", kernel = "x"}]],
      ["vsalab.log or vsalab.run"] = [[vsalab.log{experiment = "mine", kernel = "x"}]],
    }
    for what, body in pairs(bodies) do
      local script = dir .. "/mine.lua"
      H.write(script, head .. body .. "\n")
      local rc, _, err = H.vsalab("run --check --db " .. db .. " " .. script)
      assert.equal(0, rc, err)
      assert.truthy(err:find("mine: --check: the arguments check out (stopped at its first " .. what
        .. "); nothing was run", 1, true), err)
      assert.is_nil(io.open(db), what) -- no run row, no DB
      -- Its arguments are still checked first, and it runs as usual without --check.
      rc, _, err = H.vsalab("run --check --db " .. db .. " " .. script .. " -a foo=1")
      assert.equal(2, rc, err)
      assert.truthy(err:find("sweep: no axis 'foo'", 1, true), err)
      rc, _, err = H.vsalab("run --db " .. db .. " " .. script)
      assert.equal(0, rc, err)
      assert.truthy(io.open(db), what)
      os.remove(db)
    end
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a kernel engineer's findings: the API paths README.md and docs/ name", function()
  it("resolve in a script: vsalab.experiment.run, vsalab.X.Y", function()
    local parts = {}
    for _, doc in ipairs{"README.md", "docs/lua-api.md", "docs/experiments.md", "docs/peers.md",
        "docs/cluster.md", "docs/cli.md", "docs/db.md", "docs/kernels.md", "docs/tests.md"} do
      parts[#parts + 1] = assert(H.read(H.root .. "/" .. doc), doc)
    end
    local text = table.concat(parts, "\n")
    local seen, n = {}, 0
    for path in text:gmatch("`(vsalab%.[%w_]+%.[%w_]+)") do
      if not seen[path] then
        seen[path] = true
        n = n + 1
        local mod, field = path:match("^vsalab%.([%w_]+)%.([%w_]+)$")
        local t = vsalab[mod]
        assert.equal("table", type(t), path .. ": vsalab." .. mod .. " is a " .. type(t))
        assert.is_not_nil(t[field], path)
      end
    end
    assert.truthy(seen["vsalab.experiment.run"] and n >= 10, n)
    assert.equal("function", type(vsalab.experiment.args))
  end)
end)

describe("a kernel engineer's findings: --resume of a shard", function()
  it("keeps the shard's slice: another --shard or --sweep-id is refused, none takes the run's", function()
    local dir = H.tmpdir()
    local db = dir .. "/s.db"
    local exp = H.root .. "/experiments/smoke.lua"
    local rc, _, err = H.vsalab("run --db " .. db .. " --shard 0/2 --sweep-id X " .. exp)
    assert.equal(0, rc, err)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT count(*) AS n FROM result")[1].n
    d:close()
    for _, c in ipairs{
      {"--shard 1/2 --sweep-id X", "--resume: run 1 is shard 0/2 of sweep 'X', not 1/2"},
      {"--shard 0/3", "not 0/3 (leave --shard out to take the run's)"},
      {"--shard 0/2 --sweep-id Y", "--resume: run 1 belongs to sweep 'X', not 'Y'"},
    } do
      rc, _, err = H.vsalab("run --db " .. db .. " --resume 1 " .. c[1] .. " " .. exp)
      H.usage_error(rc, err, c[2], c[1])
    end
    -- Left out, the run's slice: nothing new to measure, no other shard's points.
    for _, flags in ipairs{"", "--shard 0/2 --sweep-id X"} do
      rc, _, err = H.vsalab("run --db " .. db .. " --resume 1 " .. flags .. " " .. exp)
      assert.equal(0, rc, err)
    end
    d = vsalab.db_open(db, {readonly = true})
    assert.equal(rows, d:q("SELECT count(*) AS n FROM result")[1].n)
    d:close()
    -- A run that is not a shard resumes whole.
    rc, _, err = H.vsalab("run --db " .. dir .. "/w.db " .. exp)
    assert.equal(0, rc, err)
    rc, _, err = H.vsalab("run --db " .. dir .. "/w.db --resume 1 --shard 0/2 " .. exp)
    assert.equal(2, rc, err)
    assert.truthy(err:find("--resume: run 1 is not a shard: resume it without --shard", 1, true), err)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a kernel engineer's findings: RUN:KERNEL names a shard's logical run", function()
  it("finds the kernel in any shard's rows, as a plain RUN does (a shard's slice may be empty)", function()
    local dir = H.tmpdir()
    local db = dir .. "/m.db"
    local d = vsalab.db_open(db)
    local function row(id, ms)
      d:log{run_id = id, experiment = "e", kernel = "mine", B = 1, H = 2, Sq = 256, Skv = 256, D = 64,
        block = 64, density = 0.5, topk = 2, ragged = 0, ms_median = ms, ms_min = ms, ms_max = ms,
        samples = 3, mode = "hot", passed = 1}
    end
    -- Shard 0 measured nothing (its slice was empty); shard 1 the point.
    local s0 = d:begin_run{script = "e.lua", args = "[]", seed = 1, sweep_id = "S", shard_index = 0, shard_count = 2}
    d:end_run(s0, "finished")
    local s1 = d:begin_run{script = "e.lua", args = "[]", seed = 1, sweep_id = "S", shard_index = 1, shard_count = 2}
    row(s1, 1.0)
    d:end_run(s1, "finished")
    local other = d:begin_run{script = "e.lua", args = "[]", seed = 1}
    row(other, 1.0)
    d:end_run(other, "finished")
    d:close()
    local rc, out, err = H.vsalab("compare --db " .. db .. " " .. s0 .. ":mine " .. other .. ":mine")
    assert.equal(0, rc, err)
    assert.truthy(out:find("SAME 1", 1, true), out)
    rc, _, err = H.vsalab("report --db " .. db .. " -o " .. dir .. "/r.html " .. s0 .. ":mine")
    assert.equal(0, rc, err)
    rc, _, err = H.vsalab("compare --db " .. db .. " " .. s0 .. ":nope " .. other .. ":mine")
    assert.equal(2, rc, err)
    assert.truthy(err:find("has no rows of kernel 'nope' (its kernels: mine)", 1, true), err)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("an adversarial tester's findings: error messages", function()
  it("names the function of a bad argument however it is reached (pcall, a tail call, a method)", function()
    -- LuaJIT names it from the caller's bytecode: these read '?'.
    local t = vsalab.empty({2, 3}, {dtype = "f32"}):fill_randn{seed = H.seed()}
    local d = vsalab.db_open(":memory:")
    for _, c in ipairs{
        {"bad argument #2 to 'zeros' (table expected, got boolean)", vsalab.zeros, {2}, true},
        {"bad argument #1 to 'compare' (tensor expected, got number)", vsalab.compare, 1, t},
        {"bad argument #3 to 'invert_indices' (number expected, got string)", vsalab.invert_indices,
          vsalab.zeros({1, 1, 1, 1}, {dtype = "i32"}), vsalab.zeros({1, 1, 1}, {dtype = "i32"}), "x"},
        {"bad argument #2 to 'narrow' (number expected, got string)", t.narrow, t, "x", 1, 1},
        {"bad argument #1 to 'npy_load' (string expected, got no value)", vsalab.npy_load},
        {"bad argument #1 to 'q' (vsa.Db expected, got number)", d.q, 5},
        {"bad argument #1 to 'isatty' (number expected, got table)", vsalab.isatty, {}}} do
      local e = H.err(c[2], unpack(c, 3, table.maxn(c)))
      assert.truthy(e:find(c[1], 1, true), e)
    end
    local e = H.err(function() return vsalab.random_topk(true) end)
    assert.truthy(e:find("bad argument #1 to 'random_topk' (table expected, got boolean)", 1, true), e)
    d:close()
  end)

  it("says a new DB in a directory it cannot write is refused for permission, not 'no such file'", function()
    -- SQLite reports the errno of its read-only retry (ENOENT). As root
    -- (CI) the directory needs another user: a copy of the binary runs as
    -- nobody, as query_spec's read-only test does.
    local ro = H.tmpdir()
    os.execute("cp " .. H.exe .. " " .. ro .. "/vsalab")
    H.write(ro .. "/log.lua", "vsalab.log{experiment = 'x', kernel = 'k'}\n")
    local root = H.sh("test \"$(id -u)\" = 0") == 0
    os.execute("chmod 644 " .. ro .. "/log.lua && chmod 755 " .. ro .. "/vsalab && chmod "
      .. (root and "755 " or "555 ") .. ro)
    local as = root and "runuser -u nobody -- " or ""
    assert.is_not.equal(0, (H.sh(as .. "touch " .. ro .. "/probe")))
    local rc, _, err = H.sh("cd / && " .. as .. ro .. "/vsalab run --db " .. ro .. "/new.db " .. ro .. "/log.lua")
    assert.equal(2, rc, err)
    assert.truthy(err:find("db '" .. ro .. "/new.db': cannot open: unable to open database file "
      .. "(Permission denied)", 1, true), err)
    -- A missing directory is still that.
    rc, _, err = H.vsalab("run --db " .. ro .. "/none/new.db " .. ro .. "/log.lua")
    assert.equal(2, rc, err)
    assert.truthy(err:find("(No such file or directory)", 1, true), err)
    os.execute("chmod 755 " .. ro .. " && rm -rf " .. ro)
  end)
end)
