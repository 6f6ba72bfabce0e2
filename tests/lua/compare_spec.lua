-- vsalab compare on synthetic runs with known noise (no GPU): identical
-- distributions give SAME, a 10% slowdown with 1% noise gives SLOW (exit 1),
-- a pass->fail is flagged.
local H = require "helpers"

local x = H.seed()
local function uniform() x = (x * 48271) % 2147483647; return (x + 0.5) / 2147483647 end
local function normal()
  return math.sqrt(-2 * math.log(uniform())) * math.cos(2 * math.pi * uniform())
end

-- Log one synthetic run: per point, 20 samples of median_ms·scale·(1 + noise·N(0,1)).
local function synthetic_run(db, scale, noise, passed, mode, sizes)
  -- A GPU run: its rows are CUDA-event timings (host-clock rows get a wider floor).
  local id = db:begin_run{script = "synthetic", gpu_name = "NVIDIA H200"}
  for _, S in ipairs(sizes or {4096, 8192, 16384, 32768}) do
    for _, kernel in ipairs{"sm90a", "reference"} do
      local base = S / 4096 * (kernel == "sm90a" and 0.25 or 3.0)
      local s = {}
      for i = 1, 20 do s[i] = base * scale * (1 + noise * normal()) end
      local st = vsalab.stats(s)
      db:log{run_id = id, experiment = "synthetic", kernel = kernel, B = 1, H = 8, Sq = S,
        Skv = S, D = 128, block = 64, density = 0.25, topk = S / 256, ragged = 0,
        ms_median = st.median, ms_min = st.min, ms_max = st.max, spread = st.spread,
        samples = st.samples, passed = passed and 1 or 0, mode = mode or "hot",
        errors = {dq = {rel_l2 = 2.3e-3, passed = passed}}}
    end
  end
  db:end_run(id, "finished")
  return id
end

describe("vsalab compare", function()
  local dir = H.tmpdir()
  local path = dir .. "/c.db"
  local db = vsalab.db_open(path)
  local a = synthetic_run(db, 1.0, 0.01, true)
  local b = synthetic_run(db, 1.0, 0.01, true)
  local c = synthetic_run(db, 1.1, 0.01, true)
  local d = synthetic_run(db, 1.0, 0.01, false)
  local e = synthetic_run(db, 1.0, 0.01, true, "graph")
  local f = synthetic_run(db, 1.0, 0.01, true, "hot", {4096, 8192})
  db:close()
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("says SAME for identical distributions", function()
    local rc, out = H.vsalab("compare --db " .. path .. " " .. a .. " " .. b)
    assert.equal(0, rc)
    assert.truthy(out:match("8 matching points"))
    assert.truthy(out:match("SAME 8  FAST 0  SLOW 0  AMBIGUOUS 0"))
  end)

  it("matches rows timed in the same mode only", function()
    local rc, out, err = H.vsalab("compare --db " .. path .. " " .. a .. " " .. e)
    assert.equal(1, rc)
    assert.truthy(out:match("0 matching points"), out)
    assert.truthy(out:match("ONLY A 8  ONLY B 8"), out)
    -- A new user's hot run against a graph or sustained one: the reason is said.
    assert.truthy(err:find("run " .. a .. " was timed hot, run " .. e .. " graph: rows of different "
      .. "timing modes never compare", 1, true), err)
    -- ... and no table of 16 unmatched rows comes before it.
    assert.falsy(out:find("experiment", 1, true), out)
  end)

  it("gates on points the new run lost, unless --partial", function()
    local rc, out, err = H.vsalab("compare --db " .. path .. " " .. a .. " " .. f)
    assert.equal(1, rc)
    assert.truthy(out:match("SAME 4  FAST 0  SLOW 0  AMBIGUOUS 0  ONLY A 4  ONLY B 0"), out)
    assert.truthy(out:find("MISSING", 1, true), out)
    -- Why it exits 1, and the way out.
    assert.truthy(err:find("vsalab compare: exit 1: 4 MISSING (points of A that B did not measure; --partial accepts a subset)", 1, true), err)
    local rc2, out2 = H.vsalab("compare --db " .. path .. " --partial " .. a .. " " .. f)
    assert.equal(0, rc2, out2)
    -- New points in B are listed, never gate.
    local rc3, out3 = H.vsalab("compare --db " .. path .. " " .. f .. " " .. a)
    assert.equal(0, rc3, out3)
    assert.truthy(out3:match("ONLY A 0  ONLY B 4"), out3)
  end)

  it("says SLOW for a 10% slowdown with 1% noise, and gates", function()
    local rc, out, err = H.vsalab("compare --db " .. path .. " " .. a .. " " .. c)
    assert.equal(1, rc)
    assert.truthy(out:match("SLOW 8"))
    assert.truthy(err:find("vsalab compare: exit 1: 8 SLOW\n", 1, true), err)
    local rc2, out2 = H.vsalab("compare --db " .. path .. " " .. c .. " " .. a)
    assert.equal(0, rc2)
    assert.truthy(out2:match("FAST 8"))
  end)

  it("flags a new failure and resolves latest~N", function()
    local rc, out = H.vsalab("compare --db " .. path .. " latest~5 latest~2")
    assert.equal(1, rc)
    assert.truthy(out:match("run " .. a .. " %(baseline%) vs run " .. d), out)
    assert.truthy(out:match("NEW FAIL"))
  end)

  it("refuses to set the inversion's rows beside a backward's", function()
    -- It judged every point FAST (B/A 0.000). A copy of the DB gets
    -- inversion rows (the other tests count this DB's points).
    local inv = path .. ".invert.db"
    assert.equal(0, (H.sh(string.format("cp %s %s", path, inv))))
    local w = vsalab.db_open(inv)
    w:q([[INSERT INTO result (run_id, experiment, kernel, B, H, Sq, Skv, D, block, density, ms_median)
          SELECT run_id, experiment, 'invert', B, H, Sq, Skv, D, block, density, ms_median / 100
          FROM result WHERE kernel = 'reference' AND run_id IN (?, ?)]], a, b)
    w:close()
    local rc, out, err = H.vsalab("compare --db " .. inv .. " " .. a .. ":reference " .. a .. ":invert")
    assert.equal(2, rc, out)
    assert.truthy(err:find(a .. ":invert times the q2k -> k2q inversion and " .. a .. ":reference a backward",
      1, true), err)
    local rc2, out2, err2 = H.vsalab("compare --db " .. inv .. " " .. a .. ":invert " .. b .. ":invert")
    assert.are_not.equal(2, rc2, err2)
    assert.truthy(out2:find("matching point", 1, true), out2)
  end)

  it("resolves a revision prefix to its latest run and refuses an ambiguous one", function()
    local w = vsalab.db_open(path)
    w:q("UPDATE run SET git_rev = 'abcd1234' WHERE id IN (?, ?)", a, b)
    w:q("UPDATE run SET git_rev = 'abcd9999-dirty' WHERE id = ?", c)
    w:close()
    local rc, out = H.vsalab("compare --db " .. path .. " abcd1 " .. a)
    assert.equal(0, rc, out)
    assert.truthy(out:match("run " .. b .. " %(baseline%) vs run " .. a), out)
    local rc3, _, err3 = H.vsalab("compare --db " .. path .. " abcd1 " .. b)
    assert.equal(2, rc3) -- both name run b: no self-comparison passes as SAME
    assert.truthy(err3:find("both name run " .. b, 1, true), err3)
    local rc2, _, err = H.vsalab("compare --db " .. path .. " abcd " .. a)
    assert.equal(2, rc2)
    assert.truthy(err:find("revision 'abcd' is ambiguous: abcd1234, abcd9999-dirty", 1, true), err)
    -- An empty or too short prefix names no revision (it used to match all).
    for _, ref in ipairs{"''", "abc", "zzzz"} do
      local rc4, _, err4 = H.vsalab("compare --db " .. path .. " " .. ref .. " " .. a)
      assert.equal(2, rc4, ref)
      assert.truthy(err4:find("no run matches '" .. ref:gsub("'", "") .. "' (", 1, true), err4)
    end
    local rc5, _, err5 = H.vsalab("show --db " .. path .. " ''")
    assert.equal(2, rc5)
    assert.truthy(err5:find("4+ hex digits", 1, true), err5)
  end)

  it("rejects bad references and options", function()
    assert.equal(2, (H.vsalab("compare --db " .. path .. " 1 999")))
    assert.equal(2, (H.vsalab("compare --db " .. path .. " 1")))
    assert.equal(2, (H.vsalab("compare --db " .. path .. " --floor-pct x 1 2")))
    assert.equal(2, (H.vsalab("compare --db " .. dir .. "/none.db 1 2")))
  end)

  it("names the kernels a run has when a RUN:KERNEL side names another", function()
    -- A plug-in's kernel is named from its file (libmine.so: mine), easy to miss.
    for _, cmd in ipairs{"compare", "report -o " .. dir .. "/k.html"} do
      local rc, out, err = H.vsalab(cmd:gsub("^(%S+)", "%1 --db " .. path) .. " 1:sm90a 1:mine")
      assert.equal(2, rc, err)
      assert.equal("", out)
      assert.truthy(err:find("run 1 has no rows of kernel 'mine' (its kernels: reference, sm90a)", 1, true), err)
    end
    -- An empty kernel read as a run "1:" that matched no run.
    local rc, _, err = H.vsalab("compare --db " .. path .. " 1:sm90a 2:")
    assert.equal(2, rc, err)
    assert.truthy(err:find("'2:' names no kernel after ':' (RUN:KERNEL, e.g. 2:reference)", 1, true), err)
  end)

  it("keys points by block size, a row without one reading as block 64", function()
    -- Run A: blocks 64 and 128 (and one point with no block: a row from
    -- before the axis); run B: 64 as fast, 128 10% slower.
    local bdb = vsalab.db_open(dir .. "/blk.db")
    local function run(slow128, nil_block)
      local id = bdb:begin_run{script = "synthetic", gpu_name = "NVIDIA H200"}
      for _, blk in ipairs{64, 128} do
        for _, S in ipairs{4096, 8192} do
          local base = S / 4096 * 0.25 * (blk == 128 and slow128 or 1)
          local s = {}
          for i = 1, 20 do s[i] = base * (1 + 0.005 * normal()) end
          local st = vsalab.stats(s)
          bdb:log{run_id = id, experiment = "synthetic", kernel = "sm90a", B = 1, H = 8, Sq = S,
            Skv = S, D = 128, block = (nil_block and blk == 64 and S == 4096) and nil or blk,
            density = 0.25, topk = S / blk / 4, ragged = 0,
            ms_median = st.median, ms_min = st.min, ms_max = st.max, spread = st.spread,
            samples = st.samples, passed = 1, mode = "hot"}
        end
      end
      bdb:end_run(id, "finished")
      return id
    end
    local ra, rb = run(1.0, true), run(1.1, false)
    bdb:close()
    local rc, out = H.vsalab("compare --db " .. dir .. "/blk.db " .. ra .. " " .. rb)
    assert.equal(1, rc, out)
    assert.truthy(out:match("4 matching points"), out)
    assert.truthy(out:match("SAME 2  FAST 0  SLOW 2  AMBIGUOUS 0"), out)
    local same, slow = 0, 0
    for line in out:gmatch("[^\n]+") do
      if line:match("^synthetic") then
        local blk = line:match("^synthetic%s+sm90a%s+1%s+8%s+%d+%s+%d+%s+(%d+)")
        assert.truthy(blk, line)
        if line:find("SLOW", 1, true) then
          slow = slow + 1
          assert.equal("128", blk, line)
        elseif line:find("SAME", 1, true) then
          same = same + 1
          assert.equal("64", blk, line)
        end
      end
    end
    assert.equal(2, same, out)
    assert.equal(2, slow, out)
  end)

  it("decides verdicts from medians, ranges and the floors", function()
    local cmp = require "vsalab.compare"
    assert.equal("SAME", (cmp.verdict({median = 1, min = 0.99, max = 1.01}, {median = 1.01, min = 1.0, max = 1.02})))
    assert.equal("SLOW", (cmp.verdict({median = 1, min = 0.99, max = 1.01}, {median = 1.1, min = 1.08, max = 1.12})))
    assert.equal("AMBIGUOUS", (cmp.verdict({median = 1, min = 0.9, max = 1.2}, {median = 1.1, min = 1.0, max = 1.3})))
    -- A 40% change of a 2-microsecond kernel is under the absolute floor.
    assert.equal("SAME", (cmp.verdict({median = 0.002, min = 0.002, max = 0.002}, {median = 0.0028, min = 0.0028, max = 0.0028})))
  end)

  -- Last: it adds a run (latest~N above counts back from the latest).
  it("flags rows timed under a power or thermal limit, on the side that was", function()
    local w = vsalab.db_open(path)
    local g = synthetic_run(w, 1.1, 0.01, true)
    w:q("UPDATE result SET throttled = 1 WHERE run_id = ? AND Sq = 16384", g)
    w:close()
    local function lines_at(out, S)
      local t = {}
      for line in out:gmatch("[^\n]+") do
        if line:match("^synthetic .* " .. S .. " ") then t[#t + 1] = line end
      end
      return t
    end
    local rc, out = H.vsalab("compare --db " .. path .. " " .. a .. " " .. g)
    assert.equal(1, rc, out) -- still SLOW: the flag explains the verdict, it does not excuse it
    assert.equal(2, #lines_at(out, 16384), out)
    for _, line in ipairs(lines_at(out, 16384)) do assert.truthy(line:match("SLOW%s+THROTTLED B%s*$"), line) end
    for _, line in ipairs(lines_at(out, 8192)) do assert.falsy(line:find("THROTTLED", 1, true), line) end
    local _, out2 = H.vsalab("compare --db " .. path .. " " .. g .. " " .. a)
    for _, line in ipairs(lines_at(out2, 16384)) do assert.truthy(line:match("FAST%s+THROTTLED A%s*$"), line) end
  end)
end)

describe("vsalab compare of host-clock rows", function()
  -- One host-clock row per point: {median, min, max} in ms.
  local function host_run(db, points)
    local id = db:begin_run{script = "host"}
    for i, t in ipairs(points) do
      db:log{run_id = id, experiment = "host", kernel = "reference", B = 1, H = 2, Sq = 256 * i,
        Skv = 256 * i, D = 64, block = 64, density = 0.5, topk = 1, ragged = 0,
        ms_median = t[1], ms_min = t[2], ms_max = t[3], spread = (t[3] - t[2]) / t[1],
        samples = 3, passed = 1, mode = "hot", extra = vsalab.json.encode{clock = "host"}}
    end
    db:end_run(id, "finished")
    return id
  end

  it("widens the floor to the measured spread, and says which floor judged", function()
    local dir = H.tmpdir()
    local path = dir .. "/h.db"
    local db = vsalab.db_open(path)
    -- Point 1: a loaded host, ranges apart, B/A 1.6 (past 50%) but within
    -- the runs' spreads (40% + 47%): the same kernel, the load moved.
    -- Point 2: a quiet host, 5% spreads, 2x slower: SLOW still.
    local a = host_run(db, {{100, 80, 120}, {10, 9.8, 10.3}})
    local b = host_run(db, {{160, 125, 200}, {10.1, 9.9, 10.4}})
    local c = host_run(db, {{160, 125, 200}, {20, 19.5, 20.5}})
    db:close()
    local rc, out = H.vsalab("compare --db " .. path .. " " .. a .. " " .. b)
    assert.equal(0, rc, out)
    assert.truthy(out:find("SAME 2  FAST 0  SLOW 0  AMBIGUOUS 0", 1, true), out)
    assert.truthy(out:find("2 points timed on the host clock (CPU): each judged with a floor derived "
      .. "from its measured spread", 1, true), out)
    assert.truthy(out:find("1 point used the spread-based floor", 1, true), out)
    assert.truthy(out:find("at least 0.05 ms (--floor-ms-host)", 1, true), out)
    assert.truthy(out:match("1%.600%s+SAME%s+floor 87%% %(spread%)"), out)
    local rc2, out2 = H.vsalab("compare --db " .. path .. " " .. a .. " " .. c)
    assert.equal(1, rc2, out2)
    assert.truthy(out2:find("SAME 1  FAST 0  SLOW 1", 1, true), out2)
    os.execute("rm -rf " .. dir)
  end)

  it("judges a host call of a few microseconds by --floor-ms-host, not by its ratio", function()
    -- A cold first CPU inversion: 8.8 µs, then 0.7 µs (12x, ranges apart).
    local dir = H.tmpdir()
    local path = dir .. "/us.db"
    local db = vsalab.db_open(path)
    local a = host_run(db, {{0.0088, 0.0080, 0.0095}})
    local b = host_run(db, {{0.0007, 0.0006, 0.0008}})
    local c = host_run(db, {{0.2, 0.19, 0.21}})
    db:close()
    local rc, out = H.vsalab("compare --db " .. path .. " " .. a .. " " .. b)
    assert.equal(0, rc, out)
    assert.truthy(out:find("SAME 1  FAST 0  SLOW 0", 1, true), out)
    -- The flag names the floor that judged, not the spread's.
    assert.truthy(out:find("under 0.05 ms (host floor)", 1, true), out)
    assert.falsy(out:find("(spread)", 1, true), out)
    -- Past the host floor a slowdown still counts: 8.8 µs to 0.2 ms.
    local rc2, out2 = H.vsalab("compare --db " .. path .. " " .. a .. " " .. c)
    assert.equal(1, rc2, out2)
    -- And the floor is the user's to set.
    local rc3, out3 = H.vsalab("compare --floor-ms-host 0.001 --db " .. path .. " " .. a .. " " .. b)
    assert.equal(0, rc3, out3)
    assert.truthy(out3:find("FAST 1", 1, true), out3)
    os.execute("rm -rf " .. dir)
  end)

  it("matches and judges two CPU smoke runs on a host busy on every core", function()
    -- End to end under load: both runs finish, every point pairs up, and
    -- each is judged as a host-clock row. The verdicts themselves are not
    -- asserted: real host timings under a changing load can move by more
    -- than any floor (seen: one point 198 ms, then 400 ms, each run's own
    -- spread small), so a verdict here would test the host's scheduler.
    -- The floors' arithmetic is tested above on fixed rows.
    local dir = H.tmpdir()
    local db = dir .. "/busy.db"
    local ncpu = 1
    local p = io.popen("nproc 2>/dev/null")
    if p then ncpu = tonumber(p:read("*l") or "") or 1; p:close() end
    local pids = {}
    for i = 1, ncpu + 1 do
      local job = H.spawn("timeout 300 sh -c 'while :; do :; done'")
      pids[i] = job
    end
    local smoke = H.root .. "/experiments/smoke.lua -a 'density=[0.25,0.5]'"
    local rc1, _, e1 = H.vsalab("run --db " .. db .. " " .. smoke)
    local rc2, _, e2 = H.vsalab("run --db " .. db .. " " .. smoke)
    local rc, out = H.vsalab("compare --db " .. db .. " latest~1 latest")
    -- (timeout passes the TERM on to its loop)
    for _, job in ipairs(pids) do os.execute("kill " .. job.pid .. " 2>/dev/null") end
    assert.equal(0, rc1, e1)
    assert.equal(0, rc2, e2)
    assert.truthy(rc == 0 or rc == 1, out) -- 1: a verdict of SLOW, never a usage error
    assert.truthy(out:find("6 matching points", 1, true), out)
    assert.truthy(out:find("ONLY A 0  ONLY B 0  MISSING 0", 1, true), out)
    assert.truthy(out:find("6 points timed on the host clock (CPU)", 1, true), out)
    local same, fast, slow, amb = out:match("SAME (%d+)  FAST (%d+)  SLOW (%d+)  AMBIGUOUS (%d+)")
    assert.equal(6, tonumber(same) + tonumber(fast) + tonumber(slow) + tonumber(amb), out)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("vsalab rerun", function()
  it("rebuilds a row's inputs exactly and measures it again", function()
    local dir = H.tmpdir()
    local db = dir .. "/r.db"
    assert.equal(0, (H.vsalab("run --db " .. db .. " --seed 77 " .. H.root .. "/experiments/smoke.lua")))
    local d = vsalab.db_open(db, {readonly = true})
    local row = d:q("SELECT id, point_hash FROM result WHERE kernel = 'reference' ORDER BY id LIMIT 1 OFFSET 1")[1]
    d:close()
    local rc, _, err = H.vsalab("rerun --db " .. db .. " " .. row.id)
    assert(rc == 0, err)
    -- It names the new run and the comparison to make.
    assert.truthy(err:find("is row %d+ of run 2; beside the original: `vsalab compare %-%-db "
      .. db:gsub("%p", "%%%0") .. " %-%-partial 1 2`"), err)
    d = vsalab.db_open(db, {readonly = true})
    local new = d:q("SELECT id, point_hash, json_extract(extra, '$.seed') AS seed FROM result WHERE run_id = 2 AND kernel = 'reference'")
    local old = d:q("SELECT json_extract(extra, '$.seed') AS seed FROM result WHERE id = ?", row.id)[1]
    assert.equal(1, #new)
    assert.equal(row.point_hash, new[1].point_hash)
    assert.equal(old.seed, new[1].seed)
    -- The reference is deterministic: identical inputs give identical errors.
    local e1 = d:q("SELECT output, rel_l2 FROM result_error WHERE result_id = ? ORDER BY output", row.id)
    local e2 = d:q("SELECT output, rel_l2 FROM result_error WHERE result_id = ? ORDER BY output", new[1].id)
    -- The rerun has the original's experiment name and seed: compare matches it.
    local rc3, out3 = H.vsalab("compare --db " .. db .. " 1 2")
    assert.truthy(out3:match("1 matching point,"), out3)
    -- Run 2 measured one point of run 1's: missing points gate unless
    -- --partial says a subset is expected.
    assert.equal(1, rc3)
    assert.truthy(out3:find("ONLY A", 1, true) and out3:find("MISSING", 1, true), out3)
    -- (CPU timings of two runs differ by 2x and more on a loaded host: a
    -- floor no host's scatter reaches, so only --partial decides the status.)
    local rc4, out4 = H.vsalab("compare --db " .. db .. " --partial --floor-pct-host 1e9 1 2")
    assert.equal(0, rc4, out4)
    assert.falsy(out4:find("ONLY A%s+MISSING"), out4) -- no point flagged
    assert.truthy(out4:find("  MISSING 0\n", 1, true), out4)
    assert.same(e1, e2)
    assert.equal("finished", d:q("SELECT status FROM run WHERE id = 2")[1].status)
    d:close()
    assert.equal(2, (H.vsalab("rerun --db " .. db .. " 9999")))
    -- A rerun that fails closes its run as failed, with the error.
    local w = vsalab.db_open(db)
    w:q("UPDATE result SET extra = json_set(extra, '$.point.B', 0) WHERE id = ?", row.id)
    local other = w:q("SELECT id FROM result WHERE run_id = 1 AND kernel = 'reference' AND id != ? LIMIT 1", row.id)[1].id
    w:q("UPDATE result SET kernel = 'nope' WHERE id = ?", other)
    w:close()
    for _, id in ipairs{row.id, other} do
      local rc5, _, err5 = H.vsalab("rerun --db " .. db .. " " .. id)
      assert.equal(1, rc5, err5)
      d = vsalab.db_open(db, {readonly = true})
      local last = d:q("SELECT status, error FROM run ORDER BY id DESC LIMIT 1")[1]
      d:close()
      assert.equal("failed", last.status)
      assert.truthy(last.error and #last.error > 0)
      if id == other then
        -- A kernel that does not run here: said as such, without a
        -- traceback, and not as a resumed point.
        assert.truthy(err5:find("nope does not run on cpu here", 1, true), err5)
        assert.truthy(err5:find("kernel 'nope' did not run here", 1, true), err5)
        assert.falsy(err5:find("resume", 1, true), err5)
        assert.falsy(err5:find("stack traceback", 1, true), err5)
      end
    end
    os.execute("rm -rf " .. dir)
  end)
end)
