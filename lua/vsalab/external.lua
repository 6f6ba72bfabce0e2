-- External backends: a backward that runs in another process (a Python
-- kernel, another framework), handed the point's exact inputs as .npy files
-- and checked and logged like vsalab's own (docs/peers.md, "External backends").
--
-- external{name=, cmd={"python3", "peer.py", ...}, supported=function(device,
--   p) -> ok, why, description=, bench_opts=, keep=false} -> the backend.
--
-- The protocol (version 1). For each call vsalab makes a fresh directory
-- DIR, writes into it
--   q.npy k.npy v.npy dO.npy o.npy (bf16 stored as uint16 '<u2': view the
--   bits as bfloat16, e.g. torch.from_numpy(a).view(torch.bfloat16)),
--   lse.npy (f32, M format), q2k_idx.npy q2k_num.npy k2q_idx.npy
--   k2q_num.npy variable_block_sizes.npy (i32; the lists canonical: rows
--   ascending, no repeats, -1 past each count; q2k [B,H,nq,W] with W the
--   longest row, k2q [B,H,nkv,nq]),
--   job.json: {protocol=1, backend, device ('cpu' or 'cuda'), cuda_device,
--   B, H, Sq, Skv, D, nq, nkv, block (tokens per block, 64 or 128: the
--   problem's), sm_scale, inputs={name={file,
--   dtype, stored_as, shape}}, outputs={dq|dk|dv={file, shape}}, bench
--   (null: compute once, no timing; else {warmup, min_samples, max_noise,
--   min_time, max_time (s), max_samples, repeats, hold, mode}), timing_file}
-- and runs `cmd... DIR`. The peer writes dq.npy, dk.npy, dv.npy (uint16
-- bf16 bits, or float32: converted to bf16 with round to nearest even) and,
-- when bench is not null, timing.json: {"samples_ms": [...], "clock":
-- "cuda", "mode": "hot", "stop": "noise", "note": "...", "extra": {...}}.
-- Exit status 0 on success; 3 when the peer cannot run this point (a
-- block size, layout or GPU its library does not take): its last output
-- line says why, and the point gets a skipped row for it ("backend NAME
-- skipped: ..."); anything else fails the point with the peer's last
-- output lines ("backend NAME failed: ..."). job.json's block is the
-- point's block size (64 unless the point says), its layout 'bhsd'
-- unless the point says. stdout and stderr
-- go to DIR/peer.log; DIR is removed afterwards unless keep (or
-- VSALAB_KEEP_PEER_DIR=1).
local core = require "vsalab.core"
local json = require "vsalab.json"

local M = {}

local function quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function tail_lines(text, n)
  local lines = {}
  for l in (text or ""):gmatch("[^\n]+") do lines[#lines + 1] = l end
  local from = math.max(1, #lines - n + 1)
  return table.concat(lines, " | ", from)
end

-- The last n lines of the peer's output, at most 2000 characters. Read
-- through core.read_regular, as everything the peer leaves: a FIFO in a
-- file's place blocked io.open forever (deaf to a first SIGTERM), and a
-- log of gigabytes was read whole into memory and into the row's note.
local function log_tail(dir, n)
  local text = core.read_regular(dir .. "/peer.log", 16384, true)
  local t = tail_lines(text, n)
  if #t > 2000 then t = "..." .. t:sub(-2000) end
  -- The tail goes to the terminal and into the row's note: a peer's escape
  -- sequences (clear screen, window title) are shown, not obeyed.
  t = t:gsub("%c", function(c) return string.format("\\x%02x", c:byte()) end)
  return t
end

-- The canonical lists of p, q2k cut to the longest row.
local function lists(p)
  local qi, qn = core.invert_indices(p.k2q_idx, p.k2q_num, p.nq)
  local ki, kn = core.invert_indices(qi, qn, p.nkv)
  local w = 1
  for _, row in ipairs(qn:reshape{qn:numel()}:to("cpu"):to_table()) do
    if row > w then w = row end
  end
  if w < qi.shape[4] then
    local cut = qi:narrow(4, 1, w):contiguous()
    qi:free()
    qi = cut
  end
  return qi, qn, ki, kn
end

local function mkdir_temp()
  local base = os.getenv("VSALAB_PEER_TMP") or os.getenv("TMPDIR") or "/tmp"
  local h = io.popen("mktemp -d " .. quote(base .. "/vsalab-peer.XXXXXX") .. " 2>/dev/null")
  local d = h and h:read("*l")
  if h then h:close() end
  if not d or d == "" then error("external backend: cannot make a directory under " .. base, 0) end
  return d
end

-- Write p's inputs and job.json into dir; bench = nil (compute only) or
-- the timing options.
function M.write_job(dir, name, p, bench)
  local qi, qn, ki, kn = lists(p)
  local ins = {q = p.q, k = p.k, v = p.v, dO = p.dO, o = p.o, lse = p.lse, q2k_idx = qi,
    q2k_num = qn, k2q_idx = ki, k2q_num = kn, variable_block_sizes = p.vbs}
  local inputs = {}
  for key, t in pairs(ins) do
    core.npy_save(dir .. "/" .. key .. ".npy", t)
    inputs[key] = {file = key .. ".npy", dtype = t.dtype,
      stored_as = ({bf16 = "uint16", f32 = "float32", i32 = "int32"})[t.dtype], shape = t.shape}
  end
  for _, t in ipairs{qi, qn, ki, kn} do t:free() end
  local dev = p.q.device
  local job = {protocol = 1, backend = name, device = dev == "cpu" and "cpu" or "cuda",
    cuda_device = dev ~= "cpu" and tonumber(dev:match("%d+")) or json.null,
    B = p.B, H = p.H, Sq = p.Sq, Skv = p.Skv, D = p.D, nq = p.nq, nkv = p.nkv, block = p.block or 64,
    layout = p.layout or "bhsd",
    sm_scale = p.sm_scale, inputs = inputs,
    outputs = {dq = {file = "dq.npy", shape = p.q.shape}, dk = {file = "dk.npy", shape = p.k.shape},
      dv = {file = "dv.npy", shape = p.k.shape}},
    bench = bench or json.null, timing_file = "timing.json"}
  local f = assert(io.open(dir .. "/job.json", "w"))
  f:write(json.encode(job), "\n")
  f:close()
end

-- Run backend b's command on p: outputs {dq, dk, dv} on p's device, and the
-- parsed timing.json (or nil without bench).
function M.call(b, p, bench)
  local dir = mkdir_temp()
  local keep = b.keep or os.getenv("VSALAB_KEEP_PEER_DIR") == "1"
  local ok, outs, timing = pcall(function()
    M.write_job(dir, b.name, p, bench)
    local parts = {}
    for i, a in ipairs(b.cmd) do parts[i] = quote(a) end
    -- Under setsid (its process group is its pid, which exec keeps), so
    -- that a Ctrl-C, SIGTERM or --point-timeout here can kill the peer and
    -- everything it started; vsalab waits in short polls, so the interrupt
    -- reaches Lua. The exit status is read from that process itself, not
    -- from a status file the peer could replace by a FIFO (a write to it
    -- never returned).
    local cmdline = "exec setsid sh -c " .. quote(table.concat(parts, " ") .. " " .. quote(dir)
      .. " >" .. quote(dir .. "/peer.log") .. " 2>&1")
    local okp, pid, msg_fd, err_fd = pcall(core.proc_spawn, {"/bin/sh", "-c", cmdline}, {})
    if not okp then error(string.format("backend %s failed: cannot start %s: %s", b.name, b.cmd[1], tostring(pid)), 0) end
    local running, how, code = true, nil, nil
    local okw, werr = pcall(function()
      while true do
        how, code = core.proc_wait(pid)
        if how then break end
        for _, fd in ipairs(core.proc_poll({err_fd}, 100)) do core.proc_read(fd) end
      end
      running = false
    end)
    if running then -- interrupted or timed out: the peer's whole group goes
      core.proc_kill(pid, "TERM", true)
      local t0, reaped = core.proc_now(), false
      while not reaped and core.proc_now() - t0 < 2 do
        reaped = core.proc_wait(pid) ~= nil
        if not reaped then core.proc_poll({}, 50) end
      end
      core.proc_kill(pid, "KILL", true) -- what is left of the group
      if not reaped then core.proc_wait(pid, true) end
    end
    core.proc_close(msg_fd)
    core.proc_close(err_fd)
    if not okw then error(werr, 0) end
    if how == "exit" and code == 3 then -- the peer's library cannot take this point
      local why = log_tail(dir, 1):gsub("^skip: ", "")
      if why:match("^%s*$") then why = "the peer exited with status 3 (cannot run this point) and printed no reason" end
      error(string.format("backend %s skipped: %s", b.name, why), 0)
    end
    if how ~= "exit" or code ~= 0 then
      error(string.format("backend %s failed: peer %s: %s", b.name,
        how == "signal" and ("was killed by signal " .. tostring(code))
          or ("exited with status " .. tostring(code)), log_tail(dir, 4)), 0)
    end
    local o = {}
    local dev = p.q.device
    for name, shape in pairs{dq = p.q.shape, dk = p.k.shape, dv = p.k.shape} do
      local path = dir .. "/" .. name .. ".npy"
      if not core.file_type(path) then
        error(string.format("backend %s failed: the peer wrote no %s.npy: %s", b.name, name,
          log_tail(dir, 4)), 0)
      end
      local okl, t = pcall(core.npy_load, path, {dtype = "bf16", shape = shape, device = dev})
      if not okl then error(string.format("backend %s failed: %s", b.name, tostring(t)), 0) end
      o[name] = t
    end
    local tm
    if bench then
      local text, why = core.read_regular(dir .. "/timing.json", 64 * 1024 * 1024)
      if not text then
        error(string.format("backend %s failed: %s", b.name, core.file_type(dir .. "/timing.json")
          and ("timing.json " .. why:gsub("^'[^']*' ", "")) or "the peer wrote no timing.json"), 0)
      end
      local okj, t = pcall(json.decode, text)
      if not okj then -- Python's json.dump writes NaN unless allow_nan=False
        error(string.format("backend %s failed: timing.json is not valid JSON (NaN and Infinity are not JSON): %s",
          b.name, tostring(t)), 0)
      end
      if type(t) ~= "table" or type(t.samples_ms) ~= "table" or #t.samples_ms == 0 then
        error(string.format("backend %s failed: timing.json holds no samples_ms list", b.name), 0)
      end
      for _, x in ipairs(t.samples_ms) do
        if type(x) ~= "number" or not (x > 0 and x < math.huge) then
          error(string.format("backend %s failed: timing.json: sample %s is not a positive time in ms", b.name, tostring(x)), 0)
        end
      end
      -- What the row takes as it is: vsalab.log refuses another mode, and a
      -- note or extra its JSON cannot nest (row extra.peer.extra), failing
      -- the run instead of this point.
      local modes = require("vsalab.bench").modes -- (`bench` here is the job's options)
      if t.mode ~= nil and not (type(t.mode) == "string" and modes[t.mode]) then
        error(string.format("backend %s failed: timing.json: mode '%s' is not hot, cold, graph or sustained",
          b.name, tostring(t.mode)), 0)
      end
      if not pcall(json.encode, {row = {peer = {note = t.note, extra = t.extra}}}) then
        error(string.format("backend %s failed: timing.json: its note and extra nest too deep for the row's JSON",
          b.name), 0)
      end
      tm = t
    end
    return o, tm
  end)
  if not keep then os.execute("rm -rf " .. quote(dir)) end
  if not ok then error(outs, 0) end
  return outs, timing
end

function M.external(o)
  if type(o) ~= "table" then error("backends.external: expected a table {name=, cmd={...}}", 2) end
  local known = {name = true, cmd = true, supported = true, description = true, bench_opts = true, keep = true}
  for k in pairs(o) do
    if not known[k] then error("backends.external: unknown field '" .. tostring(k) .. "' (takes name, cmd, supported, description, bench_opts, keep)", 2) end
  end
  if type(o.name) ~= "string" or not o.name:match("^[%w_.:%-]+$") then
    error("backends.external: field 'name' must be letters, digits and _ . : -", 2)
  end
  local taken = require("vsalab.backends").reserved(o.name)
  if taken then error("backends.external: field 'name': " .. taken, 2) end
  if type(o.cmd) ~= "table" or #o.cmd == 0 then
    error("backends.external: field 'cmd' must be a non-empty list of strings (the command; DIR is appended)", 2)
  end
  for i, a in ipairs(o.cmd) do
    if type(a) ~= "string" then error("backends.external: cmd[" .. i .. "] must be a string", 2) end
  end
  if o.supported ~= nil and type(o.supported) ~= "function" then
    error("backends.external: field 'supported' must be a function(device, p) -> ok, why", 2)
  end
  local backends = require "vsalab.backends"
  local b = {name = o.name, cmd = o.cmd, keep = o.keep, external = true,
    description = o.description or ("external: " .. table.concat(o.cmd, " ")),
    supported = o.supported, bench_opts = o.bench_opts or backends.kernel_bench_opts,
    origin = {kind = "external", name = o.name, cmd = o.cmd}}
  b.run = function(p)
    local outs = M.call(b, p, nil)
    return outs.dq, outs.dk, outs.dv
  end
  -- The experiment's timing: the peer times itself with vsalab's bench
  -- options and reports its samples; vsalab turns them into the same
  -- statistics as its own.
  b.measure = function(p, opts)
    local bopts = {}
    for k, v in pairs(opts or {}) do bopts[k] = v end
    bopts.warmup = bopts.warmup or 3
    bopts.min_samples = bopts.min_samples or 10
    bopts.max_noise = bopts.max_noise or 0.005
    bopts.min_time = bopts.min_time or 0.5
    bopts.max_time = bopts.max_time or 15
    bopts.mode = bopts.mode or "hot"
    if bopts.hold == nil then bopts.hold = true end
    -- Sustained: the window of bench.sustained_opts, asked as mode
    -- 'sustained' (a peer that samples hot instead still gets the row so
    -- named, below).
    local bench = require "vsalab.bench"
    local sustained = bopts.mode == "sustained"
    if sustained then bopts = bench.sustained_opts(bopts) end
    bopts.max_samples = bopts.max_samples or 100000
    local outs, t = M.call(b, p, bopts)
    local st = bench.stats(t.samples_ms)
    st.clock = type(t.clock) == "string" and t.clock or "peer"
    st.mode = type(t.mode) == "string" and t.mode or "hot"
    if sustained and st.mode == "hot" then st.mode = "sustained" end
    st.stop = type(t.stop) == "string" and t.stop or nil
    st.peer = {note = t.note, extra = t.extra}
    return outs, st
  end
  return backends.register(b)
end

-- Peers that `peers=NAME` (experiments) and `vsalab.backends.peer(NAME)`
-- know, relative to the repository root (the working directory). Each
-- declares what its library takes: head dims D, block sizes, layouts and the GPU
-- architectures (major compute capability); a point outside them gets a
-- skipped row saying why, without starting the peer. Block sizes and
-- layouts come from the point (p.block, default 64; p.layout, default
-- 'bhsd').
local PEERS_HINT = "install the pinned peers into .peers/: scripts/peers.sh install "
  .. "(a GPU host without a package registry: scripts/peers.sh download DIR on a connected machine, "
  .. "then scripts/peers.sh install DIR on the GPU host)"
M.peers = {
  triton = {
    cmd = {"python3", "tests/gpu/peers/triton_peer.py"},
    description = "FastVideo's public Triton VSA backward and inversion (.peer/, external)",
    needs = {"tests/gpu/peers/triton_peer.py", ".peer/fastvideo_triton/block_sparse_attn_triton.py",
      ".peer/fastvideo_triton/index.py"},
    hint = "run tests/gpu/fetch_peer.sh (it fills .peer/; copy that folder to the GPU host)",
    device = "cuda", D = {64, 128},
    -- 64-token lists natively; 128-token lists expanded to 64 as FastVideo does.
    blocks = {64, 128}, layouts = {"bhsd", "bshd"},
  },
  cudnn_bsa = {
    cmd = {"python3", "tests/gpu/peers/cudnn_bsa_peer.py"},
    description = "NVIDIA cuDNN frontend Block-Sparse Attention backward (cudnn.block_sparse_attention, .peers/, external)",
    needs = {"tests/gpu/peers/cudnn_bsa_peer.py", ".peers/cudnn/block_sparse_attention/api.py",
      ".peers/nvidia_cutlass_dsl/dsl_packages/cutlass/__init__.py"},
    hint = PEERS_HINT,
    device = "cuda", D = {128}, blocks = {64, 128}, layouts = {"bhsd", "bshd"}, arch = {9, 10, 11},
  },
  fa4 = {
    cmd = {"python3", "tests/gpu/peers/fa4_peer.py"},
    description = "FlashAttention-4 CuTe DSL block-sparse backward (flash_attn.cute, .peers/, external)",
    needs = {"tests/gpu/peers/fa4_peer.py", ".peers/flash_attn/cute/interface.py",
      ".peers/quack/__init__.py", ".peers/nvidia_cutlass_dsl/dsl_packages/cutlass/__init__.py"},
    hint = PEERS_HINT,
    -- Its backward tiles kv by 128 on SM90 and SM100: a sparse kv block is
    -- 128 tokens (or a multiple, on SM100).
    device = "cuda", D = {64, 128}, blocks = {128}, layouts = {"bhsd", "bshd"}, arch = {9, 10, 11},
  },
  cudnn_dense = {
    cmd = {"python3", "tests/gpu/peers/cudnn_dense_peer.py"},
    description = "cuDNN's dense attention backward (PyTorch SDPA, cuDNN backend; external): the dense ceiling",
    needs = {"tests/gpu/peers/cudnn_dense_peer.py"},
    hint = "run from the repository root", python_module = "torch",
    install = "a PyTorch with CUDA and cuDNN (python3 -m pip install torch)",
    -- Dense attention is the block-sparse backward only where every pair is
    -- selected (and, checked by the peer, every kv block full).
    device = "cuda", D = {64, 128}, blocks = {64, 128}, layouts = {"bhsd", "bshd"}, arch = {8, 9, 10, 11},
    dense_only = true,
  },
  numpy = {
    cmd = {"python3", "tests/peers/numpy_peer.py"},
    description = "the CPU reference backward in numpy (protocol test)",
    needs = {"tests/peers/numpy_peer.py"},
    hint = "run from the repository root", python_module = "numpy",
    install = "python3 -m pip install numpy, or apt-get install python3-numpy",
    -- Both natively: each head a strided view (vsalab_peer.head).
    layouts = {"bhsd", "bshd"},
  },
  ["lua-ref"] = {
    cmd = {"@vsalab", "run", "tests/peers/ref_peer.lua"},
    description = "vsalab's reference backward in a second vsalab process (protocol test)",
    needs = {"tests/peers/ref_peer.lua"}, hint = "run from the repository root",
    layouts = {"bhsd", "bshd"}, -- backward_ref takes layout= itself
  },
}

local function member(list, x)
  for _, y in ipairs(list) do if y == x then return true end end
  return false
end

local function joined(list)
  local t = {}
  for i, x in ipairs(list) do t[i] = tostring(x) end
  return table.concat(t, ", ")
end

-- Why known peer `name` cannot take point p (its head dim, block size,
-- layout or this GPU's architecture), or nil. p.block and p.layout default to 64
-- and 'bhsd' (points made before those axes existed).
function M.unfit(name, p)
  local d = M.peers[name]
  if not d then return nil end
  local block, layout = p.block or 64, p.layout or "bhsd"
  if d.D and p.D and not member(d.D, p.D) then
    return string.format("%s takes head dim D in {%s}, the point has %d", name, joined(d.D), p.D)
  end
  if d.blocks and not member(d.blocks, block) then
    return string.format("%s takes block sizes {%s}, the point has %d", name, joined(d.blocks), block)
  end
  if d.layouts and not member(d.layouts, layout) then
    return string.format("%s takes layouts {%s}, the point has %s", name, joined(d.layouts), layout)
  end
  if d.dense_only and p.pairs and p.nq and p.nkv and p.pairs < p.B * p.H * p.nq * p.nkv then
    return string.format("%s computes dense attention: it takes density 1, the point selects %d of %d pairs",
      name, p.pairs, p.B * p.H * p.nq * p.nkv)
  end
  if d.arch and p.q and p.q.device ~= "cpu" then
    local okc, info = pcall(core.device_info)
    local major = okc and type(info) == "table" and tonumber(tostring(info.cc):match("^(%d+)"))
    if major and not member(d.arch, major) then
      return string.format("%s's backward runs on SM%s0, this GPU is %s", name,
        table.concat(d.arch, "0/SM"), tostring(info.cc))
    end
  end
  return nil
end

-- A readable file at path (a directory opens too, but reads fail).
local function exists(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local _, err = f:read(0)
  f:close()
  return err == nil
end

-- Whether python3 imports module (asked once per module).
local imports = {}
local function importable(module)
  if imports[module] == nil then
    local rc = os.execute("python3 -c 'import " .. module .. "' >/dev/null 2>&1")
    imports[module] = rc == 0 or rc == true
  end
  return imports[module]
end

-- Why known peer `name` cannot run here for its python module ("numpy:
-- python3 cannot import numpy (install it: ...)"), or nil.
local function missing_module(name)
  local d = M.peers[name]
  if d and d.python_module and not importable(d.python_module) then
    return string.format("%s: python3 cannot import %s%s", name, d.python_module,
      d.install and (" (install it: " .. d.install .. ")") or "")
  end
end

-- Why known peer `name` cannot run on any device here: a file it needs is
-- missing (paths are relative to the working directory, the repository
-- root), or its python module is not importable; nil when
-- neither. `peers=NAME` asks for it by name, so experiments refuse it then.
function M.missing(name)
  local d = M.peers[name]
  if not d then return nil end
  for _, f in ipairs(d.needs or {}) do
    if not exists(f) then
      -- A file of this repository (tests/...) is missing only when vsalab
      -- runs from elsewhere; the peer's own hint is for what it fetches.
      local hint = f:match("^tests/") and "run from the repository root" or d.hint
      return string.format("%s: %s is missing: %s", name, f, hint)
    end
  end
  return missing_module(name)
end

-- Register peer `name`; it is unavailable (supported -> false, why) when
-- its files, python module or device are missing, and it declines a point
-- outside its declaration (M.unfit) with "backend NAME skipped: why",
-- which experiments log as a skipped row.
function M.peer(name)
  local d = M.peers[name]
  if not d then
    local names = {}
    for k in pairs(M.peers) do names[#names + 1] = k end
    table.sort(names)
    error("peers: no peer named '" .. tostring(name) .. "' (known: " .. table.concat(names, ", ") .. ")", 0)
  end
  local cmd = {}
  for i, a in ipairs(d.cmd) do
    cmd[i] = a == "@vsalab" and ((package.loaded.vsalab.context or {}).exe or "vsalab") or a
  end
  local b = M.external{name = name, cmd = cmd, description = d.description,
    supported = function(device, p)
      local missing = M.missing(name)
      if missing then return false, missing end
      if d.device and device ~= d.device then return false, name .. " runs on " .. d.device .. " tensors" end
      return true
    end}
  -- A point the peer's library cannot take: a skipped row, no process.
  local run, measure = b.run, b.measure
  local function fit(p)
    local why = M.unfit(name, p)
    if why then error(string.format("backend %s skipped: %s", name, why), 0) end
  end
  b.run = function(p) fit(p); return run(p) end
  b.measure = function(p, opts) fit(p); return measure(p, opts) end
  return b
end

return M
