-- External backends (lua/vsalab/external.lua): .npy files both ways, the
-- protocol end to end with a peer in a second vsalab process
-- (tests/peers/ref_peer.lua, no Python needed) and, when numpy is
-- installed, the numpy peer; peers that fail, write garbage or NaN.
local H = require "helpers"

describe("npy files", function()
  local dir = H.tmpdir()
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("round-trip every dtype and view", function()
    local s = H.seed()
    for _, dt in ipairs{"bf16", "f32", "f64", "i32", "i64"} do
      local t = vsalab.empty({3, 5, 7}, {dtype = "f32"}):fill_randn{seed = s}:to_dtype(dt)
      local path = dir .. "/" .. dt .. ".npy"
      vsalab.npy_save(path, t:transpose(1, 3)) -- a strided view, written C-contiguous
      local back = vsalab.npy_load(path, {shape = {7, 5, 3}})
      assert.equal(dt, back.dtype)
      assert.equal(0, vsalab.compare(back:to_dtype("f64"), t:transpose(1, 3):contiguous():to_dtype("f64")).max_abs)
    end
    -- f32 read as bf16 rounds like to_dtype.
    local f = vsalab.empty({64}, {dtype = "f32"}):fill_randn{seed = s + 1}
    vsalab.npy_save(dir .. "/f.npy", f)
    local b = vsalab.npy_load(dir .. "/f.npy", {dtype = "bf16"})
    assert.equal(0, vsalab.compare(b:to_dtype("f64"), f:to_dtype("bf16"):to_dtype("f64")).max_abs)
  end)

  it("writes the header numpy reads", function()
    vsalab.npy_save(dir .. "/h.npy", vsalab.zeros({2, 3}, {dtype = "bf16"}))
    local fh = assert(io.open(dir .. "/h.npy", "rb"))
    local head = fh:read(128)
    fh:close()
    assert.equal("\147NUMPY\1\0", head:sub(1, 8))
    assert.truthy(head:find("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }", 1, true))
    assert.equal(0, (#head:match("^(.-\n)") ) % 64)
  end)

  it("refuses truncated, Fortran-order and misshapen files, naming them", function()
    vsalab.npy_save(dir .. "/t.npy", vsalab.zeros({100}, {dtype = "f32"}))
    local all = assert(H.read(dir .. "/t.npy"))
    H.write(dir .. "/cut.npy", all:sub(1, #all - 10))
    assert.truthy(H.err(vsalab.npy_load, dir .. "/cut.npy"):find("cut.npy' is truncated", 1, true))
    H.write(dir .. "/fo.npy", (all:gsub("'fortran_order': False", "'fortran_order': True ")))
    assert.truthy(H.err(vsalab.npy_load, dir .. "/fo.npy"):find("Fortran order", 1, true))
    assert.truthy(H.err(vsalab.npy_load, dir .. "/t.npy", {shape = {10, 10}}):find("expected shape [10,10], got [100]", 1, true))
    H.write(dir .. "/no.npy", "hello")
    assert.truthy(H.err(vsalab.npy_load, dir .. "/no.npy"):find("not a .npy file", 1, true))
    assert.truthy(H.err(vsalab.npy_load, dir .. "/absent.npy"):find("no file", 1, true))
    -- A header that claims a huge shape: refused by the shape asked for,
    -- before anything is allocated (it read "out of host memory", which an
    -- experiment takes for a point too big to run), and the file is closed
    -- whatever is raised.
    local function header(path, shape)
      local h = "{'descr': '<u2', 'fortran_order': False, 'shape': " .. shape .. ", }"
      h = h .. string.rep(" ", (64 - (10 + #h + 1) % 64) % 64) .. "\n"
      H.write(path, "\147NUMPY\1\0" .. string.char(#h % 256, math.floor(#h / 256)) .. h)
    end
    header(dir .. "/huge.npy", "(100000, 100000, 100000)")
    header(dir .. "/wrap.npy", "(4294967296, 4294967296)")
    local function open_fds()
      local p = io.popen("ls /proc/" .. vsalab.context.pid .. "/fd | wc -l")
      local n = tonumber(p:read("*a"))
      p:close()
      return n
    end
    local fds = open_fds()
    for _ = 1, 20 do
      assert.truthy(H.err(vsalab.npy_load, dir .. "/huge.npy", {shape = {2, 3}})
        :find("huge.npy: expected shape [2,3], got [100000,100000,100000]", 1, true))
      H.err(vsalab.npy_load, dir .. "/huge.npy")
      H.err(vsalab.npy_load, dir .. "/wrap.npy")
    end
    assert.is_true(open_fds() < fds + 5, "npy_load left files open")
    -- A FIFO (a peer's trick) is refused at once instead of blocking forever.
    assert.equal(0, (H.sh("mkfifo " .. dir .. "/fifo.npy")))
    assert.truthy(H.err(vsalab.npy_load, dir .. "/fifo.npy"):find("not a regular file", 1, true))
  end)
end)

describe("json.decode", function()
  it("parses what json.encode writes, and refuses garbage", function()
    local t = vsalab.json.decode(vsalab.json.encode{samples_ms = {1.5, 2, 3}, note = "x\"y", ok = true, n = {a = {}}})
    assert.same({1.5, 2, 3}, t.samples_ms)
    assert.equal("x\"y", t.note)
    assert.is_true(t.ok)
    assert.truthy(H.err(vsalab.json.decode, "{not json"):find("json", 1, true))
    -- A function is no data: an error, not its address as a string.
    assert.equal("json: cannot encode a function", H.err(vsalab.json.encode, {f = print}))
    assert.equal("json: cannot encode a userdata", H.err(vsalab.json.encode, {u = newproxy()}))
    assert.equal("json: cannot encode a table as an object key", H.err(vsalab.json.encode, {[{}] = 1}))
    assert.equal("json: cannot parse an empty text", H.err(vsalab.json.decode, ""))
    assert.equal("json: cannot parse: malformed JSON", H.err(vsalab.json.decode, "{"))
    assert.equal("json: cannot parse: a NUL byte in the text", H.err(vsalab.json.decode, "[1]\0garbage"))
    assert.equal("json: cannot encode a cdata", H.err(vsalab.json.encode, {require("ffi").cast("void *", 1)}))
    -- Numbers are written in the fewest digits that read back exactly.
    assert.equal("[0.1,1.1,1e+300,0.30000000000000004,2.5]", vsalab.json.encode{0.1, 1.1, 1e300, 0.1 + 0.2, 2.5})
    for _, x in ipairs{0.1, 1 / 3, 2 ^ -1074, 1.7976931348623157e308, -123.456e-7} do
      assert.equal(x, vsalab.json.decode(vsalab.json.encode{x})[1])
    end
    -- Number keys keep 17 digits: 2^60 and 2^60 + 1024 are two keys.
    local two = vsalab.json.decode(vsalab.json.encode{[2 ^ 60] = 1, [2 ^ 60 + 1024] = 2})
    local n = 0
    for _ in pairs(two) do n = n + 1 end
    assert.equal(2, n)
  end)
end)

describe("external backends", function()
  local dir = H.tmpdir()
  teardown(function() os.execute("rm -rf " .. dir) end)
  local smoke = H.root .. "/experiments/smoke.lua -a density=[0.5]"

  it("refuse bad declarations", function()
    assert.truthy(H.err(vsalab.backends.external, {name = "x"}):find("field 'cmd'", 1, true))
    assert.truthy(H.err(vsalab.backends.external, {name = "a b", cmd = {"true"}}):find("field 'name'", 1, true))
    assert.truthy(H.err(vsalab.backends.external, {name = "x", cmd = {"true"}, foo = 1}):find("unknown field 'foo'", 1, true))
    assert.truthy(H.err(vsalab.backends.peer, "nosuch"):find("known: ", 1, true))
  end)

  it("run a peer process on the point's exact inputs, checked and timed in the same run", function()
    local db = dir .. "/e.db"
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. smoke .. " peers=lua-ref")
    assert(rc == 0, err)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q([[SELECT kernel, point_hash, passed, tflops, samples, extra FROM result
                       WHERE kernel IN ('reference', 'lua-ref') ORDER BY point_hash, kernel]])
    d:close()
    assert.equal(4, #rows)
    for i = 1, 4, 2 do -- same point, both kernels, both checked
      assert.equal(rows[i].point_hash, rows[i + 1].point_hash)
      assert.equal(1, rows[i].passed)
      assert.equal(1, rows[i + 1].passed)
    end
    for _, r in ipairs(rows) do
      if r.kernel == "lua-ref" then
        assert.truthy(r.samples >= 20) -- the peer followed vsalab's bench options
        assert.truthy(r.extra:find("second process", 1, true), r.extra)
      end
    end
    -- The outputs the peer computed are vsalab's reference's, bit for bit,
    -- so their errors against the oracle are identical.
    local e = vsalab.db_open(db, {readonly = true}):q([[SELECT r.kernel, e.output, e.rel_l2 FROM result r
      JOIN result_error e ON e.result_id = r.id WHERE r.kernel IN ('reference', 'lua-ref') ORDER BY r.point_hash, e.output, r.kernel]])
    for i = 1, #e, 2 do assert.equal(e[i].rel_l2, e[i + 1].rel_l2) end
  end)

  it("ask a peer for sampling over the window under mode 'sustained', and call its row so", function()
    local bench = require "vsalab.bench"
    local core = require "vsalab.core"
    local b = vsalab.backends.peer("lua-ref")
    local p = vsalab.problem.build{B = 1, H = 1, Sq = 256, D = 32, density = 0.5, seed = H.seed(), device = "cpu"}
    local keep = bench.sustained_s
    bench.sustained_s = 0.3
    local t0 = core.proc_now()
    local ok, outs, st = pcall(b.measure, p, {mode = "sustained", warmup = 0, min_samples = 2, max_time = 0.01})
    local elapsed = core.proc_now() - t0
    bench.sustained_s = keep
    assert(ok, outs)
    assert.equal("sustained", st.mode)
    assert.is_true(st.samples >= 2)
    assert.is_true(elapsed >= 0.3, "the peer sampled for " .. elapsed .. " s")
    for _, t in pairs(outs) do t:free() end
    vsalab.problem.free(p)
  end)

  it("refuse a timing.json whose mode or extra a row cannot hold, naming what is wrong", function()
    -- Once: mode "warm" or an extra nested 30 deep failed vsalab.log, and
    -- with it the run (the measured rows after it lost); a Python NaN was
    -- "no samples_ms list".
    local p = vsalab.problem.build{B = 1, H = 1, Sq = 128, D = 16, density = 0.5, seed = H.seed(), device = "cpu"}
    for fault, want in pairs{mode = "timing.json: mode 'warm' is not hot, cold, graph or sustained",
        deep = "timing.json: its note and extra nest too deep for the row's JSON",
        nanjson = "timing.json is not valid JSON (NaN and Infinity are not JSON)"} do
      local b = vsalab.backends.external{name = "fault-" .. fault, cmd = {"/bin/sh", "-c",
        "VSALAB_PEER_FAULT=" .. fault .. " exec \"$0\" run tests/peers/ref_peer.lua \"$1\"", H.exe}}
      local e = H.err(b.measure, p, {warmup = 0, min_samples = 2, min_time = 0, max_time = 0.01})
      assert.truthy(e:find("backend fault-" .. fault .. " failed: " .. want, 1, true), e)
    end
    vsalab.problem.free(p)
  end)

  it("show a peer's control characters escaped, and say so when a skipping peer gives no reason", function()
    -- A peer's last line reached the terminal raw (ESC[2J cleared it, ESC]0;
    -- retitled the window), and a silent exit 3 left the note 'skipped: '.
    local p = vsalab.problem.build{B = 1, H = 1, Sq = 128, D = 16, density = 0.5, seed = H.seed(), device = "cpu"}
    local function err(name, script)
      local b = vsalab.backends.external{name = name, cmd = {"/bin/sh", "-c", script}}
      local e = H.err(b.run, p)
      vsalab.backends.unregister(name)
      return e
    end
    local e = err("esc3", "printf 'skip: \\033[2J\\033]0;title\\007 no\\n'; exit 3")
    assert.equal("backend esc3 skipped: \\x1b[2J\\x1b]0;title\\x07 no", e)
    e = err("esc1", "printf 'bad\\033[31m red\\r\\n'; exit 1")
    assert.equal("backend esc1 failed: peer exited with status 1: bad\\x1b[31m red\\x0d", e)
    e = err("silent3", "exit 3")
    assert.equal("backend silent3 skipped: the peer exited with status 3 (cannot run this point) and printed no reason", e)
    vsalab.problem.free(p)
  end)

  it("fail the point with the peer's message when it exits, writes garbage or NaN", function()
    for fault, want in pairs{exit = "failing on purpose", garbage = "not a .npy file",
        mode = "timing.json: mode 'warm' is not hot, cold, graph or sustained"} do
      local db = dir .. "/" .. fault .. ".db"
      local rc = H.sh("VSALAB_PEER_FAULT=" .. fault .. " " .. H.exe .. " run --db " .. db .. " " .. smoke .. " peers=lua-ref")
      assert.equal(1, rc)
      local d = vsalab.db_open(db, {readonly = true})
      local rows = d:q("SELECT passed, ms_median, note FROM result WHERE kernel = 'lua-ref'")
      assert.equal(2, #rows, fault) -- one per point: the sweep went on
      for _, r in ipairs(rows) do
        assert.equal(0, r.passed)
        assert.truthy(r.note:find(want, 1, true), r.note)
      end
      assert.equal(2, #d:q("SELECT 1 FROM result WHERE kernel = 'reference' AND passed = 1"))
      d:close()
    end
    -- NaN outputs: measured, but the check voids the speed.
    local db = dir .. "/nan.db"
    assert.equal(1, (H.sh("VSALAB_PEER_FAULT=nan " .. H.exe .. " run --db " .. db .. " " .. smoke .. " peers=lua-ref")))
    local rows = vsalab.db_open(db, {readonly = true}):q("SELECT passed, tflops, ms_median FROM result WHERE kernel = 'lua-ref'")
    assert.equal(2, #rows)
    for _, r in ipairs(rows) do
      assert.equal(0, r.passed)
      assert.is_nil(r.tflops)
      assert.truthy(r.ms_median)
    end
  end)

  it("fail the point, never wait, when a peer leaves FIFOs or a huge log in DIR", function()
    -- A FIFO as peer.log, timing.json or an output blocked vsalab's open
    -- forever (deaf to one SIGTERM); a FIFO as the shell's status file
    -- blocked the shell; a 30 MB line of output went whole into the note.
    H.write(dir .. "/fifo.sh", [[#!/bin/sh
d=$1
case "$FIFO_AT" in
  peer.log) rm -f "$d/peer.log"; mkfifo "$d/peer.log"; exit 1 ;;
  status) mkfifo "$d/status"; exit 5 ;;
  dq.npy) mkfifo "$d/dq.npy"; mkfifo "$d/dk.npy"; mkfifo "$d/dv.npy" ;;
  timing.json) "$VSALAB" run tests/peers/ref_peer.lua "$d" && rm -f "$d/timing.json" && mkfifo "$d/timing.json" ;;
  log) head -c 30000000 /dev/zero | tr '\0' x; exit 1 ;;
esac
]])
    for at, want in pairs{["peer.log"] = "peer exited with status 1", status = "peer exited with status 5",
        ["dq.npy"] = "is not a regular file", ["timing.json"] = "timing.json is not a regular file",
        log = "peer exited with status 1: ...xxx"} do
      H.write(dir .. "/fifo.lua", string.format([[
vsalab.backends.external{name = "fifo", cmd = {"/bin/sh", %q}}
local exp = require "vsalab.experiment"
local sweep = require "vsalab.sweep"
exp.run{name = "fifo", device = "cpu", sweep = sweep.new{axes = {{"density", {0.5}}}, fixed = {B = 1, H = 1, Sq = 128, D = 16}},
  check = "full", seed = 1, kernels = {fifo = true, reference = true}}]], dir .. "/fifo.sh"))
      local db = dir .. "/fifo-" .. at .. ".db"
      local rc, _, err = H.sh("FIFO_AT=" .. at .. " VSALAB=" .. H.exe .. " timeout -s KILL 60 " .. H.exe
        .. " run --db " .. db .. " " .. dir .. "/fifo.lua")
      assert(rc == 0, at .. ": exit " .. rc .. ": " .. err:sub(-600))
      local d = vsalab.db_open(db, {readonly = true})
      local note = d:q("SELECT note FROM result WHERE kernel = 'fifo'")[1].note
      d:close()
      assert.truthy(note:find(want, 1, true), at .. ": " .. note:sub(1, 300))
      assert.is_true(#note < 2200, at .. ": a note of " .. #note .. " bytes")
    end
  end)

  it("stop a hung peer and everything it started at --point-timeout", function()
    local mark = "vsalab-hung-peer-" .. H.seed()
    H.write(dir .. "/hang.sh", "#!/bin/sh\nsh -c 'sleep 1000' " .. mark .. "\n")
    os.execute("chmod +x " .. dir .. "/hang.sh")
    H.write(dir .. "/hang.lua", string.format([[
vsalab.backends.external{name = "hung", cmd = {"/bin/sh", %q}, supported = function(d) return d == "cpu" end}
dofile(%q)]], dir .. "/hang.sh", H.root .. "/experiments/smoke.lua"))
    local db = dir .. "/hang.db"
    local rc, _, err = H.sh(H.exe .. " run --point-timeout 1 --db " .. db .. " " .. dir .. "/hang.lua -a density=[0.5]")
    local d = vsalab.db_open(db, {readonly = true})
    local notes = d:q("SELECT note FROM result WHERE kernel = 'config'")
    local measured = d:q([[SELECT count(*) AS n FROM result
      WHERE kernel NOT IN ('config', 'invert', 'gemm_bf16')]])[1].n
    d:close()
    -- A point given up on is skipped, not failed: the run passes if any
    -- backward measured before its point's timer fired (how many did
    -- depends on this host's speed), and fails saying so if none did.
    if measured > 0 then
      assert.equal(0, rc, err)
    else
      assert.equal(1, rc, err)
      assert.truthy(err:find("every point was skipped", 1, true), err)
    end
    assert.is_true(#notes > 0)
    assert.truthy(notes[1].note:find("timeout", 1, true), notes[1].note)
    -- The peer's group was killed: nothing of it is left. (SIGKILL is sent
    -- as vsalab gives up; on a loaded host the killed sleep may need a
    -- moment to get the CPU and exit, while a survivor sleeps 1000 s.)
    -- ("[v]salab...": a pattern that does not match pgrep's own shell.)
    H.wait_until("the hung peer's sleep to be gone", function()
      return H.sh("pgrep -f '[v]" .. mark:sub(2) .. "' >/dev/null") == 1
    end)
  end)

  it("say why a peer is unavailable", function()
    -- Its files present (stubs in a working directory of its own): on this
    -- CPU host it is unavailable for the device, and the run goes on.
    local cwd = H.tmpdir()
    for _, f in ipairs(require("vsalab.external").peers.triton.needs) do
      os.execute("mkdir -p " .. cwd .. "/" .. f:match("^(.*)/") .. " && : > " .. cwd .. "/" .. f)
    end
    local rc, _, err = H.sh("cd " .. cwd .. " && " .. H.exe .. " run --db " .. dir .. "/t.db " .. smoke .. " peers=triton")
    assert.equal(0, rc, err)
    assert.truthy(err:find("triton unavailable: triton runs on cuda tensors", 1, true), err)
    -- A file missing (a directory in its place is no file either): asked
    -- for by name, that is the user's to fix.
    os.remove(cwd .. "/.peer/fastvideo_triton/index.py")
    os.execute("mkdir " .. cwd .. "/.peer/fastvideo_triton/index.py")
    rc, _, err = H.sh("cd " .. cwd .. " && " .. H.exe .. " run --db " .. dir .. "/t2.db " .. smoke .. " peers=triton")
    H.usage_error(rc, err, "argument 'peers': triton: .peer/fastvideo_triton/index.py is missing: run tests/gpu/fetch_peer.sh")
    assert.falsy(io.open(dir .. "/t2.db"), "a refused run made a DB")
    -- A file of this repository missing (run from elsewhere): said so.
    os.execute("rm -rf " .. cwd .. "/tests")
    rc, _, err = H.sh("cd " .. cwd .. " && " .. H.exe .. " run --db " .. dir .. "/t3.db " .. smoke .. " peers=triton")
    assert.equal(2, rc, err)
    assert.truthy(err:find("argument 'peers': triton: tests/gpu/peers/triton_peer.py is missing: run from "
      .. "the repository root", 1, true), err)
    -- An unknown peer: the argument named too.
    rc, _, err = H.vsalab("run --db " .. dir .. "/t4.db " .. smoke .. " peers=bogus")
    assert.equal(2, rc, err)
    assert.truthy(err:find("vsalab: argument 'peers': no peer named 'bogus' (known: ", 1, true), err)
    os.execute("rm -rf " .. cwd)
  end)

  it("log a skipped row, neither passed nor failed, when a peer declines a point", function()
    local db = dir .. "/skip.db"
    local rc, _, err = H.sh("VSALAB_PEER_FAULT=skip " .. H.exe .. " run --db " .. db .. " " .. smoke .. " peers=lua-ref")
    assert.equal(0, rc, err)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT passed, ms_median, note FROM result WHERE kernel = 'lua-ref'")
    assert.equal(2, #rows) -- one per point
    for _, r in ipairs(rows) do
      assert.is_nil(r.passed)
      assert.is_nil(r.ms_median)
      assert.equal("skipped: ref_peer declines this point on purpose", r.note)
    end
    assert.equal(2, #d:q("SELECT 1 FROM result WHERE kernel = 'reference' AND passed = 1"))
    d:close()
  end)

  it("skip a point outside what a known peer declares, without starting it", function()
    local ext = require "vsalab.external"
    assert.equal("fa4 takes block sizes {128}, the point has 64", ext.unfit("fa4", {}))
    assert.is_nil(ext.unfit("fa4", {block = 128}))
    assert.is_nil(ext.unfit("cudnn_bsa", {block = 128, layout = "bshd"}))
    assert.equal("cudnn_bsa takes block sizes {64, 128}, the point has 256", ext.unfit("cudnn_bsa", {block = 256}))
    assert.equal("cudnn_bsa takes layouts {bhsd, bshd}, the point has sbhd", ext.unfit("cudnn_bsa", {layout = "sbhd"}))
    assert.is_nil(ext.unfit("triton", {block = 128}))
    assert.equal("cudnn_bsa takes head dim D in {128}, the point has 64", ext.unfit("cudnn_bsa", {D = 64}))
    -- The dense peer takes only points that select every pair.
    assert.equal("cudnn_dense computes dense attention: it takes density 1, the point selects 24 of 32 pairs",
      ext.unfit("cudnn_dense", {B = 1, H = 2, nq = 4, nkv = 4, pairs = 24}))
    assert.is_nil(ext.unfit("cudnn_dense", {B = 1, H = 2, nq = 4, nkv = 4, pairs = 32, block = 128}))
    -- The declaration is checked before any process starts.
    local p = vsalab.problem.build{B = 1, H = 1, Sq = 128, D = 64, density = 0.5, seed = H.seed(), device = "cpu"}
    local b = vsalab.backends.peer("fa4")
    local e = H.err(b.measure, p, {})
    assert.truthy(e:find("backend fa4 skipped: fa4 takes block sizes {128}, the point has 64", 1, true), e)
    vsalab.backends.unregister("fa4")
    vsalab.problem.free(p)
  end)

  it("keep the rows before a peer that crashes mid-run, and close the run", function()
    local db, calls = dir .. "/crash.db", dir .. "/crash.calls"
    local rc, _, err = H.sh("VSALAB_PEER_FAULT=crash-at-2 VSALAB_PEER_CALLS=" .. calls .. " " .. H.exe
      .. " run --db " .. db .. " " .. smoke .. " peers=lua-ref")
    assert.equal(1, rc, err)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT passed, note FROM result WHERE kernel = 'lua-ref' ORDER BY id")
    assert.equal(2, #rows)
    assert.equal(1, rows[1].passed)
    assert.equal(0, rows[2].passed)
    -- (the shell around the peer reports its SIGKILL as status 137)
    assert.truthy(rows[2].note:find("killed by signal 9", 1, true) or rows[2].note:find("status 137", 1, true),
      rows[2].note)
    assert.equal(2, #d:q("SELECT 1 FROM result WHERE kernel = 'reference' AND passed = 1"))
    local run = d:q("SELECT status FROM run")[1]
    assert.truthy(run.status ~= "running", run.status)
    assert.equal("ok", d:q("PRAGMA integrity_check")[1].integrity_check)
    d:close()
  end)

  it("refuse cudnn_bsa and fa4 without .peers/, with a one-line install hint", function()
    -- The peers' scripts present (a working directory of its own), their
    -- packages not: asked for by name, that is the user's to install.
    local cwd = H.tmpdir()
    for _, name in ipairs{"cudnn_bsa", "fa4"} do
      local script = require("vsalab.external").peers[name].needs[1]
      os.execute("mkdir -p " .. cwd .. "/" .. script:match("^(.*)/") .. " && : > " .. cwd .. "/" .. script)
      local rc, _, err = H.sh("cd " .. cwd .. " && " .. H.exe .. " run --db " .. dir .. "/np-" .. name .. ".db "
        .. smoke .. " peers=" .. name)
      assert.equal(2, rc, err)
      assert.truthy(err:find("argument 'peers': " .. name .. ": .peers/", 1, true), err)
      assert.truthy(err:find("is missing: install the pinned peers into .peers/: scripts/peers.sh install", 1, true), err)
      assert.equal(1, select(2, err:gsub("\n", "\n")), err) -- one line
      assert.falsy(io.open(dir .. "/np-" .. name .. ".db"), "a refused run made a DB")
      -- Installed (stubs here): on this CPU host the run goes on without it.
      for _, f in ipairs(require("vsalab.external").peers[name].needs) do
        os.execute("mkdir -p " .. cwd .. "/" .. f:match("^(.*)/") .. " && touch " .. cwd .. "/" .. f)
      end
      rc, _, err = H.sh("cd " .. cwd .. " && " .. H.exe .. " run --db " .. dir .. "/np2-" .. name .. ".db "
        .. smoke .. " peers=" .. name)
      assert.equal(0, rc, err)
      assert.truthy(err:find(name .. " unavailable: " .. name .. " runs on cuda tensors", 1, true), err)
    end
    os.execute("rm -rf " .. cwd)
  end)

  local numpy = os.execute("python3 -c 'import numpy' >/dev/null 2>&1") == 0
  local numpy_it = numpy and it or pending
  numpy_it("run the numpy peer (python3 with numpy)", function()
    local db = dir .. "/np.db"
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. smoke .. " peers=numpy")
    assert(rc == 0, err)
    local rows = vsalab.db_open(db, {readonly = true}):q("SELECT passed FROM result WHERE kernel = 'numpy'")
    assert.equal(2, #rows)
    for _, r in ipairs(rows) do assert.equal(1, r.passed) end
  end)
end)
