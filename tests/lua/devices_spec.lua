-- Sweeps beyond one process, on the CPU: `run --devices` with fake GPUs
-- (VSALAB_FAKE_DEVICES=N: workers on device=cpu), a worker that dies, the
-- interrupt, `--shard`, `merge` and logical runs. The real-Slurm test is
-- tests/slurm/slurm_test.sh (CI), the GPU one tests/gpu/run.sh devices.
local H = require "helpers"

-- A sweep of n points that only logs (no kernel): point k costs k (the
-- estimate), so longest-first hands them out n, n-1, ... Each row notes
-- the worker's CUDA_VISIBLE_DEVICES. VSALAB_TEST_DIE=k: the worker that
-- gets point k kills itself (SIGKILL) before logging it. VSALAB_TEST_SPIN=s:
-- every point busy-waits s seconds (calling C, so an interrupt is seen);
-- VSALAB_TEST_HOLD=s: the same, after logging its row.
local script = [[
local dispatch = require "vsalab.dispatch"
local n = tonumber(os.getenv("VSALAB_TEST_POINTS") or "6")
local configs = {}
for k = 1, n do configs[k] = {k = k, hash = vsalab.sweep.hash{k = k}} end
local die = tonumber(os.getenv("VSALAB_TEST_DIE") or "")
local spin = tonumber(os.getenv("VSALAB_TEST_SPIN") or "0")
local hold = tonumber(os.getenv("VSALAB_TEST_HOLD") or "0")
for i, c in dispatch.each("t", configs, function(c) return c.k end) do
  if c.k == die then vsalab.proc_self_kill() end
  local t = vsalab.proc_now()
  while vsalab.proc_now() - t < spin do end
  vsalab.log{experiment = "t", kernel = "k", point_hash = c.hash, B = c.k, ms_median = 1,
    note = os.getenv("CUDA_VISIBLE_DEVICES")}
  t = vsalab.proc_now()
  while vsalab.proc_now() - t < hold do end
end
]]

local function open(db) return vsalab.db_open(db, {readonly = true}) end

local function pid_gone(pid)
  local s = H.read("/proc/" .. pid .. "/stat")
  if not s then return true end
  return s:match("^%d+ %b() (%a)") == "Z" -- nothing may reap here
end

describe("run --devices (fake GPUs, workers on the CPU)", function()
  local dir
  before_each(function()
    dir = H.tmpdir()
    H.write(dir .. "/pts.lua", script)
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("hands every point out once, longest first, and each row names its GPU", function()
    local rc, _, err = H.sh("VSALAB_FAKE_DEVICES=3 " .. H.exe .. " run --devices all --db " .. dir
      .. "/d.db " .. dir .. "/pts.lua")
    assert.equal(0, rc, err)
    local d = open(dir .. "/d.db")
    local runs = d:q("SELECT status, devices, device_index FROM run")
    assert.equal(1, #runs)
    assert.equal("finished", runs[1].status)
    assert.equal('[{"index":0,"name":"fake","uuid":"FAKE-GPU-0"},{"index":1,"name":"fake","uuid":"FAKE-GPU-1"},'
      .. '{"index":2,"name":"fake","uuid":"FAKE-GPU-2"}]', runs[1].devices)
    assert.is_nil(runs[1].device_index)
    local rows = d:q("SELECT B, gpu_index, gpu_name, gpu_uuid, note FROM result ORDER BY B")
    assert.equal(6, #rows)
    for k, r in ipairs(rows) do
      assert.equal(k, r.B)
      assert.equal("fake", r.gpu_name)
      assert.equal("FAKE-GPU-" .. r.gpu_index, r.gpu_uuid)
      -- The worker saw its GPU alone.
      assert.equal(tostring(r.gpu_index), r.note)
    end
    d:close()
    assert.truthy(err:find("6/6 points", 1, true), err)
    assert.truthy(err:find("gpu2 ", 1, true), err)
  end)

  it("runs longest first on one GPU, like the same script without --devices", function()
    assert.equal(0, (H.sh("VSALAB_FAKE_DEVICES=1 " .. H.exe .. " run --devices all --db " .. dir
      .. "/d.db " .. dir .. "/pts.lua")))
    local d = open(dir .. "/d.db")
    local order = {}
    for i, r in ipairs(d:q("SELECT B FROM result ORDER BY id")) do order[i] = r.B end
    d:close()
    assert.same({6, 5, 4, 3, 2, 1}, order)
    assert.equal(0, (H.vsalab("run --db " .. dir .. "/p.db " .. dir .. "/pts.lua")))
    d = open(dir .. "/p.db")
    order = {}
    for i, r in ipairs(d:q("SELECT B FROM result ORDER BY id")) do order[i] = r.B end
    d:close()
    assert.same({1, 2, 3, 4, 5, 6}, order)
  end)

  it("measures the smoke experiment's points as one process does (hashes and seeds)", function()
    local seed = H.seed() % 100000
    local rc, _, err = H.sh("VSALAB_FAKE_DEVICES=2 " .. H.exe .. " run --devices 0,1 --seed " .. seed
      .. " --db " .. dir .. "/d.db " .. H.root .. "/experiments/smoke.lua -a density=[0.5,1]")
    assert.equal(0, rc, err)
    assert.equal(0, (H.vsalab("run --seed " .. seed .. " --db " .. dir .. "/p.db " .. H.root
      .. "/experiments/smoke.lua -a density=[0.5,1]")))
    local sql = "SELECT point_hash, kernel, json_extract(extra, '$.seed') AS s, passed FROM result ORDER BY 1, 2"
    local a, b = open(dir .. "/d.db"), open(dir .. "/p.db")
    local ra, rb = a:q(sql), b:q(sql)
    assert.equal(6, #rb)
    assert.same(rb, ra)
    assert.equal(0, a:q("SELECT count(*) AS n FROM result WHERE gpu_uuid IS NULL")[1].n)
    a:close()
    b:close()
  end)

  it("loses only the point of a worker that dies, logs it failed and goes on", function()
    -- Points take 0.2 s, so points are left when the worker dies: a fresh
    -- one is started for them.
    local rc, _, err = H.sh("VSALAB_TEST_SPIN=0.2 VSALAB_TEST_DIE=5 VSALAB_FAKE_DEVICES=2 " .. H.exe .. " run --devices all --db "
      .. dir .. "/d.db " .. dir .. "/pts.lua")
    assert.equal(1, rc, err)
    local d = open(dir .. "/d.db")
    local run = d:q("SELECT status, error FROM run")[1]
    assert.equal("failed", run.status)
    assert.truthy(run.error:find("point " .. vsalab.sweep.hash{k = 5} .. " lost: worker killed by signal 9", 1, true), run.error)
    local measured = {}
    for _, r in ipairs(d:q("SELECT B FROM result WHERE kernel = 'k'")) do
      assert.is_nil(measured[r.B])
      measured[r.B] = true
    end
    assert.same({[1] = true, [2] = true, [3] = true, [4] = true, [6] = true}, measured)
    local lost = d:q("SELECT point_hash, note, gpu_uuid, json_extract(extra, '$.point.k') AS k FROM result WHERE kernel = 'config'")
    assert.equal(1, #lost)
    assert.equal(5, lost[1].k)
    assert.equal(vsalab.sweep.hash{k = 5}, lost[1].point_hash)
    assert.truthy(lost[1].note:match("^failed %(worker died%)"))
    assert.truthy(lost[1].gpu_uuid:match("^FAKE%-GPU%-%d$"))
    d:close()
    -- A fresh worker took the dead one's place.
    local starts = 0
    for _ in err:gmatch("worker pid %d+") do starts = starts + 1 end
    assert.equal(3, starts, err)
  end)

  it("logs the point of a worker killed inside an experiment (VSALAB_CRASH_AT)", function()
    local rc, _, err = H.sh("VSALAB_CRASH_AT=2 VSALAB_FAKE_DEVICES=2 " .. H.exe .. " run --devices all --db "
      .. dir .. "/d.db " .. H.root .. "/experiments/smoke.lua")
    assert.equal(1, rc, err)
    local d = open(dir .. "/d.db")
    assert.equal("failed", d:q("SELECT status FROM run")[1].status)
    local lost = d:q("SELECT json_extract(extra, '$.point.density') AS density FROM result WHERE kernel = 'config'")
    assert.equal(1, #lost)
    -- Point 2 of the smoke sweep: density 0.5, B1; the other three measured.
    assert.equal(0.5, lost[1].density)
    assert.equal(3, d:q("SELECT count(DISTINCT point_hash) AS n FROM result WHERE kernel = 'reference' AND passed = 1")[1].n)
    d:close()
  end)

  it("stops every worker on SIGINT and marks the run interrupted", function()
    local db = dir .. "/d.db"
    -- Each worker logs its first point's row, then holds that point (600
    -- s): once two rows are in, both workers are busy, and whenever the
    -- interrupt comes, no further row can be.
    os.execute("VSALAB_TEST_POINTS=40 VSALAB_TEST_HOLD=600 VSALAB_FAKE_DEVICES=2 " .. H.exe
      .. " run --devices all --db " .. db .. " " .. dir .. "/pts.lua >" .. dir .. "/out 2>&1 & echo $! >" .. dir .. "/pid")
    local f = io.open(dir .. "/pid")
    local pid = f:read("*l")
    f:close()
    -- Wait for both rows, then interrupt the coordinator only.
    H.wait_until("both workers' first rows", function()
      local ok, n = pcall(function()
        local d = open(db)
        local c = d:q("SELECT count(*) AS n FROM result")[1].n
        d:close()
        return c
      end)
      return ok and n >= 2
    end)
    os.execute("kill -INT " .. pid)
    H.wait_until("the coordinator to stop", function() return pid_gone(pid) end)
    local out = assert(H.read(dir .. "/out"))
    local workers = 0
    for wpid in out:gmatch("worker pid (%d+)") do
      workers = workers + 1
      assert.is_true(pid_gone(wpid), "worker " .. wpid .. " still runs")
    end
    assert.equal(2, workers, out)
    -- Each worker stopped at the interrupt (not killed after the grace).
    for g = 0, 1 do
      assert.truthy(("\n" .. out):find("\ngpu" .. g .. "| vsalab: [^\n]*interrupted! %(SIGINT%)"), out)
    end
    local d = open(db)
    local run = d:q("SELECT status, error FROM run")[1]
    local n = d:q("SELECT count(*) AS n FROM result")[1].n
    d:close()
    assert.equal("interrupted", run.status)
    assert.equal(2, n)
    -- The points it lacks are listed (longest first: 40 and 39 have rows),
    -- on stderr and in the run's error.
    local lost = {}
    for k = 1, 38 do lost[k] = string.format("point %d (%s)", k, vsalab.sweep.hash{k = k}) end
    local text = "38 of 40 points have no row: " .. table.concat(lost, ", ")
    assert.truthy(out:find("devices: " .. text .. "\n", 1, true), out)
    assert.equal("interrupted; " .. text, run.error)
  end)

  it("refuses bad device lists and combinations with exit 2", function()
    assert.equal(2, (H.vsalab("run --devices 0,0 x.lua")))
    assert.equal(2, (H.vsalab("run --devices one x.lua")))
    assert.equal(2, (H.vsalab("run --devices -1 x.lua")))
    assert.equal(2, (H.vsalab("run --devices all --resume 1 x.lua")))
    assert.equal(2, (H.vsalab("repl --devices all")))
    local rc, _, err = H.sh("VSALAB_FAKE_DEVICES=2 " .. H.exe .. " run --devices 0,5 --db " .. dir .. "/d.db " .. dir .. "/pts.lua")
    assert.equal(2, rc)
    assert.truthy(err:find("no GPU 5 here (GPUs: 0, 1)", 1, true), err)
    -- No GPU at all: said once, as the experiments say it (a new user read
    -- "no CUDA device here (no CUDA device: no NVIDIA GPU ...)").
    if not vsalab.cuda_available() then
      local rc2, _, err2 = H.vsalab("run --devices all --db " .. dir .. "/d.db " .. dir .. "/pts.lua")
      assert.equal(2, rc2)
      assert.truthy(err2:find("--devices needs a CUDA device: no NVIDIA GPU or driver found", 1, true), err2)
      assert.falsy(err2:find("no CUDA device", 1, true), err2)
    end
    local f = io.open(dir .. "/d.db")
    assert.is_nil(f) -- nothing begun
    if f then f:close() end
  end)
end)

describe("run --shard, merge and logical runs", function()
  local dir
  before_each(function()
    dir = H.tmpdir()
    H.write(dir .. "/pts.lua", script)
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  local function shard_runs(n, extra)
    for i = 0, n - 1 do
      local rc, _, err = H.sh("VSALAB_TEST_POINTS=24 " .. H.exe .. " run --shard " .. i .. "/" .. n .. " " .. (extra or "")
        .. " --db " .. dir .. "/s" .. i .. ".db " .. dir .. "/pts.lua")
      assert.equal(0, rc, err)
    end
  end

  it("splits the points into disjoint slices by point hash, under one sweep id", function()
    shard_runs(3)
    local seen, sweep, sizes = {}, nil, {}
    for i = 0, 2 do
      local d = open(dir .. "/s" .. i .. ".db")
      local r = d:q("SELECT sweep_id, shard_index, shard_count FROM run")[1]
      assert.equal(i, r.shard_index)
      assert.equal(3, r.shard_count)
      sweep = sweep or r.sweep_id
      assert.equal(sweep, r.sweep_id)
      local rows = d:q("SELECT B, point_hash FROM result")
      sizes[#sizes + 1] = #rows
      for _, row in ipairs(rows) do
        assert.is_nil(seen[row.B])
        seen[row.B] = true
        assert.is_true(require("vsalab.shard").owns({index = i, count = 3}, row.point_hash))
      end
      d:close()
    end
    for k = 1, 24 do assert.is_true(seen[k], "point " .. k) end
    -- The mix spreads points: no slice of 24 is empty.
    for _, n in ipairs(sizes) do assert.is_true(n > 0) end
  end)

  it("splits a shard over the GPUs of a host with --devices", function()
    shard_runs(2)
    local rc, _, err = H.sh("VSALAB_TEST_POINTS=24 VSALAB_FAKE_DEVICES=2 " .. H.exe
      .. " run --devices all --shard 1/2 --db " .. dir .. "/d.db " .. dir .. "/pts.lua")
    assert.equal(0, rc, err)
    local a, b = open(dir .. "/s1.db"), open(dir .. "/d.db")
    local sql = "SELECT B, point_hash FROM result ORDER BY B"
    assert.same(a:q(sql), b:q(sql))
    local r = b:q("SELECT shard_index, shard_count, sweep_id FROM run")[1]
    assert.same({shard_index = 1, shard_count = 2, sweep_id = a:q("SELECT sweep_id FROM run")[1].sweep_id}, r)
    a:close()
    b:close()
  end)

  it("takes the slice from Slurm's array variables with --shard slurm", function()
    local rc, _, err = H.sh("SLURM_ARRAY_TASK_ID=5 SLURM_ARRAY_TASK_MIN=4 SLURM_ARRAY_TASK_COUNT=3 SLURM_ARRAY_JOB_ID=77 "
      .. H.exe .. " run --shard slurm --db " .. dir .. "/s.db " .. dir .. "/pts.lua")
    assert.equal(0, rc, err)
    local d = open(dir .. "/s.db")
    local r = d:q("SELECT sweep_id, shard_index, shard_count FROM run")[1]
    d:close()
    assert.same({sweep_id = "slurm-77", shard_index = 1, shard_count = 3}, r)
    assert.equal(2, (H.vsalab("run --shard slurm x.lua")))
    assert.equal(2, (H.sh("SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_COUNT=3 " .. H.exe .. " run --shard slurm x.lua")))
    -- A count it cannot take is named as such (the hint said --array=0-0).
    local rc2, _, err2 = H.sh("SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_COUNT=1234567890 " .. H.exe
      .. " run --shard slurm x.lua")
    assert.equal(2, rc2)
    assert.truthy(err2:find("SLURM_ARRAY_TASK_COUNT '1234567890' is not a task count in [1, 100000]", 1, true), err2)
    for _, bad in ipairs{"3/3", "1/0", "a/2", "1", "-1/2", "1/2/3"} do
      assert.equal(2, (H.vsalab("run --shard " .. bad .. " x.lua")), bad)
    end
    assert.equal(2, (H.vsalab("run --sweep-id 'a b' x.lua")))
  end)

  it("merges shards with provenance, once, and reads them as one logical run", function()
    shard_runs(2, "--sweep-id s1")
    local rc, out, err = H.vsalab("merge " .. dir .. "/m.db " .. dir .. "/s0.db " .. dir .. "/s1.db")
    assert.equal(0, rc, err)
    assert.truthy(out:find("merged 2 files", 1, true))
    -- An OUT that keeps nothing is refused.
    local rcm, _, errm = H.vsalab("merge :memory: " .. dir .. "/s0.db")
    assert.equal(2, rcm)
    assert.truthy(errm:find("OUT :memory: would keep nothing", 1, true), errm)
    -- The shards (on a shared filesystem under Slurm) are read as they
    -- stand: no -shm or -wal file is left beside them.
    for _, s in ipairs{"s0", "s1"} do
      for _, ext in ipairs{"-shm", "-wal"} do
        assert.is_nil(vsalab.file_type(dir .. "/" .. s .. ".db" .. ext), s .. ".db" .. ext)
      end
    end
    local d = open(dir .. "/m.db")
    local runs = d:q("SELECT id, sweep_id, shard_index, source_db, source_run_id, host, merged_at, uid FROM run ORDER BY id")
    assert.equal(2, #runs)
    for i, r in ipairs(runs) do
      assert.equal("s1", r.sweep_id)
      assert.equal(i - 1, r.shard_index)
      assert.equal(dir .. "/s" .. (i - 1) .. ".db", r.source_db)
      assert.equal(1, r.source_run_id)
      assert.truthy(r.host and r.merged_at and #r.uid == 32)
    end
    assert.equal(24, d:q("SELECT count(*) AS n FROM result")[1].n)
    d:close()
    -- Again: nothing added.
    assert.equal(0, (H.vsalab("merge " .. dir .. "/m.db " .. dir .. "/s1.db " .. dir .. "/s0.db")))
    d = open(dir .. "/m.db")
    assert.equal(2, d:q("SELECT count(*) AS n FROM run")[1].n)
    assert.equal(24, d:q("SELECT count(*) AS n FROM result")[1].n)
    d:close()
    -- runs: one line; compare: the sweep against a single-process run.
    local _, list = H.vsalab("runs --format csv --db " .. dir .. "/m.db")
    assert.truthy(list:find("\n1,finished,.*,24,s1,2/2\n"), list)
    assert.equal(0, (H.sh("VSALAB_TEST_POINTS=24 " .. H.exe .. " run --db " .. dir .. "/m.db " .. dir .. "/pts.lua")))
    local rc2, cmp, err2 = H.vsalab("compare --floor-ms 1000 --db " .. dir .. "/m.db 2 latest")
    assert.equal(0, rc2, cmp .. err2)
    assert.truthy(cmp:find("24 matching points", 1, true), cmp)
    assert.equal(2, (H.vsalab("compare --db " .. dir .. "/m.db 1 2")))
    local rc3 = H.vsalab("report --db " .. dir .. "/m.db -o " .. dir .. "/r.html 1")
    assert.equal(0, rc3)
    local html = assert(H.read(dir .. "/r.html"))
    assert.truthy(html:find("sweep s1: runs 1, 2, one logical run", 1, true))
  end)

  it("refuses to re-merge a run that went on since (its new rows would be lost)", function()
    shard_runs(1, "--sweep-id s3")
    local s0 = dir .. "/s0.db"
    assert.equal(0, (H.vsalab("merge " .. dir .. "/m.db " .. s0)))
    -- The run goes on in its own file (as a resume would): one more row.
    local w = vsalab.db_open(s0)
    local r = w:q("SELECT * FROM result ORDER BY id DESC LIMIT 1")[1]
    w:q("INSERT INTO result (run_id, created_at, experiment, kernel, B, H, Sq, Skv, D, block, "
      .. "density, topk, ragged, pairs) VALUES (?, ?, ?, 'later', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      r.run_id, r.created_at, r.experiment, r.B, r.H, r.Sq, r.Skv, r.D, r.block, r.density,
      r.topk, r.ragged, r.pairs)
    w:close()
    local rc, _, err = H.vsalab("merge " .. dir .. "/m.db " .. s0)
    assert.equal(1, rc, err)
    assert.truthy(err:find("has 25 rows", 1, true) or err:find("rows (", 1, true), err)
    assert.truthy(err:find("merge into a new OUT file", 1, true), err)
    -- OUT kept its copy as it was; a new OUT takes the run whole.
    local d = vsalab.db_open(dir .. "/m.db", {readonly = true})
    assert.equal(0, d:q("SELECT count(*) AS n FROM result WHERE kernel = 'later'")[1].n)
    d:close()
    assert.equal(0, (H.vsalab("merge " .. dir .. "/m2.db " .. s0)))
  end)

  it("refuses shards of one sweep id measured differently, or one slice twice", function()
    for _, case in ipairs{{"--seed 99", "seed 99, not 1234"}, {"", "shard 0 too"}} do
      os.execute("rm -f " .. dir .. "/*.db*")
      local function shard(i, db, extra)
        local rc, _, err = H.sh("VSALAB_TEST_POINTS=24 " .. H.exe .. " run --shard " .. i .. "/2 --sweep-id sx "
          .. extra .. " --db " .. dir .. "/" .. db .. " " .. dir .. "/pts.lua")
        assert.equal(0, rc, err)
      end
      shard(0, "a.db", "")
      shard(0, "b.db", case[1])
      local rc, _, err = H.vsalab("merge " .. dir .. "/m.db " .. dir .. "/a.db " .. dir .. "/b.db")
      assert.equal(1, rc, err)
      assert.truthy(err:find(case[2], 1, true), err)
      assert.truthy(err:find("must be measured alike", 1, true), err)
    end
  end)

  it("refuses a sweep id the DB holds for another sweep, or a slice it holds, before measuring", function()
    -- Both went into the DB: `runs` then showed one logical run of
    -- "shards 4/3" that merge refuses.
    local function shard(slice, extra)
      return H.sh("VSALAB_TEST_POINTS=24 " .. H.exe .. " run --shard " .. slice .. " --sweep-id sx "
        .. extra .. " --db " .. dir .. "/one.db " .. dir .. "/pts.lua")
    end
    local rc, _, err = shard("0/2", "")
    assert.equal(0, rc, err)
    for _, case in ipairs{{"1/2", "--seed 99", "seed 99, not 1234"}, {"1/3", "", "3 shards, not 2"},
        {"0/2", "", "shard 0 too (two runs of one slice): a sweep's shards are measured alike, one run per slice "
          .. "(give another --sweep-id or --db; --resume 1 finishes that slice)"}} do
      rc, _, err = shard(case[1], case[2])
      H.usage_error(rc, err, "sweep sx: " .. dir .. "/one.db already holds run 1 of it, and this run would have "
        .. case[3])
    end
    -- The other slice of the same sweep is welcome.
    rc, _, err = shard("1/2", "")
    assert.equal(0, rc, err)
    local d = open(dir .. "/one.db")
    assert.same({{id = 1, shard_index = 0}, {id = 2, shard_index = 1}},
      (function(r) r.columns = nil return r end)(d:q("SELECT id, shard_index FROM run ORDER BY id")))
    d:close()
  end)

  it("refuses another schema version and leaves OUT as it was when a merge fails", function()
    shard_runs(2, "--sweep-id s2")
    -- OUT with one run already.
    assert.equal(0, (H.vsalab("merge " .. dir .. "/m.db " .. dir .. "/s0.db")))
    -- An input of an older schema version: refused, exit 2.
    os.execute("cp " .. dir .. "/s1.db " .. dir .. "/old.db")
    local w = vsalab.db_open(dir .. "/old.db")
    w:q("PRAGMA user_version = 2")
    w:close()
    local rc, _, err = H.vsalab("merge " .. dir .. "/m.db " .. dir .. "/old.db")
    assert.equal(2, rc)
    assert.truthy(err:find("schema version 2, this vsalab writes version " .. vsalab.db_schema_version, 1, true), err)
    -- An input with a row OUT's CHECKs refuse (written with checks off):
    -- the merge fails after s1 went in, and rolls all of it back.
    os.execute("cp " .. dir .. "/s1.db " .. dir .. "/bad.db")
    w = vsalab.db_open(dir .. "/bad.db")
    w:q("PRAGMA ignore_check_constraints = ON")
    w:q("UPDATE run SET uid = 'other'")
    w:q("UPDATE result SET extra = 'not json' WHERE id = (SELECT max(id) FROM result)")
    w:close()
    local rc2, _, err2 = H.vsalab("merge " .. dir .. "/m.db " .. dir .. "/s1.db " .. dir .. "/bad.db")
    assert.equal(1, rc2)
    assert.truthy(err2:find("unchanged", 1, true), err2)
    -- The file's problem, said without a line of merge.lua.
    assert.truthy(err2:find("^vsalab merge: failed, [^\n]*m%.db unchanged: [^\n]*bad%.db: "), err2)
    assert.falsy(err2:find(".lua:", 1, true), err2)
    local d = open(dir .. "/m.db")
    assert.equal(1, d:q("SELECT count(*) AS n FROM run")[1].n)
    d:close()
    -- A new OUT is not left behind.
    assert.equal(1, (H.vsalab("merge " .. dir .. "/n.db " .. dir .. "/bad.db")))
    assert.is_nil(io.open(dir .. "/n.db"))
    assert.equal(2, (H.vsalab("merge " .. dir .. "/m.db " .. dir .. "/m.db")))
    assert.equal(2, (H.vsalab("merge " .. dir .. "/m.db " .. dir .. "/none.db")))
    assert.equal(2, (H.vsalab("merge " .. dir .. "/m.db")))
  end)

  it("says an input found damaged mid-read is damaged (exit 2, no source line), OUT as it was", function()
    shard_runs(1, "--sweep-id dmg")
    -- The run table reads; the result table's root page is zeroed.
    local bad = dir .. "/dmg.db"
    os.execute("cp " .. dir .. "/s0.db " .. bad)
    local d = open(bad)
    local root = d:q("SELECT rootpage FROM sqlite_master WHERE name = 'result'")[1].rootpage
    local size = d:q("PRAGMA page_size")[1].page_size
    d:close()
    os.execute(string.format("dd if=/dev/zero of=%s bs=%d seek=%d count=1 conv=notrunc 2>/dev/null", bad, size, root - 1))
    local rc, _, err = H.vsalab("merge " .. dir .. "/new.db " .. bad)
    assert.equal(2, rc, err)
    assert.truthy(err:find("new.db not created: db '" .. bad .. "': database disk image is malformed", 1, true), err)
    assert.falsy(err:find(".lua:", 1, true), err)
    assert.is_nil(io.open(dir .. "/new.db"))
  end)
end)
