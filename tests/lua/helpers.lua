-- Shared by the specs: the vsalab binary, temp paths, shell capture, a
-- fresh seed per process (printed so a failure can be replayed with
-- VSALAB_TEST_SEED=N), and the setup and checks several specs repeat.
local assert = require "luassert"
local H = {}

H.exe = vsalab.context.exe
H.root = os.getenv("VSALAB_ROOT") or os.getenv("PWD") or "."
if H.root:sub(1, 1) ~= "/" then H.root = (os.getenv("PWD") or ".") .. "/" .. H.root end

local seed = tonumber(os.getenv("VSALAB_TEST_SEED") or "") or (os.time() % 1000000)
-- Name the spec file that loads these helpers (busted loads them per file).
local spec_file = "?"
for level = 2, 20 do
  local info = debug.getinfo(level, "S")
  if not info then break end
  local f = info.source:match("([^/@]+_spec%.lua)$")
  if f then spec_file = f; break end
end
io.stderr:write("[specs] ", spec_file, ": seed ", seed,
  " (replay: VSALAB_TEST_SEED=", seed, " build/vsalab run tests/run_busted.lua tests/lua/", spec_file, ")\n")
function H.seed()
  seed = seed + 1
  return seed
end

function H.tmpdir()
  local p = io.popen("mktemp -d")
  local d = p:read("*l")
  p:close()
  return d
end

-- Run a shell command; returns exit code, stdout, stderr.
function H.sh(cmd)
  local dir = H.tmpdir()
  local rc = os.execute(cmd .. " >" .. dir .. "/out 2>" .. dir .. "/err")
  local function slurp(f)
    local h = io.open(dir .. "/" .. f)
    local s = h:read("*a")
    h:close()
    return s
  end
  local out, err = slurp("out"), slurp("err")
  os.execute("rm -rf " .. dir)
  -- LuaJIT (5.1 semantics) returns the raw wait status.
  if type(rc) == "number" and rc > 255 then rc = math.floor(rc / 256) end
  return rc, out, err
end

function H.vsalab(args)
  return H.sh(H.exe .. " " .. args)
end

function H.write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- The whole of file path (bytes as they are), or nil and why when it
-- cannot be opened.
function H.read(path)
  local f, why = io.open(path, "rb")
  if not f then return nil, why end
  local s = f:read("*a")
  f:close()
  return s
end

-- A usage error as vsalab must report one: exit 2, text (when given, found
-- as is) on stderr, and no Lua traceback. what: the command, for the
-- failure message.
function H.usage_error(rc, err, text, what)
  local ctx = (what and what .. "\n" or "") .. err
  assert.equal(2, rc, ctx)
  if text then assert.truthy(err:find(text, 1, true), ctx) end
  assert.falsy(err:find("traceback", 1, true), ctx)
end

-- A fresh directory holding name (a DB) with `runs` runs of
-- experiments/smoke.lua (default 1). Returns the directory (the caller
-- removes it) and the DB's path.
function H.smoke_db(name, runs)
  local dir = H.tmpdir()
  local db = dir .. "/" .. name
  for _ = 1, runs or 1 do
    assert.equal(0, (H.vsalab("run --db " .. db .. " " .. H.root .. "/experiments/smoke.lua")))
  end
  return dir, db
end

-- A DB at path holding one finished run and no rows.
function H.db_with_run(path)
  local d = vsalab.db_open(path)
  d:end_run(d:begin_run{script = "x"}, "finished")
  d:close()
end

-- html rendered by headless Chromium (Debian's package, which
-- scripts/setup.sh installs) into png at size "W,H"; returns its bytes.
function H.screenshot(html, png, size)
  assert(os.execute("command -v chromium >/dev/null 2>&1") == 0,
    "chromium is not installed (scripts/setup.sh installs it)")
  local rc = H.sh("timeout 90 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars " ..
    "--window-size=" .. size .. " --screenshot=" .. png .. " file://" .. html)
  assert.equal(0, rc)
  return assert(H.read(png))
end

-- Poll cond() every 0.05 s until it returns a true value, which is
-- returned; after limit seconds (default 120) fail naming what was awaited.
-- Tests wait for what they need to see, never for a fixed time: only a
-- failing test waits the whole limit (CI runs the specs under ASan on a
-- loaded host).
function H.wait_until(what, cond, limit)
  local t0 = vsalab.proc_now()
  while true do
    local v = cond()
    if v then return v end
    if vsalab.proc_now() - t0 > (limit or 120) then
      error("waited " .. (limit or 120) .. " s for " .. what, 2)
    end
    os.execute("sleep 0.05")
  end
end

-- Start cmd (a shell command that redirects its own output) in the
-- background. Returns a job: job.pid, job.rc() -> its exit status once it
-- has ended (128 + N for signal N), else nil; job.wait(what, limit) waits
-- for the end (H.wait_until) and returns the status.
function H.spawn(cmd)
  local dir = H.tmpdir()
  os.execute("(" .. cmd .. " & echo $! >" .. dir .. "/pid.tmp; mv " .. dir .. "/pid.tmp " .. dir
    .. "/pid; wait $!; echo $? >" .. dir .. "/rc.tmp; mv " .. dir .. "/rc.tmp " .. dir .. "/rc) </dev/null >/dev/null 2>&1 &")
  local function read(name)
    local f = io.open(dir .. "/" .. name)
    if not f then return nil end
    local v = tonumber(f:read("*l"))
    f:close()
    return v
  end
  local job = {pid = H.wait_until("the background command to start", function() return read("pid") end)}
  function job.rc()
    if job.status == nil then
      job.status = read("rc")
      if job.status then os.execute("rm -rf " .. dir) end
    end
    return job.status
  end
  function job.wait(what, limit) return H.wait_until(what or "the background command to end", job.rc, limit) end
  return job
end

-- The message of the error fn raises (fails the test if it does not).
function H.err(fn, ...)
  local ok, e = pcall(fn, ...)
  assert(not ok, "expected an error")
  return tostring(e)
end

return H
