-- Bad input found by trying to break vsalab: each must be a clear Lua error
-- (or a correct result), never a crash, a wrong answer or a lost row.
local H = require "helpers"

describe("robustness", function()
  it("rejects shapes whose element count overflows", function()
    assert.truthy(H.err(function() return vsalab.zeros({0}):reshape({2^32, 2^32}) end):match("too large"))
    assert.truthy(H.err(function() return vsalab.zeros({4}):reshape({274177, 67280421310721, 4}) end):match("too large"))
  end)

  it("range-checks narrow, select, get and set positions", function()
    local t = vsalab.zeros({4})
    for _, bad in ipairs{1e300, math.huge, 0/0, 2^62 + 2^61, 0, 1.5} do
      assert.truthy(H.err(function() return t:narrow(1, bad, 1) end):match("narrow: start"))
    end
    assert.truthy(H.err(function() return t:select(1, 5) end):match("select: index"))
    assert.truthy(H.err(function() return t:get(1.5) end):match("index 1"))
    assert.truthy(H.err(function() return t:get(1, 1) end):match("expected 1 indices"))
    assert.truthy(H.err(function() return t:set(0, 7) end):match("index 1"))
  end)

  it("refuses tables with holes or named keys as lists", function()
    assert.truthy(H.err(vsalab.empty, {2, nil, 3}):match("list"))
    assert.truthy(H.err(vsalab.from_table, {1, 2, a = 3}):match("list"))
  end)

  it("copies between overlapping views correctly", function()
    local t = vsalab.from_table({1, 2, 3, 4})
    t:narrow(1, 2, 3):copy_(t:narrow(1, 1, 3))
    assert.same({1, 1, 2, 3}, t:to_table())
    local m = vsalab.from_table({{1, 2}, {3, 4}, {5, 6}})
    m:transpose(1, 2):copy_(m:reshape({2, 3}))
    assert.same({{1, 4}, {2, 5}, {3, 6}}, m:to_table())
    assert.truthy(H.err(function() vsalab.full({1}, 1):expand({3}):copy_(vsalab.zeros({3})) end):match("broadcasts"))
  end)

  it("refuses to build huge tables from empty dimensions", function()
    assert.truthy(H.err(function() return vsalab.zeros({2^31, 0}):to_table() end):match("16M"))
  end)

  it("checks the oracle's fields against q", function()
    local p = vsalab.problem.build{B = 2, H = 1, Sq = 128, D = 16, topk = 1, seed = 3, device = "cpu"}
    local a = {q = p.q, k = p.k, v = p.v, dO = p.dO, q2k_idx = p.q2k_idx,
      q2k_num = p.q2k_num, variable_block_sizes = p.vbs}
    local function with(k, v)
      local b = {}
      for x, y in pairs(a) do b[x] = y end
      b[k] = v
      return H.err(vsalab.oracle, b)
    end
    assert.truthy(with("k", p.k:narrow(1, 1, 1):contiguous()):match("k: shape %[1,1,128,16%] does not match layout bhsd %[B,H,Skv,D%] = %[2,1,128,16%]"))
    assert.truthy(with("v", p.v:narrow(1, 1, 1):contiguous()):match("v: shape %[1,1,128,16%] does not match layout bhsd"))
    assert.truthy(with("q2k_idx", p.q2k_idx:narrow(1, 1, 1):contiguous()):match("q2k_idx"))
    assert.truthy(with("q2k_num", p.q2k_num:to_dtype("f32")):match("i32 or i64"))
    a.o, a.lse = p.o, p.lse:narrow(1, 1, 1):contiguous()
    assert.truthy(H.err(vsalab.oracle, a):match("lse: expected shape"))
  end)

  it("refuses inversion outputs that alias the inputs", function()
    local idx = vsalab.from_table({{{{1, -1}, {0, 1}}}}, {dtype = "i32"})
    local num = vsalab.from_table({{{1, 2}}}, {dtype = "i32"})
    assert.truthy(H.err(vsalab.invert_indices, idx, num, 2,
      {out = {idx, vsalab.zeros({1, 1, 2}, {dtype = "i32"})}}):match("share memory"))
  end)

  it("refuses a misspelt option of the tensor constructors and problem.build (it built another thing unseen)", function()
    for fn, args in pairs{empty = {{2}}, zeros = {{2}}, full = {{2}, 1}, from_table = {{1, 2}}} do
      args[#args + 1] = {dtyp = "i32"}
      local e = H.err(vsalab[fn], unpack(args))
      assert.truthy(e:find(fn .. ": unknown option 'dtyp' (takes dtype, device)", 1, true), e)
    end
    assert.equal("i32", vsalab.zeros({2}, {dtype = "i32", device = "cpu"}).dtype)
    local e = H.err(vsalab.problem.build, {H = 1, Sq = 128, D = 16, topk = 1, seed = 1, device = "cpu", ragegd = true})
    assert.truthy(e:find("problem.build: unknown field 'ragegd' (takes B, H, Sq", 1, true), e)
    e = H.err(vsalab.problem.build, {H = 1, latent = {4, 4, 8}, D = 16, topk = 1, seed = 1, device = "cpu", lsits = "vsa:4"})
    assert.truthy(e:find("unknown field 'lsits'", 1, true), e)
  end)

  it("names what problem.build was given: a block size as a string, a bad Sq, vbs of another block size", function()
    local base = {H = 1, D = 16, topk = 1, seed = 1, device = "cpu"}
    local function build(extra)
      local s = {}
      for k, v in pairs(base) do s[k] = v end
      for k, v in pairs(extra) do s[k] = v end
      return H.err(vsalab.problem.build, s)
    end
    -- Once "block size 128 is not supported (supported: 64, 128)".
    local e = build{Sq = 256, block = "128"}
    assert.truthy(e:find('block size "128" (a string; give the number) is not supported', 1, true), e)
    -- Once "Skv = 192 ...": the Sq given is the default Skv.
    e = build{Sq = 192, block = 128}
    assert.truthy(e:find("problem.build: Sq = 192 is not a positive multiple of the block size 128", 1, true), e)
    -- Once "q2k_num: expected shape [1,1,4], got [1,1,2]", from the forward.
    e = build{Sq = 256, block = 128, vbs = vsalab.full({4}, 64, {dtype = "i32"})}
    assert.truthy(e:find("problem.build: vbs: expected shape [2] (Skv 256 / block 128), got [4]", 1, true), e)
    -- Each names its field, without a source position (once "shape: entry
    -- 2 ...", "field 'T' is required", "problem.lua:184: field 'density' ...").
    -- (none: base's fields the case leaves out)
    for _, c in ipairs{
        {{Sq = 128, H = "x"}, 'problem.build: H must be an integer in [1, 65535], got "x"'},
        {{Sq = 128, B = 1.5}, "problem.build: B must be an integer in [1, 65535], got 1.5"},
        {{Sq = 128, D = 24}, "problem.build: D must be a multiple of 16 in [16, 256], got 24"},
        {{Sq = 128}, "problem.build: H is required", none = "H"},
        {{latent = {4, 4}}, "problem.build: latent must be {T, H, W}, got a table of 2 entries"},
        {{latent = {4, "x", 4}}, 'problem.build: latent H must be an integer in [1, 1048576], got "x"'},
        {{Sq = 128, density = 2}, "problem.build: field 'density' must be in (0, 1]", none = "topk"},
        {{Sq = 128, topk = 9}, "problem.build: field 'topk' must be an integer in [0, 2]"},
        {{Sq = 128, device = "gpu"}, "problem.build: device: expected 'cpu', 'cuda' or 'cuda:N', got 'gpu'"},
        {{Sq = 128, sm_scale = "x"}, "problem.build: field 'sm_scale' must be a number"},
        {{Sq = 128, vbs = "x"}, "problem.build: vbs must be an i32 tensor [2] (Skv / block), got string"}} do
      local s = {}
      for k, v in pairs(base) do s[k] = v end
      for k, v in pairs(c[1]) do s[k] = v end
      if c.none then s[c.none] = nil end
      s.seed = H.seed()
      e = H.err(vsalab.problem.build, s)
      assert.truthy(e:find(c[2], 1, true), e)
      assert.falsy(e:find(".lua:", 1, true), e)
      assert.falsy(e:find("entry", 1, true), e)
    end
  end)

  it("bounds seeds and sm_scale to what the arithmetic keeps exact", function()
    assert.truthy(H.err(function() vsalab.zeros({2}):fill_randn{seed = 2^64} end):match("2%^53"))
    assert.truthy(H.err(vsalab.random_topk, {B = 1, H = 1, nq = 2, nkv = 2, topk = 1, seed = math.huge}):match("2%^53"))
    assert.truthy(H.err(vsalab.problem.build, {H = 1, Sq = 64, D = 16, topk = 1, seed = 2^52, device = "cpu"}):match("2%^48"))
    local p = vsalab.problem.build{B = 1, H = 1, Sq = 64, D = 16, topk = 1, seed = 1, device = "cpu"}
    assert.truthy(H.err(vsalab.forward_ref, p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs, {sm_scale = 1e300}):match("sm_scale"))
    assert.truthy(H.err(vsalab.pair_count, vsalab.from_table({-5, 2}, {dtype = "i32"})):match("negative"))
    assert.is_nil(vsalab.tflops(-5, 128, 1))
  end)

  it("keeps rows and closes the run on os.exit, refuses logging inside a transaction", function()
    local dir = H.tmpdir()
    H.write(dir .. "/exit.lua", "vsalab.log{experiment='t', kernel='k'}\nos.exit(3)\n")
    local rc = H.vsalab("run --db " .. dir .. "/e.db " .. dir .. "/exit.lua")
    assert.equal(3, rc)
    local d = vsalab.db_open(dir .. "/e.db", {readonly = true})
    assert.equal("failed", d:q("SELECT status FROM run")[1].status)
    assert.equal(1, #d:q("SELECT * FROM result"))
    d:close()
    H.write(dir .. "/tx.lua", "vsalab.log{experiment='t', kernel='k'}\nvsalab.run().db:q('BEGIN')\nvsalab.log{experiment='t', kernel='k'}\n")
    local rc2, _, err = H.vsalab("run --db " .. dir .. "/t.db " .. dir .. "/tx.lua")
    assert.equal(1, rc2)
    assert.truthy(err:match("transaction is open"))
    os.execute("rm -rf " .. dir)
  end)

  it("marks a run interrupted by SIGINT or SIGTERM (timeout sends two)", function()
    local dir = H.tmpdir()
    for _, sig in ipairs{"INT", "TERM"} do
      local db = dir .. "/" .. sig .. ".db"
      -- The signal comes once the loop runs (its first row committed), not
      -- at a fixed time that a slow start may not have reached. Sent to
      -- timeout, it is passed on as timeout's own: to the run, then to the
      -- group.
      local ready = dir .. "/" .. sig .. ".ready"
      H.write(dir .. "/loop.lua", string.format("vsalab.log{experiment='t', kernel='k'}\nio.open(%q, 'w'):close()\n"
        .. "while true do vsalab.log{experiment='t', kernel='k'} end\n", ready))
      local job = H.spawn("timeout -s " .. sig .. " 600 " .. H.exe .. " run --db " .. db .. " " .. dir .. "/loop.lua")
      H.wait_until("the loop's first row", function() return io.open(ready) end)
      os.execute("kill -" .. sig .. " " .. job.pid)
      job.wait("the run to stop at SIG" .. sig)
      local d = vsalab.db_open(db, {readonly = true})
      local r = d:q("SELECT status, error FROM run")[1]
      assert.equal("interrupted", r.status)
      -- The same words wherever it landed: no source position, no traceback.
      assert.equal("interrupted! (SIG" .. sig .. ")", r.error)
      assert.is_true(#d:q("SELECT id FROM result") >= 1)
      d:close()
    end
    os.execute("rm -rf " .. dir)
  end)

  it("says how to resume a run Ctrl-C stopped, without a traceback, and exits 130", function()
    local dir = H.tmpdir()
    local db = dir .. "/c.db"
    local ready = dir .. "/ready"
    local script = dir .. "/two rows.lua"
    -- Two rows, then a loop (a C call each turn: compiled loops run no
    -- hooks) until the interrupt; once resumed, the script ends.
    H.write(script, string.format("vsalab.log{experiment='t', kernel='k'}\nvsalab.log{experiment='t', kernel='k'}\n"
      .. "if not vsalab.context.resume then io.open(%q, 'w'):close()\n"
      .. "while true do vsalab.interrupt_pending() end end\n", ready))
    local job = H.spawn(H.exe .. " run --db " .. db .. " --seed 5 '" .. script .. "' n=1 'w=a b' 2>" .. dir .. "/err")
    H.wait_until("the loop", function() return io.open(ready) end)
    os.execute("kill -INT " .. job.pid)
    assert.equal(130, job.wait("the run to stop at SIGINT"))
    local f = assert(io.open(dir .. "/err"))
    local err = f:read("*a")
    f:close()
    assert.falsy(err:find("traceback", 1, true), err)
    assert.truthy(err:find("vsalab: interrupted! (SIGINT)\n", 1, true), err)
    local cmd = err:match("vsalab: run 1 interrupted after 2 rows; continue with `([^`]+)`\n")
    assert.truthy(cmd, err)
    assert.equal(H.exe .. " run --db " .. db .. " --seed 5 --resume 1 '" .. script .. "' n=1 'w=a b'", cmd)
    -- The command it gives resumes the run.
    local rc, _, err2 = H.sh(cmd)
    assert.equal(0, rc, err2)
    local d = vsalab.db_open(db, {readonly = true})
    local r = d:q("SELECT status, (SELECT count(*) FROM result) AS n FROM run")[1]
    d:close()
    assert.equal("finished", r.status)
    assert.equal(4, r.n)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("takes one process's repeated signal as one interrupt, and a later one as a forced exit", function()
    local dir = H.tmpdir()
    -- The script's error handler takes `slow` seconds, so the run is still
    -- unwinding when the second signal comes 0.6 s after the first (more
    -- than the 0.2 s a terminal's pair gets: a loaded host can put that much
    -- between `timeout`'s signal to the process and to its group).
    local function run_twice(gap, slow)
      local db = dir .. "/" .. gap .. ".db"
      local ready = dir .. "/" .. gap .. ".ready"
      H.write(dir .. "/slow.lua", string.format([[
        local function loop()
          vsalab.log{experiment = 't', kernel = 'k'}
          io.open(%q, 'w'):close()
          -- (a C call each turn: LuaJIT's compiled loops run no hooks)
          while true do vsalab.interrupt_pending() end
        end
        xpcall(loop, function(e) os.execute('sleep %g') return e end)
      ]], ready, slow))
      local job = H.spawn(H.exe .. " run --db " .. db .. " " .. dir .. "/slow.lua")
      H.wait_until("the loop", function() return io.open(ready) end)
      -- Both from one shell: the same sender.
      os.execute(string.format("sh -c 'kill -TERM %d; sleep %g; kill -TERM %d' 2>/dev/null", job.pid, gap, job.pid))
      local rc = job.wait("the run to stop")
      local d = vsalab.db_open(db, {readonly = true})
      local status = d:q("SELECT status FROM run")[1].status
      d:close()
      return rc, status
    end
    local rc, status = run_twice(0.6, 3)
    assert.is_not.equal(128 + 15, rc)
    assert.equal("interrupted", status)
    -- 5 s later, from the same shell: a person insisting (well past the
    -- 2 s window even if the first signal reached a starved run late). It
    -- exits at once, by the signal (the run row is left as it was).
    rc, status = run_twice(5, 30)
    assert.equal(128 + 15, rc)
    assert.equal("running", status)
    os.execute("rm -rf " .. dir)
  end)

  it("rejects an out-of-range density from -a as a usage error, before any run row", function()
    local dir = H.tmpdir()
    local smoke = H.root .. "/experiments/smoke.lua"
    for _, a in ipairs{"density=2", "density=0", "density=[0.5,3]"} do
      local rc, _, err = H.vsalab("run --db " .. dir .. "/d.db " .. smoke .. " -a '" .. a .. "'")
      H.usage_error(rc, err, "argument 'density': expected a number in (0, 1]", a)
      -- ... naming the -a it came from, as -a H=0 does.
      assert.truthy(err:find("(-a " .. a .. ")", 1, true), err)
    end
    assert.is_nil(io.open(dir .. "/d.db"))
    local exp = require "vsalab.experiment"
    assert.equal(2, exp.check_point({density = 2, topk = 2}).topk) -- topk decides then
    os.execute("rm -rf " .. dir)
  end)

  it("rejects single-dash and empty options on the command line", function()
    assert.equal(2, (H.vsalab("run -x ok.lua")))
    assert.equal(2, (H.vsalab("run --db '' ok.lua")))
    -- A DB that keeps nothing: every measured row would be gone at exit.
    local rc, _, err = H.vsalab("run --db :memory: " .. H.root .. "/experiments/smoke.lua")
    assert.equal(2, rc)
    assert.truthy(err:find("run --db :memory: would keep no measured row", 1, true), err)
    assert.equal(2, (H.vsalab("run --seed 281474976710657 ok.lua")))
  end)

  it("closes the run even when the script drops the vsalab global", function()
    local dir = H.tmpdir()
    H.write(dir .. "/nil.lua", "vsalab.log{experiment='t', kernel='k'}\nvsalab = nil\nerror('late')\n")
    assert.equal(1, (H.vsalab("run --db " .. dir .. "/n.db " .. dir .. "/nil.lua")))
    local d = vsalab.db_open(dir .. "/n.db", {readonly = true})
    assert.equal("failed", d:q("SELECT status FROM run")[1].status)
    d:close()
    os.execute("rm -rf " .. dir)
  end)

  it("refuses device files and NUL bytes as database paths", function()
    assert.truthy(H.err(vsalab.db_open, "/dev/null"):match("not a regular file"))
    assert.truthy(H.err(vsalab.db_open, "/tmp/a\0b.db"):match("NUL"))
  end)

  it("encodes mixed tables as JSON objects, not truncated arrays", function()
    assert.equal('{"1":1,"a":2}', vsalab.json.encode({1, a = 2}))
    assert.equal("[1,2]", vsalab.json.encode({1, 2}))
  end)
end)

describe("experiment runner", function()
  it("logs an out-of-memory point as skipped and goes on", function()
    local dir = H.tmpdir()
    H.write(dir .. "/oom.lua", [[
      local exp = require "vsalab.experiment"
      exp.run{name = "oom", device = "cpu", check = "full", seed = 1, configs = {
        {B = 1, H = 4096, Sq = 2^24, D = 256, topk = 1},
        {B = 1, H = 1, Sq = 128, D = 16, topk = 1}}}
    ]])
    local rc, _, err = H.vsalab("run --db " .. dir .. "/o.db " .. dir .. "/oom.lua")
    assert(rc == 0, err)
    local d = vsalab.db_open(dir .. "/o.db", {readonly = true})
    local rows = d:q("SELECT kernel, note, passed FROM result ORDER BY id")
    assert.equal("config", rows[1].kernel)
    assert.truthy(rows[1].note:match("^skipped %(out of memory%): .*out of host memory"))
    assert.equal("reference", rows[3].kernel)
    assert.equal(1, rows[3].passed)
    assert.equal("finished", d:q("SELECT status FROM run")[1].status)
    d:close()
    os.execute("rm -rf " .. dir)
  end)
end)

describe("resume and point timeout", function()
  -- A CPU sweep over densities whose density-1.0 point raises when
  -- VSALAB_TEST_FAIL is set; it prints the timing mode it was given.
  local function write_sweep(path, name, densities, run_opts)
    H.write(path, string.format([[
      local exp = require "vsalab.experiment"
      local sweep = require "vsalab.sweep"
      local sw = sweep.new{axes = {{"density", %s}}, fixed = {B = 1, H = 1, Sq = 128, D = 16}}
      local configs = {}
      for _, p in ipairs(sw:points()) do
        if p.density == 1.0 and os.getenv("VSALAB_TEST_FAIL") then p.H = "x" end
        configs[#configs + 1] = p
      end
      exp.run{name = %q, device = "cpu", configs = configs, %s}
      print("timing=" .. tostring(vsalab.context.timing))
    ]], densities, name, run_opts))
  end

  it("--resume continues a failed run, skipping the points it measured", function()
    local dir = H.tmpdir()
    write_sweep(dir .. "/three.lua", "three", "{0.25, 0.5, 1.0}", 'check = "full", seed = 1')
    local db = dir .. "/r.db"
    local rc = H.sh("VSALAB_TEST_FAIL=1 " .. H.exe .. " run --db " .. db .. " " .. dir .. "/three.lua")
    assert.equal(1, rc)
    local d = vsalab.db_open(db, {readonly = true})
    assert.equal("failed", d:q("SELECT status FROM run")[1].status)
    assert.equal(4, #d:q("SELECT id FROM result"))
    d:close()
    local rc2, _, err = H.vsalab("run --db " .. db .. " --resume 1 " .. dir .. "/three.lua")
    assert(rc2 == 0, err)
    d = vsalab.db_open(db, {readonly = true})
    assert.equal(1, #d:q("SELECT id FROM run"))
    assert.equal("finished", d:q("SELECT status FROM run")[1].status)
    local rows = d:q("SELECT kernel, count(*) AS n, count(DISTINCT point_hash) AS points FROM result GROUP BY kernel ORDER BY kernel")
    assert.same({"kernel", "n", "points"}, rows.columns)
    rows.columns = nil
    assert.same({{kernel = "invert", n = 3, points = 3}, {kernel = "reference", n = 3, points = 3}}, rows)
    local ended = d:q("SELECT ended_at FROM run")[1].ended_at
    d:close()
    -- Resumed once more, complete already: it says so per point, builds
    -- nothing and prints no empty table, and the run keeps its end time.
    H.sh("sleep 0.02")
    local rc3, out3, err3 = H.vsalab("run --db " .. db .. " --resume 1 " .. dir .. "/three.lua")
    assert.equal(0, rc3, err3)
    d = vsalab.db_open(db, {readonly = true})
    assert.same({status = "finished", ended_at = ended}, d:q("SELECT status, ended_at FROM run")[1])
    d:close()
    assert.falsy(err3:find("building inputs", 1, true), err3)
    assert.truthy(err3:find("already measured in this run (resume)", 1, true), err3)
    assert.falsy(out3:find("kernel", 1, true), out3)
    assert.equal(2, (H.vsalab("run --db " .. db .. " --resume 7 " .. dir .. "/three.lua")))
    assert.equal(2, (H.vsalab("run --resume x " .. dir .. "/three.lua")))
    os.execute("rm -rf " .. dir)
  end)

  it("--resume measures a second experiment of one script over the same points", function()
    -- Its points have the first's hashes: a resume took them as measured,
    -- logged nothing for them and ended the run 'finished'.
    local dir = H.tmpdir()
    H.write(dir .. "/two.lua", [[
      local exp = require "vsalab.experiment"
      local sweep = require "vsalab.sweep"
      local function sw() return sweep.new{axes = {{"density", {0.5}}}, fixed = {B = 1, H = 1, Sq = 128, D = 16}} end
      exp.run{name = "first", device = "cpu", sweep = sw(), check = "full", seed = 1}
      if os.getenv("VSALAB_TEST_FAIL") then error("stopped between the experiments") end
      exp.run{name = "second", device = "cpu", sweep = sw(), check = "full", seed = 1}
    ]])
    local db = dir .. "/r.db"
    assert.equal(1, (H.sh("VSALAB_TEST_FAIL=1 " .. H.exe .. " run --db " .. db .. " " .. dir .. "/two.lua")))
    local rc, _, err = H.vsalab("run --db " .. db .. " --resume 1 " .. dir .. "/two.lua")
    assert(rc == 0, err)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT experiment, count(*) AS n FROM result GROUP BY experiment ORDER BY experiment")
    rows.columns = nil
    d:close()
    assert.same({{experiment = "first", n = 2}, {experiment = "second", n = 2}}, rows)
    os.execute("rm -rf " .. dir)
  end)

  it("--resume takes the run's seed and timing and refuses other settings", function()
    local dir = H.tmpdir()
    write_sweep(dir .. "/seeds.lua", "seeds", "{0.5, 1.0}", "seed = vsalab.context.seed")
    local db = dir .. "/r.db"
    local base = H.exe .. " run --db " .. db .. " "
    assert.equal(1, (H.sh("VSALAB_TEST_FAIL=1 " .. base .. "--seed 7 --timing cold " .. dir .. "/seeds.lua a=1")))
    local rc, out, err = H.sh(base .. "--resume 1 " .. dir .. "/seeds.lua a=1")
    assert(rc == 0, err)
    assert.truthy(out:find("timing=cold", 1, true), out)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT json_extract(extra, '$.seed') AS seed, json_extract(extra, '$.point') AS point FROM result WHERE kernel = 'reference' ORDER BY id")
    d:close()
    assert.equal(2, #rows)
    -- Each point's seed derives from the run seed: rebuilt from 7, the new
    -- point's seed is what a fresh --seed 7 run gives it.
    local rc2, out2 = H.sh(H.exe .. " run --db " .. dir .. "/fresh.db --seed 7 " .. dir .. "/seeds.lua a=1")
    assert.equal(0, rc2, out2)
    local f = vsalab.db_open(dir .. "/fresh.db", {readonly = true})
    local fresh = f:q("SELECT json_extract(extra, '$.seed') AS seed, json_extract(extra, '$.point') AS point FROM result WHERE kernel = 'reference' ORDER BY id")
    f:close()
    assert.is_number(rows[2].seed)
    assert.equal(fresh[2].seed, rows[2].seed)
    assert.equal(fresh[2].point, rows[2].point)
    for _, bad in ipairs{"--seed 8 --resume 1 " .. dir .. "/seeds.lua a=1",
                         "--timing hot --resume 1 " .. dir .. "/seeds.lua a=1",
                         "--resume 1 " .. dir .. "/seeds.lua a=2",
                         "--resume 1 " .. dir .. "/seeds.lua"} do
      local rc3, _, err3 = H.sh(base .. bad)
      assert.equal(2, rc3, bad)
      assert.truthy(err3:find("--resume: run 1", 1, true), err3)
      assert.falsy(err3:find("stack traceback", 1, true), err3)
    end
    -- A run the DB lacks: says what it has.
    local rc4, _, err4 = H.sh(base .. "--resume 99 " .. dir .. "/seeds.lua a=1")
    assert.equal(2, rc4, err4)
    assert.truthy(err4:find("--resume: no run 99 in " .. db .. " (the DB has 1 run, ids 1 to 1)", 1, true), err4)
    -- Another script of the same name is not the run's script.
    os.execute("mkdir -p " .. dir .. "/other && cp " .. dir .. "/seeds.lua " .. dir .. "/other/seeds.lua")
    local rc4, _, err4 = H.sh(base .. "--resume 1 " .. dir .. "/other/seeds.lua a=1")
    assert.equal(2, rc4, err4)
    assert.truthy(err4:find("ran " .. dir .. "/seeds.lua", 1, true), err4)
    os.execute("rm -rf " .. dir)
  end)

  it("--resume takes a run as the other commands name it: latest, latest~N, a revision prefix", function()
    local dir = H.tmpdir()
    write_sweep(dir .. "/two.lua", "two", "{0.5, 1.0}", 'check = "full", seed = 1')
    local db = dir .. "/r.db"
    local base = H.exe .. " run --db " .. db .. " "
    assert.equal(1, (H.sh("VSALAB_TEST_FAIL=1 " .. base .. dir .. "/two.lua")))
    -- It said "--resume expects a run id, got 'latest'".
    local rc, _, err = H.sh(base .. "--resume latest " .. dir .. "/two.lua")
    assert.equal(0, rc, err)
    local d = vsalab.db_open(db, {readonly = true})
    assert.same({{id = 1, status = "finished", n = 4}},
      (function(r) r.columns = nil; return r end)(d:q("SELECT id, status, (SELECT count(*) FROM result) AS n FROM run")))
    -- The run records the build's revision (tests/build/revision_test.sh
    -- proves a build finds one without git); a revision prefix names the
    -- run whatever this build's is (a tarball's may read "unknown").
    assert.equal(vsalab.git_rev, d:q("SELECT git_rev FROM run")[1].git_rev)
    d:close()
    d = vsalab.db_open(db)
    d:q("UPDATE run SET git_rev = '5eed0f1a2b3c'")
    d:close()
    rc, _, err = H.sh(base .. "--resume 5eed0f1a " .. dir .. "/two.lua")
    assert.equal(0, rc, err)
    assert.truthy(err:find("already measured in this run (resume)", 1, true), err)
    rc, _, err = H.sh(base .. "--resume latest~3 " .. dir .. "/two.lua")
    assert.equal(2, rc, err)
    assert.truthy(err:find("--resume: no run matches 'latest~3' (the DB has 1 run: latest~0 to latest~0)", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
    os.execute("rm -rf " .. dir)
  end)

  -- DIR/slow.lua: a run that holds after its first row until DIR/release
  -- exists (or 300 s pass), having made DIR/ready: running whenever a
  -- resume comes.
  local function write_held(dir)
    H.write(dir .. "/slow.lua", string.format([[
      vsalab.log{experiment = "slow", kernel = "k"}
      io.open(%q, "w"):close()
      local t = vsalab.proc_now()
      while not io.open(%q) and vsalab.proc_now() - t < 300 do os.execute("sleep 0.05") end
    ]], dir .. "/ready", dir .. "/release"))
  end

  it("--resume refuses a run that is still running", function()
    local dir = H.tmpdir()
    write_held(dir)
    local db = dir .. "/r.db"
    local job = H.spawn(H.exe .. " run --db " .. db .. " " .. dir .. "/slow.lua >/dev/null 2>&1")
    H.wait_until("the run's first row", function() return io.open(dir .. "/ready") end)
    local rc, _, err = H.vsalab("run --db " .. db .. " --resume 1 " .. dir .. "/slow.lua")
    H.write(dir .. "/release", "")
    assert.equal(2, rc, err)
    assert.truthy(err:find("still running", 1, true), err)
    assert.equal(0, job.wait("the held run to finish"))
    os.execute("rm -rf " .. dir)
  end)

  it("--resume refuses a run another --resume is running (the row kept the first pid)", function()
    local dir = H.tmpdir()
    write_held(dir)
    local db = dir .. "/r.db"
    H.write(dir .. "/release", "")
    assert.equal(0, (H.vsalab("run --db " .. db .. " " .. dir .. "/slow.lua")))
    os.remove(dir .. "/release")
    os.remove(dir .. "/ready")
    local job = H.spawn(H.exe .. " run --db " .. db .. " --resume 1 " .. dir .. "/slow.lua >/dev/null 2>&1")
    H.wait_until("the resumed run's row", function() return io.open(dir .. "/ready") end)
    local rc, _, err = H.vsalab("run --db " .. db .. " --resume 1 " .. dir .. "/slow.lua")
    H.write(dir .. "/release", "")
    assert.equal(2, rc, err)
    assert.truthy(err:find("--resume: run 1 is still running (pid " .. job.pid, 1, true), err)
    assert.equal(0, job.wait("the resumed run to finish"))
    local _, out = H.vsalab("query --format csv --db " .. db .. " 'SELECT count(*) AS n FROM result'")
    assert.equal("n\n2\n", out)
    os.execute("rm -rf " .. dir)
  end)

  it("--point-timeout skips a slow point and goes on", function()
    local dir = H.tmpdir()
    -- The first point is slow by construction, whatever the host's speed:
    -- a backward that takes 60 s (in steps the timer can interrupt). The
    -- timer gives each point 5 s: the second point takes about 0.3 s (the
    -- reference's 0.25 s of samples, then its check), 0.5 under ASan on a
    -- loaded host, so a 0.5 s timer skipped it too there.
    H.write(dir .. "/slow.lua", [[
      local exp = require "vsalab.experiment"
      local backends = require "vsalab.backends"
      backends.register{name = "sleepy", description = "60 s at H = 2",
        supported = function(device, p) return device == "cpu" and (p == nil or p.H == 2) end,
        run = function(p)
          for _ = 1, 600 do os.execute("sleep 0.1") end
          return vsalab.backward_ref(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs)
        end}
      exp.run{name = "slow", device = "cpu", check = "full", seed = 1,
        kernels = {sleepy = true, reference = true}, configs = {
        {B = 1, H = 2, Sq = 128, D = 16, topk = 1, skip = {reference = true}},
        {B = 1, H = 1, Sq = 128, D = 16, topk = 1}}}
    ]])
    local db = dir .. "/t.db"
    local rc, _, err = H.vsalab("run --db " .. db .. " --point-timeout 5 " .. dir .. "/slow.lua")
    assert(rc == 0, err)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT kernel, note, passed FROM result WHERE kernel <> 'invert' ORDER BY id")
    assert.equal("config", rows[1].kernel)
    assert.equal("skipped (timeout after 5 s)", rows[1].note)
    -- The second point: sleepy, named in kernels=, does not take H = 1 and
    -- says so in a skipped row; the reference measures it.
    assert.equal(3, #rows)
    assert.equal("sleepy", rows[2].kernel)
    assert.equal("skipped: it does not take this point (its supported() gave no reason)", rows[2].note)
    assert.is_nil(rows[2].passed)
    assert.equal("reference", rows[#rows].kernel)
    assert.equal(1, rows[#rows].passed)
    d:close()
    assert.equal(2, (H.vsalab("run --point-timeout -1 " .. dir .. "/slow.lua")))
    os.execute("rm -rf " .. dir)
  end)
end)

describe("damaged databases", function()
  it("names a corrupt file instead of crashing", function()
    local dir = H.tmpdir()
    local path = dir .. "/c.db"
    local d = vsalab.db_open(path)
    d:begin_run{script = "x"}
    d:close()
    -- Overwrite the schema page (page 1 past the 100-byte header).
    local f = assert(io.open(path, "r+b"))
    f:seek("set", 100)
    f:write(string.rep("\171", 3996))
    f:close()
    os.remove(path .. "-wal")
    os.remove(path .. "-shm")
    assert.truthy(H.err(vsalab.db_open, path):match("corrupt"))
    local rc, _, err = H.vsalab("runs --db " .. path)
    assert.equal(2, rc)
    assert.truthy(err:match("corrupt"))
    os.execute("rm -rf " .. dir)
  end)

  it("refuses a run into a file damaged past its header, in one line, exit 2", function()
    -- The header and schema read fine; the first INSERT meets the bad page
    -- (run ended with exit 1 and a Lua traceback).
    local dir = H.tmpdir()
    local path = dir .. "/p.db"
    local rc = H.vsalab("run --db " .. path .. " " .. H.root .. "/experiments/smoke.lua -a density=[0.25]")
    assert.equal(0, rc)
    local f = assert(io.open(path, "r+b"))
    f:seek("set", 4096)
    f:write("XXXXXXXX")
    f:close()
    local rc2, _, err = H.vsalab("run --db " .. path .. " " .. H.root .. "/experiments/smoke.lua -a density=[0.25]")
    assert.equal(2, rc2)
    assert.truthy(err:match("is damaged"), err)
    assert.falsy(err:match("traceback"), err)
    assert.falsy(err:match("INSERT"), err)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("a Lua backend that returns the wrong outputs", function()
  it("fails its point naming what it returned, and the sweep goes on", function()
    -- A nil or a number ended the run with an internal error
    -- (experiment.lua: attempt to index local 't'), a misshapen tensor with
    -- check.lua's, and dq alone was checked (and could pass) on dq alone.
    local dir = H.tmpdir()
    for mode, want in pairs{["nil"] = "it returned nil for dq, not a tensor",
        shape = "it returned dq of shape [1,2,3], not [1,1,128,16]",
        one = "it returned nil for dk, not a tensor", num = "it returned number for dq, not a tensor"} do
      H.write(dir .. "/lb.lua", string.format([[
local mode = %q
vsalab.backends.register{name = "luab", supported = function(d) return d == "cpu" end, run = function(p)
  local ref = {vsalab.backends.get("reference").run(p)}
  if mode == "nil" then return nil end
  if mode == "num" then return 1, 2, 3 end
  if mode == "shape" then return vsalab.zeros({1, 2, 3}, {dtype = "bf16"}), ref[2], ref[3] end
  return ref[1]
end}
local exp = require "vsalab.experiment"
local sweep = require "vsalab.sweep"
exp.run{name = "lb", device = "cpu", sweep = sweep.new{axes = {{"density", {0.5, 1.0}}}, fixed = {B = 1, H = 1, Sq = 128, D = 16}},
  check = "full", seed = 1, kernels = {luab = true, reference = true}}]], mode))
      local db = dir .. "/" .. mode .. ".db"
      local rc, _, err = H.vsalab("run --db " .. db .. " " .. dir .. "/lb.lua")
      assert(rc == 0, mode .. ": " .. err)
      local d = vsalab.db_open(db, {readonly = true})
      local rows = d:q("SELECT passed, note FROM result WHERE kernel = 'luab'")
      d:close()
      assert.equal(2, #rows, mode)
      for _, r in ipairs(rows) do
        assert.equal(0, r.passed, mode)
        assert.equal("backend luab failed: " .. want, r.note)
      end
    end
    os.execute("rm -rf " .. dir)
  end)
end)
