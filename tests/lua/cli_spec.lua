-- The command line, the run row and the results DB, driven as a user would:
-- by starting build/vsalab in a subprocess.
local H = require "helpers"

describe("vsalab CLI", function()
  local dir = H.tmpdir()
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("prints its version and help", function()
    local rc, out = H.vsalab("--version")
    assert.equal(0, rc)
    assert.truthy(out:match("^vsalab %d+%.%d+%.%d+"))
    rc, out = H.vsalab("help")
    assert.equal(0, rc)
    assert.truthy(out:match("vsalab run"))
    -- help COMMAND is COMMAND --help.
    for _, cmd in ipairs{"run", "compare", "repl"} do
      local rc1, out1 = H.vsalab("help " .. cmd)
      local rc2, out2 = H.vsalab(cmd .. " --help")
      assert.equal(0, rc1)
      assert.equal(out2, out1)
      assert.truthy(out1:find("usage: vsalab " .. cmd, 1, true), out1)
    end
    -- compare's help gives the floors' defaults.
    local _, outc = H.vsalab("help compare")
    assert.truthy(outc:find("--floor-pct of 1 (default 2%)", 1, true), outc)
    assert.truthy(outc:find("--floor-ms (default 0.005 ms)", 1, true), outc)
    assert.truthy(outc:find("--floor-pct-host (default 50%)", 1, true), outc)
    local rc4, out4, err4 = H.vsalab("help --version")
    assert.equal(2, rc4)
    assert.equal("", out4)
    assert.truthy(err4:find("help takes a command, got the option '--version'", 1, true), err4)
    local rc3, _, err = H.vsalab("help bogus")
    assert.equal(2, rc3)
    assert.truthy(err:find("unknown command 'bogus'", 1, true), err)
    -- More than one word after help: a usage error (it printed the whole text, exit 0).
    rc3, _, err = H.vsalab("help run extra")
    assert.equal(2, rc3)
    assert.truthy(err:find("vsalab: help takes one command, got 2 words", 1, true), err)
  end)

  it("gives an experiment's own help after the script, before any run row", function()
    local db = dir .. "/help.db"
    for _, flag in ipairs{"--help", "-h"} do
      local rc, out, err = H.vsalab("run --db " .. db .. " " .. H.root .. "/experiments/smoke.lua " .. flag)
      assert.equal(0, rc, err)
      -- The script's header comment, then its arguments with their defaults.
      assert.truthy(out:find("smoke.lua — the main job's flow on tiny shapes", 1, true), out)
      assert.truthy(out:find("  device=cpu\n  kernels=all\n", 1, true), out)
      assert.truthy(out:find("peers=NAME", 1, true), out)
      -- The sweep's axes, as the script declares them.
      assert.truthy(out:find("the sweep's axes, with their defaults", 1, true), out)
      assert.truthy(out:find("\n  density=[0.25,0.5,1]\n", 1, true), out)
    end
    assert.is_nil(io.open(db), "help made a DB")
  end)

  it("gives the setup scripts' usage on --help without installing or building", function()
    -- A new user's `scripts/test.sh --help` ran apt, pip, cmake and the whole
    -- test suite; `setup.sh --help` handed --help to cmake (output hidden) and
    -- built. Stubs on PATH record any tool the scripts would start.
    local bin = dir .. "/stubs"
    os.execute("mkdir -p " .. bin)
    for _, tool in ipairs{"dpkg-query", "apt-get", "sudo", "python3", "cmake", "ctest", "nvcc"} do
      H.write(bin .. "/" .. tool, "#!/bin/sh\necho \"$0 $*\" >> " .. dir .. "/stub-calls\n")
      os.execute("chmod +x " .. bin .. "/" .. tool)
    end
    for _, s in ipairs{"setup.sh", "test.sh", "main-job.sh"} do
      for _, flag in ipairs{"--help", "-h"} do
        os.remove(dir .. "/stub-calls")
        local rc, out, err = H.sh("PATH=" .. bin .. ":$PATH " .. H.root .. "/scripts/" .. s .. " " .. flag)
        assert.equal(0, rc, s .. " " .. flag .. ": " .. err)
        assert.truthy(out:find("usage: scripts/" .. s, 1, true), out)
        assert.is_nil(io.open(dir .. "/stub-calls"), s .. " " .. flag .. " started a tool")
      end
    end
    local rc, _, err = H.sh("PATH=" .. bin .. ":$PATH " .. H.root .. "/scripts/test.sh --bogus")
    assert.equal(2, rc)
    assert.truthy(err:find("takes no arguments", 1, true), err)
    assert.is_nil(io.open(dir .. "/stub-calls"), "test.sh --bogus started a tool")
    -- main-job.sh --db with no value was bash's "$2: unbound variable" (exit 1)
    -- after the build; it and an unknown option now stop before any tool.
    for _, case in ipairs{{"--db", "--db needs a value"}, {"--timing", "--timing needs a value"},
        {"--bogus x", "unknown option --bogus"}} do
      os.remove(dir .. "/stub-calls")
      local rc2, _, err2 = H.sh("PATH=" .. bin .. ":$PATH " .. H.root .. "/scripts/main-job.sh " .. case[1])
      assert.equal(2, rc2, case[1] .. ": " .. err2)
      assert.truthy(err2:find(case[2], 1, true), err2)
      assert.is_nil(io.open(dir .. "/stub-calls"), "main-job.sh " .. case[1] .. " started a tool")
    end
    -- Without a GPU, main-job.sh says so before it sets up or builds
    -- anything (it built for minutes, then failed in the run). nvidia-smi
    -- as a driver without a GPU answers it, and as one that cannot reach it.
    for _, smi in ipairs{{6, "No devices were found"},
        {9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."}} do
      H.write(bin .. "/nvidia-smi", string.format('#!/bin/sh\necho "%s"\nexit %d\n', smi[2], smi[1]))
      os.execute("chmod +x " .. bin .. "/nvidia-smi")
      os.remove(dir .. "/stub-calls")
      local rc3, out3, err3 = H.sh("PATH=" .. bin .. ":$PATH " .. H.root .. "/scripts/main-job.sh --db x.db -a H=40")
      assert.equal(2, rc3, err3)
      assert.equal("", out3)
      assert.truthy(err3:find("main-job.sh: nvidia-smi finds no GPU here (" .. smi[2] .. ")", 1, true), err3)
      assert.truthy(err3:find("experiments/smoke.lua runs the same flow on the CPU", 1, true), err3)
      assert.is_nil(io.open(dir .. "/stub-calls"), "main-job.sh without a GPU started a tool")
    end
    os.remove(bin .. "/nvidia-smi")
  end)

  it("suggests the name a typo meant, hints a list's brackets, and exits 2 for a missing script", function()
    local smoke = H.root .. "/experiments/smoke.lua"
    local db = dir .. "/typo.db"
    for _, case in ipairs{
        {"runz", "unknown command 'runz' (did you mean 'run'?"},
        {"comprae 1 2", "unknown command 'comprae' (did you mean 'compare'?"},
        {"-i x.lua", "'-i' is the REPL's option: vsalab repl -i SCRIPT"},
        {"< /dev/null", "the REPL opens only on a terminal: `vsalab repl` reads piped input"},
        {"run --db " .. db .. " " .. smoke .. " kernels=refrence", "no backward 'refrence' (did you mean 'reference'?)"},
        {"run --db " .. db .. " " .. smoke .. " -a densty=[0.5]", "no axis 'densty' (did you mean 'density'?)"},
        {"run --db " .. db .. " " .. smoke .. " devise=cpu", "argument 'devise': unknown (did you mean 'device'?)"},
        {"run --db " .. db .. " " .. smoke .. " -a density=0.5,0.25",
         "-a density=0.5,0.25: a list is written in brackets: -a 'density=[0.5,0.25]'"},
        {"run --db " .. db .. " " .. dir .. "/no-such-script.lua", "cannot open " .. dir .. "/no-such-script.lua"}} do
      local rc, _, err = H.vsalab(case[1])
      assert.equal(2, rc, case[1] .. ": " .. err)
      assert.truthy(err:find(case[2], 1, true), err)
      assert.falsy(err:find("traceback", 1, true), err)
    end
    -- A name far from every command gets no guess.
    local _, _, err = H.vsalab("xyzzy")
    assert.truthy(err:find("unknown command 'xyzzy' (see vsalab help)", 1, true), err)
    -- Nothing was run: no DB was made.
    assert.is_nil(vsalab.file_type(db))
  end)

  it("exits 2 on usage errors", function()
    assert.equal(2, (H.vsalab("frobnicate")))
    assert.equal(2, (H.vsalab("run")))
    assert.equal(2, (H.vsalab("run --device x s.lua")))
    assert.equal(2, (H.vsalab("run --seed -3 s.lua")))
    local rc0, _, err0 = H.vsalab("run --timing hot --context timing=graph s.lua")
    assert.equal(2, rc0)
    assert.truthy(err0:find("reserved for --timing", 1, true), err0)
    local rc, _, err = H.vsalab("run --bogus 1 s.lua")
    assert.equal(2, rc)
    assert.truthy(err:match("unknown option"))
    local rc1, _, err1 = H.vsalab("run --timing warm s.lua")
    assert.equal(2, rc1)
    assert.truthy(err1:find("--timing expects hot, cold, graph or sustained, got 'warm'", 1, true), err1)
    -- A timeout past the bound was refused as if it were not positive.
    local rc2, _, err2 = H.vsalab("run --point-timeout 1e9 s.lua")
    assert.equal(2, rc2)
    assert.truthy(err2:find("--point-timeout expects seconds > 0 and below 1e7 (about 115 days), got '1e9'", 1, true), err2)
  end)

  it("logs the rows of a --timing sustained run as mode 'sustained'", function()
    -- End to end (the row validator refused 'sustained' once; only the GPU saw it).
    H.write(dir .. "/sus.lua", [[
      require("vsalab.bench").sustained_s = 0.05
      local exp = require "vsalab.experiment"
      local sweep = require "vsalab.sweep"
      local sw = sweep.new{axes = {{"density", {0.5}}}, fixed = {B = 1, H = 1, Sq = 128, D = 16}}
      exp.run{name = "sus", device = "cpu", configs = sw:points(), check = "full", seed = 3}
    ]])
    local db = dir .. "/sus.db"
    local rc, _, err = H.vsalab("run --timing sustained --db " .. db .. " " .. dir .. "/sus.lua")
    assert(rc == 0, err)
    -- Its progress lines say the samples were sustained ones.
    assert.truthy(err:find("reference [%d.]+ ms, noise [%d.e+-]+%% %(%d+ sustained samples, "), err)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT mode, samples, passed FROM result WHERE kernel <> 'invert'")
    d:close()
    assert.truthy(#rows > 0)
    for _, r in ipairs(rows) do
      assert.equal("sustained", r.mode)
      assert.equal(1, r.passed)
    end
  end)

  it("prints a point's noise as a percentage, however large", function()
    -- A loaded host's samples spread past 100%: "%.2g" printed "1.2e+02%".
    -- This backend reports its own timing (as a peer does), so the noise
    -- is what the test says, not what this host's load makes it.
    H.write(dir .. "/noisy.lua", [[
      local backends = require "vsalab.backends"
      local ref = backends.get("reference")
      backends.register{name = "noisy", run = ref.run, supported = ref.supported,
        measure = function(p)
          local dq, dk, dv = ref.run(p)
          return {dq = dq, dk = dk, dv = dv}, {median = 2, mean = 2, min = 1, max = 4,
            stddev = 2.468, rel_stddev = 1.234, samples = 5, stop = "max_time"}
        end}
      local sw = vsalab.sweep.new{axes = {{"density", {0.5}}}, fixed = {B = 1, H = 1, Sq = 128, D = 16}}
      vsalab.experiment.run{name = "noisy", device = "cpu", configs = sw:points(), check = "full",
        seed = 3, kernels = {noisy = true}}
    ]])
    local rc, _, err = H.vsalab("run --db " .. dir .. "/noisy.db " .. dir .. "/noisy.lua")
    assert.equal(0, rc, err)
    assert.truthy(err:find("noisy 2 ms, noise 123% (5 samples, max_time)", 1, true), err)
    local r = require "vsalab.report"
    assert.equal("1.2%", r.percent(0.0123))
    assert.equal("0.01%", r.percent(0.000123))
    assert.equal("0.00%", r.percent(0))
    assert.equal("1234%", r.percent(12.34))
  end)

  it("passes script args and exits 1 with a traceback on a script's error", function()
    H.write(dir .. "/args.lua", [[print(#arg, arg[0], arg[1], arg[2], select('#', ...), vsalab.context.seed)]])
    local rc, out = H.vsalab("run --seed 77 " .. dir .. "/args.lua a b")
    assert.equal(0, rc)
    assert.truthy(out:match("^2\t.-args%.lua\ta\tb\t2\t77"))
    H.write(dir .. "/bad.lua", "local function f() error('boom') end\nf()\n")
    local rc2, _, err = H.vsalab("run " .. dir .. "/bad.lua")
    assert.equal(1, rc2)
    assert.truthy(err:match("boom"))
    assert.truthy(err:match("stack traceback"))
    -- A script that is not there is the command line's mistake: exit 2, as a missing DB.
    local rc3, _, err3 = H.vsalab("run " .. dir .. "/missing.lua")
    assert.equal(2, rc3)
    assert.truthy(err3:match("cannot open"))
  end)

  it("records a finished run with its rows", function()
    local db = dir .. "/ok.db"
    H.write(dir .. "/log.lua", [[
      for i = 1, 3 do vsalab.log{experiment = "t", kernel = "k", B = 1, H = i,
        ms_median = i, errors = {dq = {rel_l2 = 1e-3, passed = true}}} end]])
    local rc0, _, err0 = H.vsalab("run --db " .. db .. " " .. dir .. "/log.lua x")
    assert.equal(0, rc0, err0)
    -- It says where the rows went, with the command that shows them.
    assert.truthy(err0:find("vsalab: run 1 finished: 3 rows in " .. db .. "; see them with `"
      .. H.exe .. " show 1 --db " .. db .. "`", 1, true), err0)
    local d = vsalab.db_open(db, {readonly = true})
    local runs = d:q("SELECT status, ended_at, script, args, seed FROM run")
    assert.equal(1, #runs)
    assert.equal("finished", runs[1].status)
    assert.truthy(runs[1].ended_at)
    assert.equal('["x"]', runs[1].args)
    assert.equal(3, #d:q("SELECT * FROM result"))
    assert.equal(3, #d:q("SELECT * FROM result_error WHERE output = 'dq'"))
    d:close()
  end)

  it("marks a failed run and keeps its rows", function()
    local db = dir .. "/fail.db"
    H.write(dir .. "/fail.lua", [[
      vsalab.log{experiment = "t", kernel = "k"}
      error("late failure")]])
    assert.equal(1, (H.vsalab("run --db " .. db .. " " .. dir .. "/fail.lua")))
    local d = vsalab.db_open(db, {readonly = true})
    local r = d:q("SELECT status, error FROM run")[1]
    assert.equal("failed", r.status)
    assert.truthy(r.error:match("late failure"))
    assert.equal(1, #d:q("SELECT * FROM result"))
    d:close()
  end)

  it("keeps every row of a killed run, marked not finished", function()
    local db = dir .. "/killed.db"
    H.write(dir .. "/die.lua", [[
      for i = 1, 3 do vsalab.log{experiment = "t", kernel = "k", H = i} end
      os.execute("kill -9 " .. vsalab.context.pid)
      vsalab.log{experiment = "t", kernel = "never"}]])
    local rc = H.vsalab("run --db " .. db .. " " .. dir .. "/die.lua")
    assert.are_not.equal(0, rc)
    local d = vsalab.db_open(db, {readonly = true})
    local r = d:q("SELECT status, ended_at FROM run")[1]
    assert.equal("running", r.status)
    assert.is_nil(r.ended_at)
    assert.equal(3, #d:q("SELECT * FROM result"))
    d:close()
  end)

  it("rejects bad rows by field name and leaves the DB intact", function()
    local d = vsalab.db_open(dir .. "/rows.db")
    local id = d:begin_run{script = "x"}
    local e = H.err(function() d:log{run_id = id, experiment = "t", kernel = "k", Bx = 1} end)
    assert.truthy(e:match("Bx"))
    e = H.err(function() d:log{run_id = id, experiment = "t", kernel = "k", B = "one"} end)
    assert.truthy(e:match("'B'"))
    e = H.err(function() d:log{run_id = id, experiment = "t", kernel = "k", mode = "warm"} end)
    assert.truthy(e:find("'mode' must be 'hot', 'cold', 'graph' or 'sustained'", 1, true), e)
    e = H.err(function() d:log{run_id = id, experiment = "t", kernel = "k", note = "a\0b"} end)
    assert.truthy(e:match("'note' must not contain a NUL byte"), e)
    assert.equal(0, #d:q("SELECT * FROM result"))
    d:close()
    assert.truthy(H.err(function() d:q("SELECT 1") end):match("closed"))
  end)

  it("refuses a row for another run, at a block size vsalab does not take, or with an extra it cannot store", function()
    local db = dir .. "/logbad.db"
    H.write(dir .. "/logbad.lua", [[
      for _, row in ipairs{{run_id = 999}, {block = 96}, {extra = {u = newproxy()}}, {extra = "{bad"},
                           {block = "64"}} do
        row.experiment, row.kernel = "t", "k"
        local ok, e = pcall(vsalab.log, row)
        print(ok and "logged" or e)
      end
      vsalab.log{experiment = "t", kernel = "k", block = 128}]])
    local rc, out, err = H.vsalab("run --db " .. db .. " " .. dir .. "/logbad.lua")
    assert.equal(0, rc, err)
    assert.truthy(out:find("vsalab.log: field 'run_id' is 999, but rows go to this run (1); leave it out", 1, true), out)
    assert.truthy(out:find("vsalab.log: field 'block' is 96, not a block size vsalab takes (64, 128)", 1, true), out)
    assert.truthy(out:find("vsalab.log: field 'extra': json: cannot encode a userdata", 1, true), out)
    assert.truthy(out:find("vsalab.log: field 'extra' must be a table or JSON text, got '{bad'", 1, true), out)
    assert.truthy(out:find("vsalab.log: field 'block' must be a number, got string", 1, true), out)
    assert.falsy(err:find("could not be written", 1, true), err) -- not said as a failing disk
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT block FROM result")
    d:close()
    assert.equal(1, #rows) -- only the good row
    assert.equal(128, rows[1].block)
  end)

  it("refuses a file that is not a database", function()
    H.write(dir .. "/notes.txt", "hello, this is not sqlite\n")
    assert.truthy(H.err(vsalab.db_open, dir .. "/notes.txt"):match("not a SQLite database"))
    H.write(dir .. "/log2.lua", "vsalab.log{experiment='t', kernel='k'}")
    local rc, _, err = H.vsalab("run --db " .. dir .. "/notes.txt " .. dir .. "/log2.lua")
    H.usage_error(rc, err, "not a SQLite database") -- a DB that cannot be opened is a usage error
  end)

  it("runs the smoke experiment end to end on the CPU", function()
    local db = dir .. "/smoke.db"
    local rc, out, err = H.vsalab("run --db " .. db .. " " .. H.root .. "/experiments/smoke.lua")
    assert(rc == 0, err)
    assert.truthy(out:match("reference"))
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT kernel, passed, tflops FROM result WHERE kernel = 'reference'")
    assert.equal(4, #rows)
    for _, r in ipairs(rows) do assert.equal(1, r.passed) end
    assert.equal(12, #d:q("SELECT * FROM result_error"))
    assert.equal("finished", d:q("SELECT status FROM run")[1].status)
    d:close()
  end)
end)
