-- `vsalab run --devices all|0,1,3 SCRIPT`: one worker process per GPU.
--
-- This process (the coordinator) begins the run row, then starts on each
-- GPU a `vsalab run` of the same command line with CUDA_VISIBLE_DEVICES set
-- to that GPU alone and --device 0: each worker has its own Lua state and
-- CUDA context and logs its rows into the same results DB (WAL and a busy
-- timeout let several processes write one file). Workers send their sweep
-- plan and ask for points one at a time (lua/vsalab/dispatch.lua); points
-- go to whichever worker asks first, longest first by the sweep's
-- estimate. Every row names its GPU (index, name, UUID).
--
-- A worker that dies (a fault, out of memory, a kill) loses only its
-- current point: the coordinator logs it as failed (kernel 'config', the
-- error in note and extra.error), starts a fresh worker on that GPU (at
-- most max_deaths per GPU) and the others go on; the run then ends
-- 'failed'. SIGINT or SIGTERM stops every worker and ends the run
-- 'interrupted'. Workers' output lines are printed prefixed "gpuN| ", and
-- a status line gives each GPU's state and an ETA over all of them.
--
-- VSALAB_FAKE_DEVICES=N (tests): N fake GPUs named "fake", for workers on
-- the CPU (device=cpu scripts), so the scheduling is tested without GPUs.
local core = require "vsalab.core"
local json = require "vsalab.json"
local report = require "vsalab.report"
local run = require "vsalab.run"

local M = {}

M.max_deaths = 3        -- workers started per GPU before it is given up
M.stop_grace_s = 20     -- after SIGINT, seconds before workers are killed
M.status_every_s = 10   -- a status line at least this often while busy
M.status_min_s = 1      -- and at most this often

-- The GPUs of spec ("all" or "0,1,3"): {{index=, name=, uuid=, visible=}}
-- (visible: what CUDA_VISIBLE_DEVICES names it by), or nil, why.
function M.resolve(spec)
  local found = {}
  local fake = os.getenv("VSALAB_FAKE_DEVICES")
  if fake and fake ~= "" then
    local n = tonumber(fake)
    if not n or n < 1 or n > 64 or n ~= math.floor(n) then
      return nil, "VSALAB_FAKE_DEVICES must be a count in [1, 64], got '" .. fake .. "'"
    end
    for i = 0, n - 1 do
      found[#found + 1] = {index = i, name = "fake", uuid = string.format("FAKE-GPU-%d", i),
        visible = tostring(i)}
    end
  else
    local ok, n = core.cuda_available()
    if not ok then
      -- as the experiments say it: "--devices needs a CUDA device: no NVIDIA GPU or driver found (...)"
      return nil, "--devices needs a CUDA device: " .. (tostring(n):gsub("^no CUDA device: ", ""))
    end
    -- Ordinals are CUDA's, within this process's CUDA_VISIBLE_DEVICES when
    -- set: a worker gets the entry that names the same GPU.
    local vis = {}
    for v in (os.getenv("CUDA_VISIBLE_DEVICES") or ""):gmatch("[^,]+") do vis[#vis + 1] = v end
    for i = 0, n - 1 do
      local d = core.device_info(i)
      found[#found + 1] = {index = i, name = d.name, uuid = d.uuid, visible = vis[i + 1] or tostring(i)}
    end
  end
  if spec == "all" then return found end
  local out = {}
  for v in spec:gmatch("[^,]+") do
    local d = found[tonumber(v) + 1]
    if not d then
      local have = {}
      for i, f in ipairs(found) do have[i] = tostring(f.index) end
      return nil, string.format("--devices: no GPU %s here (GPUs: %s)", v, table.concat(have, ", "))
    end
    out[#out + 1] = d
  end
  return out
end

-- The workers' command line: this one less --devices and --device (each
-- worker sees one GPU, as device 0). argv: the arguments after `run`.
function M.worker_argv(exe, argv)
  local out = {exe, "run", "--device", "0"}
  local i = 1
  while i <= #argv and argv[i]:sub(1, 1) == "-" and argv[i] ~= "--" do
    if argv[i] ~= "--devices" and argv[i] ~= "--device" then
      out[#out + 1], out[#out + 2] = argv[i], argv[i + 1]
    end
    i = i + 2
  end
  for j = i, #argv do out[#out + 1] = argv[j] end
  return out
end

local function now() return core.proc_now() end

local function fmt_s(s)
  s = math.max(0, math.floor(s + 0.5))
  return string.format("%dm%02ds", math.floor(s / 60), s % 60)
end

-- The coordinator's state: workers, plans (by sequence number) and the
-- run. Plans: {name=, points={{k=, hash=, est=, point= (JSON), seq=}},
-- queue={k...} (not handed out yet, longest first), done= (points
-- finished or lost), est_done= (their estimates, for the ETA)}.
local C = {}
C.__index = C

function C:spawn(slot)
  local d = slot.gpu
  local env = {CUDA_VISIBLE_DEVICES = d.visible, VSALAB_WORKER_FD = "3",
    VSALAB_WORKER_RUN = string.format("%d", self.run_id),
    VSALAB_WORKER_GPU = tostring(d.index), VSALAB_WORKER_GPU_NAME = d.name,
    VSALAB_WORKER_GPU_UUID = d.uuid}
  local pid, fd, efd = core.proc_spawn(self.argv, env)
  slot.pid, slot.fd, slot.efd = pid, fd, efd
  slot.buf, slot.ebuf, slot.tail = "", "", {}
  slot.point, slot.planned, slot.state, slot.since = nil, false, "starting", now()
  slot.starts = slot.starts + 1
  self:say(string.format("gpu%d: worker pid %d on %s (%s)", d.index, pid, d.name, d.uuid))
end

function C:say(msg)
  io.stderr:write("devices: ", msg, "\n")
  io.stderr:flush()
end

-- The status line: at every event (at most once a second), at least every
-- status_every_s while busy, and at the end (force).
function C:status(event, force)
  local t = now()
  local wait = event and M.status_min_s or M.status_every_s
  if not force and t - (self.last_status or 0) < wait then return end
  self.last_status = t
  local done, total, est_left, est_done = 0, 0, 0, 0
  for _, p in pairs(self.plans) do
    total, done = total + #p.points, done + p.done
    est_done = est_done + p.est_done
    for _, k in ipairs(p.queue) do est_left = est_left + p.points[k].est end
  end
  local parts = {}
  for _, s in ipairs(self.slots) do
    local st = s.state
    if s.point then
      st = string.format("point %d (%s)", s.point.k, fmt_s(t - s.since))
      est_left = est_left + 0.5 * s.point.est
    end
    parts[#parts + 1] = string.format("gpu%d %s", s.gpu.index, st)
  end
  local eta = ""
  if est_done > 0 and self.t_first then
    eta = ", ETA " .. fmt_s(est_left * (t - self.t_first) / est_done)
  end
  self:say(string.format("%d/%d points%s | %s", done, total, eta, table.concat(parts, " | ")))
end

-- A plan message from slot (its lines are all in hand).
function C:plan(slot, seq, name, pts)
  local p = self.plans[seq]
  if not p then
    local queue = {}
    for k = 1, #pts do queue[k] = k end
    -- Longest first; ties keep the sweep's order.
    table.sort(queue, function(a, b)
      if pts[a].est ~= pts[b].est then return pts[a].est > pts[b].est end
      return a < b
    end)
    p = {name = name, points = pts, queue = queue, done = 0, est_done = 0}
    self.plans[seq] = p
    return true
  end
  -- Every worker runs the same script with the same arguments: the same plan.
  if p.name ~= name or #p.points ~= #pts then return false end
  for k, q in ipairs(pts) do if p.points[k].hash ~= q.hash then return false end end
  return true
end

function C:handle_line(slot, line)
  if slot.reading_plan then
    local rp = slot.reading_plan
    if line == "end" then
      slot.reading_plan = nil
      slot.planned = true
      if not self:plan(slot, rp.seq, rp.name, rp.points) then
        slot.rejected = true -- it stops at the abort: hand it nothing
        core.proc_write(slot.fd, "abort\tthis worker's sweep differs from the first worker's "
          .. "(a script must expand the same points in every process)\n")
      end
      return
    end
    local k, hash, est, point = line:match("^(%d+)\t(%x+)\t([^\t]+)\t(.*)$")
    rp.points[tonumber(k) or (#rp.points + 1)] = {k = tonumber(k), hash = hash, est = tonumber(est) or 0,
      point = point, seq = rp.seq}
    return
  end
  local seq, name = line:match("^plan\t(%d+)\t([^\t]*)\t%d+$")
  if seq then
    slot.reading_plan = {seq = tonumber(seq), name = name, points = {}}
    return
  end
  seq = line:match("^next\t(%d+)$")
  if seq then
    seq = tonumber(seq)
    local p = self.plans[seq]
    if slot.point then -- the previous point is done
      local q = self.plans[slot.point.seq]
      q.done, q.est_done = q.done + 1, q.est_done + slot.point.est
      slot.point = nil
    end
    local k = p and not slot.rejected and not self.stopping and table.remove(p.queue, 1)
    if k then
      slot.point, slot.state, slot.since = p.points[k], "busy", now()
      self.t_first = self.t_first or now()
      core.proc_write(slot.fd, string.format("point\t%d\n", k))
    else
      slot.state = "idle"
      core.proc_write(slot.fd, "done\n")
    end
    self:status(true)
    return
  end
  core.proc_write(slot.fd, "abort\tunknown message: " .. line:sub(1, 80) .. "\n")
end

-- Read what fd has; lines go to fn. Returns false at end of file.
local function drain(fd, slot, key, fn)
  local s = core.proc_read(fd)
  if s == nil then
    if slot[key] ~= "" then fn(slot[key]) end
    slot[key] = ""
    return false
  end
  -- Lines by position (a plan of many points arrives as one long read).
  local buf, pos = slot[key] .. s, 1
  while true do
    local nl = buf:find("\n", pos, true)
    if not nl then break end
    fn(buf:sub(pos, nl - 1))
    pos = nl + 1
  end
  slot[key] = buf:sub(pos)
  return true
end

-- The error a dead worker printed ("vsalab: ..." and what follows, less
-- the traceback), or how it ended.
local function death_reason(slot, how, code)
  local msg
  for i = #slot.tail, 1, -1 do
    local m = slot.tail[i]:match("^vsalab: (.*)")
    if m then
      local t = {m}
      for j = i + 1, #slot.tail do
        if slot.tail[j]:match("^stack traceback:") then break end
        t[#t + 1] = slot.tail[j]
      end
      msg = table.concat(t, "\n")
      break
    end
  end
  local ended = how == "signal" and ("killed by signal " .. code) or ("exit status " .. code)
  return msg and (msg .. " (worker " .. ended .. ")") or ("worker " .. ended)
end

-- slot's worker has ended (how, code from proc_wait).
function C:ended(slot, how, code)
  slot.pid = nil
  local ok = how == "exit" and code == 0
  if ok then
    slot.state = "done"
    if not slot.planned then self.unplanned = (self.unplanned or 0) + 1 end
    return
  end
  local why = death_reason(slot, how, code)
  slot.state = "dead"
  if self.stopping then return end
  local gpu = slot.gpu
  local where = string.format("gpu%d (%s)", gpu.index, gpu.uuid)
  if slot.point then
    -- Only this point is lost: logged as failed, with the error.
    local pt = slot.point
    local plan = self.plans[pt.seq]
    plan.done = plan.done + 1
    local first = why:gsub("\n.*", "")
    run.log{experiment = plan.name, kernel = "config", point_hash = pt.hash,
      gpu_index = gpu.index, gpu_name = gpu.name, gpu_uuid = gpu.uuid,
      note = "failed (worker died): " .. first,
      extra = '{"error":' .. json.encode(why) .. ',"point":' .. (pt.point ~= "" and pt.point or "null")
        .. ',"worker_pid":' .. tostring(slot.last_pid) .. '}'}
    self.errors[#self.errors + 1] = string.format("%s: point %s lost: %s", where, pt.hash, first)
    self:say(string.format("%s: worker died on point %d (%s): %s", where, pt.k, pt.hash, first))
    slot.point = nil
  else
    self.errors[#self.errors + 1] = string.format("%s: %s", where, why:gsub("\n.*", ""))
    self:say(string.format("%s: worker failed: %s", where, why))
  end
  -- A fresh worker (a new CUDA context) for the points left, unless the
  -- script itself fails before it asks for any.
  local left = 0
  for _, p in pairs(self.plans) do left = left + #p.queue end
  if slot.planned and left > 0 and slot.starts < M.max_deaths then self:spawn(slot) end
end

function C:alive()
  for _, s in ipairs(self.slots) do if s.pid then return true end end
  return false
end

-- One round: wait up to timeout_ms for output, handle it, reap the dead.
function C:step(timeout_ms)
  local fds, owner = {}, {}
  for _, s in ipairs(self.slots) do
    if s.fd then fds[#fds + 1] = s.fd; owner[s.fd] = {s, "msg"} end
    if s.efd then fds[#fds + 1] = s.efd; owner[s.efd] = {s, "err"} end
  end
  for _, fd in ipairs(core.proc_poll(fds, timeout_ms)) do
    local s, kind = owner[fd][1], owner[fd][2]
    if kind == "msg" then
      if not drain(fd, s, "buf", function(line) self:handle_line(s, line) end) then
        core.proc_close(fd)
        s.fd = nil
      end
    else
      local ok = drain(fd, s, "ebuf", function(line)
        io.stderr:write("gpu", s.gpu.index, "| ", line, "\n")
        s.tail[#s.tail + 1] = line
        if #s.tail > 40 then table.remove(s.tail, 1) end
      end)
      if not ok then core.proc_close(fd); s.efd = nil end
    end
  end
  for _, s in ipairs(self.slots) do
    -- Reaped once both its pipes are closed (all its output read).
    if s.pid and not s.fd and not s.efd then
      local how, code = core.proc_wait(s.pid, true)
      s.last_pid = s.pid
      self:ended(s, how, code)
    elseif s.pid and (s.fd == nil) ~= (s.efd == nil) then
      local how, code = core.proc_wait(s.pid)
      if how then
        s.last_pid = s.pid
        if s.fd then core.proc_close(s.fd); s.fd = nil end
        if s.efd then core.proc_close(s.efd); s.efd = nil end
        self:ended(s, how, code)
      end
    end
  end
  self:status(false)
end

-- SIGINT/SIGTERM: every worker is asked to stop (it closes its rows and
-- exits), then killed after the grace period.
function C:stop()
  self.stopping = true
  for _, s in ipairs(self.slots) do if s.pid then core.proc_kill(s.pid, "INT") end end
  local t0 = now()
  while self:alive() do
    local ok = pcall(self.step, self, 200)
    if not ok or now() - t0 > M.stop_grace_s then
      for _, s in ipairs(self.slots) do
        if s.pid then
          core.proc_kill(s.pid, "KILL")
          core.proc_wait(s.pid, true)
          if s.fd then core.proc_close(s.fd); s.fd = nil end
          if s.efd then core.proc_close(s.efd); s.efd = nil end
          s.pid = nil
        end
      end
    end
  end
end

-- Why run run_id measured nothing (no worker logged a backward's row:
-- every point skipped, filtered out, or without a backward here), as a
-- one-process run fails then (vsalab.experiment.run); nil when one did.
local function nothing_measured(run_id)
  local db = run.current().db
  local n = db:q([[SELECT count(*) AS n FROM result WHERE run_id = ?
    AND kernel NOT IN ('config', 'invert', 'gemm_bf16')]], run_id)[1].n
  if n > 0 then return nil end
  local skipped = report.reasons()
  for _, r in ipairs(db:q("SELECT note FROM result WHERE run_id = ? AND kernel = 'config' ORDER BY id", run_id)) do
    skipped.add(tostring(r.note):match("^skipped %((.-)%)") or tostring(r.note))
  end
  local why = skipped.text()
  return report.nothing_measured .. (why ~= "" and why
    or "no point had a backward to run here, or the sweep had none (see the skip lines above)")
end

-- The points of the run's sweeps that have no row in it (an interrupt or
-- dead workers stopped them), or nil when every point has one: "3 of 40
-- points have no row: point 2 (HASH), ..." (k: the point's place in its
-- sweep; rows find it by point_hash).
function C:lost_points()
  local have, total, lost = {}, 0, {}
  local ok, rows = pcall(function()
    return run.current().db:q("SELECT DISTINCT point_hash FROM result WHERE run_id = ?", self.run_id)
  end)
  if not ok then return nil end
  for _, r in ipairs(rows) do if r.point_hash then have[r.point_hash] = true end end
  local seqs = {}
  for seq in pairs(self.plans) do seqs[#seqs + 1] = seq end
  table.sort(seqs)
  for _, seq in ipairs(seqs) do
    local p = self.plans[seq]
    total = total + #p.points
    for k, pt in ipairs(p.points) do
      if not have[pt.hash] then
        lost[#lost + 1] = string.format("%spoint %d (%s)", #seqs > 1 and (p.name .. " ") or "", k, pt.hash)
      end
    end
  end
  if #lost == 0 then return nil end
  return string.format("%d of %d point%s %s no row: %s", #lost, total, total == 1 and "" or "s",
    #lost == 1 and "has" or "have", table.concat(lost, ", "))
end

-- Entry point (src/cli/main.c, `run --devices`): argv are the arguments after
-- `run`. Returns the exit status: 0 when every point ran and every worker
-- ended well, 1 otherwise, 2 for a GPU list that does not match the host.
function M.main(argv)
  local ctx = package.loaded.vsalab.context
  local gpus, why = M.resolve(ctx.devices)
  if not gpus then io.stderr:write("vsalab: ", why, "\n"); return 2 end
  if not ctx.exe then io.stderr:write("vsalab: --devices: cannot find this program's path\n"); return 1 end
  local self = setmetatable({argv = M.worker_argv(ctx.exe, argv), slots = {}, plans = {}, errors = {}}, C)
  local list = {}
  for i, d in ipairs(gpus) do list[i] = {index = d.index, name = d.name, uuid = d.uuid} end
  -- The run row, with the GPUs it spans.
  local ok_run, r = pcall(run.current, {devices = json.encode(list), device_index = false})
  if not ok_run then io.stderr:write("vsalab: ", tostring(r), "\n"); return 1 end
  self.run_id = r.id
  self.last_status = now()
  self:say(string.format("run %d in %s: %d worker%s", r.id, r.path, #gpus, #gpus == 1 and "" or "s"))
  local ok, err = pcall(function()
    for _, d in ipairs(gpus) do
      local slot = {gpu = d, starts = 0}
      self.slots[#self.slots + 1] = slot
      self:spawn(slot)
    end
    while self:alive() do self:step(1000) end
  end)
  if not ok then
    local interrupted = tostring(err):find("interrupted!", 1, true)
    self:say(interrupted and "interrupted: stopping every worker" or ("stopping every worker: " .. tostring(err)))
    self:stop()
    -- What the run lacks, to measure again (also in the run's error column).
    local lost = self:lost_points()
    if lost then self:say(lost) end
    local why = interrupted and "interrupted" or tostring(err)
    run.finish(interrupted and "interrupted" or "failed", lost and (why .. "; " .. lost) or why)
    return 1
  end
  -- Points never handed out: every worker of some GPU died, or a script
  -- failed before its plan.
  local left = 0
  for _, p in pairs(self.plans) do left = left + #p.queue end
  if left > 0 then self.errors[#self.errors + 1] = self:lost_points()
    or string.format("%d point%s not measured", left, left == 1 and "" or "s") end
  if self.unplanned and next(self.plans) == nil and #gpus > 1 then
    self:say("warning: the script measured without vsalab.experiment.run, so every worker ran it whole")
  end
  self:status(false, true)
  if #self.errors == 0 and next(self.plans) then
    self.errors[#self.errors + 1] = nothing_measured(self.run_id)
  end
  if #self.errors > 0 then
    local msg = table.concat(self.errors, "\n")
    io.stderr:write("vsalab: ", msg, "\n")
    run.finish("failed", msg)
    return 1
  end
  run.finish("finished")
  return 0
end

return M
