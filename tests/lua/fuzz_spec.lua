-- Fuzz: thousands of random argument combinations at the Lua API (in a
-- subprocess, so a crash is a failed exit status, not a dead test runner),
-- random command lines at the CLI, and kill -9 during logging. Lua errors
-- are fine; crashes, aborts, hangs, tracebacks for usage errors and lost
-- rows are not. Each part is bounded in time (CI runs them twice: plain and
-- under ASan/UBSan).
local H = require "helpers"

-- A memory limit for a child: ulimit -v, or under ASan (which reserves
-- terabytes of address space) its own RSS limit.
local function limited(cmd, mib)
  if os.getenv("ASAN_OPTIONS") then
    return "ASAN_OPTIONS=" .. os.getenv("ASAN_OPTIONS") .. ":hard_rss_limit_mb=" .. mib .. " " .. cmd
  end
  return "ulimit -v " .. (mib * 1024) .. "; " .. cmd
end

describe("fuzz", function()
  -- Both fuzzers run in a scratch directory: random arguments name files
  -- (db_open, --db) that must not land in the source tree.
  it("the Lua API raises or returns, never crashes (finalizers and __index free arguments)", function()
    local dir = H.tmpdir()
    for _ = 1, 3 do
      local seed = H.seed()
      -- The cap stops a runaway. A typical seed peaks near 330 MB under
      -- ASan, but one CI run (2026-12-01) crossed the old 3 GB cap at
      -- 3,017 MB and did not reproduce; random shapes can ask for tensors of
      -- up to 2 GB, so 6 GB leaves room for one such call.
      -- The fuzzer stops itself after 40 s of calls (2000 calls take 32 s
      -- under ASan on a loaded host); timeout only stops a hang, so it
      -- leaves a slow call on a slow host ample room.
      local rc, out, err = H.sh("cd " .. dir .. " && " .. limited("timeout 300 " .. H.exe .. " run " .. H.root ..
        "/tests/fuzz/api_fuzz.lua " .. seed .. " 2000 40", 6000))
      local calls = tonumber(out:match("fuzz ok: (%d+) calls"))
      assert(rc == 0 and calls and calls > 0,
        string.format("seed %d: exit %s\n%s%s", seed, tostring(rc), out:sub(-200), err:sub(-2000)))
    end
    os.execute("rm -rf " .. dir)
  end)

  it("the CLI exits 0, 1 or 2 on any command line, and 2 without a traceback", function()
    local dir = H.tmpdir()
    H.write(dir .. "/ok.lua", "print(#arg)\n")
    H.write(dir .. "/bad.lua", "error('x')\n")
    H.write(dir .. "/syntax.lua", "local = 1\n")
    local tokens = {"run", "help", "--version", "--db", dir .. "/f.db", "", "--device",
      "0", "99", "-1", "x", "--seed", "281474976710656", "1e400", "--", "-x",
      dir .. "/ok.lua", dir .. "/bad.lua", dir .. "/syntax.lua", dir .. "/none.lua",
      "key=value", "'a b'", dir, H.root .. "/experiments/smoke.lua", "-a", "density=",
      "density=[0.5]", "foo=1", "-a", "runs", "show", "query", "compare", "report", "rerun",
      "latest", "latest~99", "SELECT 1", "-o", "/dev/full", "--format", "json", "--limit",
      "--partial", "--floor-pct", "--timing", "graph", "--point-timeout", "0", "/dev/null",
      "--resume", "1", "--context", "a=b", "repl", "-i"}
    local x = H.seed()
    local function rand(n) x = (x * 48271) % 2147483647; return x % n end
    for _ = 1, 150 do
      local argv = {}
      for i = 1, rand(6) do argv[i] = "'" .. tokens[rand(#tokens) + 1] .. "'" end
      local cmd = table.concat(argv, " ")
      -- timeout only stops a hang: a command line that runs the smoke
      -- experiment takes 44 s under ASan on a loaded host (the old 30 s
      -- limit made that exit 124).
      local rc, _, err = H.sh("cd " .. dir .. " && timeout 300 " .. H.exe .. " " .. cmd .. " </dev/null")
      assert(rc == 0 or rc == 1 or rc == 2, "vsalab " .. cmd .. " exited " .. tostring(rc))
      assert(rc ~= 2 or not err:find("stack traceback", 1, true),
        "vsalab " .. cmd .. ": a usage error with a traceback\n" .. err)
    end
    os.execute("rm -rf " .. dir)
  end)

  it("keeps every committed row through kill -9 at random moments", function()
    local dir = H.tmpdir()
    local db = dir .. "/k.db"
    -- Logs rows as fast as it can and says each committed row id (flushed):
    -- every id it said must be in the DB after the kill.
    H.write(dir .. "/writer.lua", [[
      for i = 1, 1e9 do
        local id = vsalab.log{experiment = "kill", kernel = "k", B = i, note = string.rep("x", i % 200)}
        io.stdout:write(id, "\n")
        io.stdout:flush()
      end
    ]])
    local x = H.seed()
    local function rand(n) x = (x * 48271) % 2147483647; return x % n end
    local function count()
      local d = vsalab.db_open(db, {readonly = true})
      local n = d:q("SELECT count(*) AS n FROM result")[1].n
      local ok = d:q("PRAGMA integrity_check")[1].integrity_check
      d:close()
      return n, ok
    end
    local before = 0
    for round = 1, 8 do
      -- Start, wait for its first committed row (a fixed 50-400 ms from
      -- the start killed a slow-starting writer before it logged, and such
      -- a round checked nothing), let it commit 0-350 ms more, kill -9,
      -- then count.
      -- (The last round's file goes first: the writer's >said truncates
      -- it only once the background job runs, and the wait must not see
      -- the old lines.)
      local ms = rand(351)
      os.execute(string.format("rm -f %s/said; %s run --db %s %s/writer.lua >%s/said 2>/dev/null & pid=$!; "
        .. "i=0; while [ ! -s %s/said ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done; "
        .. "sleep %.3f; kill -9 $pid; wait $pid 2>/dev/null", dir, H.exe, db, dir, dir, dir, ms / 1000))
      local n, ok = count()
      assert.equal("ok", ok)
      local said = 0
      local d = vsalab.db_open(db, {readonly = true})
      for line in io.lines(dir .. "/said") do
        local id = tonumber(line)
        if id then
          said = said + 1
          assert(#d:q("SELECT id FROM result WHERE id = ?", id) == 1,
            string.format("round %d: committed row %d lost by kill -9", round, id))
        end
      end
      d:close()
      assert(said > 0, string.format("round %d: the writer said no committed row before its kill (120 s at most)", round))
      assert(n >= before + said, string.format("round %d: %d rows after the kill, %d before + %d said",
        round, n, before, said))
      before = n
    end
    -- And the DB still takes a normal run afterwards.
    H.write(dir .. "/one.lua", "vsalab.log{experiment = 'after', kernel = 'k'}\n")
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. dir .. "/one.lua")
    assert(rc == 0, err)
    assert.equal(before + 1, (count()))
    os.execute("rm -rf " .. dir)
  end)
end)
