-- Shared by the specs: the vsalab binary, temp paths, shell capture, and a
-- fresh seed per process (printed so a failure can be replayed with
-- VSALAB_TEST_SEED=N).
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
