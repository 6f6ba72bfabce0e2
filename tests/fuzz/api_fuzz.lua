-- api_fuzz.lua — throws random arguments at every public Lua function and
-- tensor method; each call must return or raise a Lua error, never crash.
--   build/vsalab run tests/fuzz/api_fuzz.lua SEED COUNT [SECONDS]
-- Prints "fuzz ok: N calls, E errors" at the end (after COUNT calls or
-- SECONDS of them); tests/lua/fuzz_spec.lua runs it in a subprocess so that
-- a crash shows as a failed exit status (under ASan/UBSan in .ci/run).
-- Lua code that runs in the middle of a call is part of the game: option
-- tables whose __index frees a tensor argument, and finalizers (collected
-- during the calls' own allocations: the collector runs at every step) that
-- free the arguments of the call in flight.
local seed, count = tonumber(arg[1]) or 1, tonumber(arg[2]) or 2000
local budget = tonumber(arg[3]) or math.huge
local t_end = os.time() + budget
local x = seed % 2147483647
if x == 0 then x = 1 end
local function rand(n) x = (x * 48271) % 2147483647; return x % n end
local function pick(t) return t[rand(#t) + 1] end

local numbers = {0, 1, 2, 3, 4, 64, 65, 128, -1, -64, 1.5, 0.25, 1e-30, 1e30,
  2^31, 2^32 + 3, 2^53, 2^64, 0/0, math.huge, -math.huge}
local dtypes = {"bf16", "f32", "f64", "i32", "i64", "f16", ""}
local devices = {"cpu", "cuda", "cuda:7", "gpu", "cpu:0"}

local function small_shape()
  local n = rand(5)
  local s = {}
  for i = 1, n do s[i] = pick{0, 1, 2, 3, 4, 64, 65, 128} end
  return s
end

local function tensor()
  local s = small_shape()
  local total = 1
  for _, d in ipairs(s) do total = total * d end
  if total > 65536 then s = {4} end
  local ok, t = pcall(vsalab.empty, s, {dtype = pick{"bf16", "f32", "f64", "i32", "i64"}})
  if not ok then return vsalab.zeros({2}) end
  pcall(t.fill, t, pick{0, 1, -1, 0/0, 7})
  local r = rand(6)
  if r == 0 then t:free() end
  if r == 1 and t.ndim >= 2 then return t:transpose(1, 2) end
  if r == 2 and t.ndim >= 1 and t.shape[1] > 1 then return t:narrow(1, 2, t.shape[1] - 1) end
  return t
end

local value
local function table_value(depth)
  local t = {}
  for i = 1, rand(4) do t[i] = value(depth + 1) end
  if rand(3) == 0 then t[pick{"B", "H", "nq", "nkv", "topk", "density", "seed", "T", "W",
    "dtype", "device", "sm_scale", "out", "q", "k", "v", "dO", "tile", "warmup", "repeats",
    "clock", "check", "width", "ragged", "experiment", "kernel", "errors"}] = value(depth + 1) end
  return t
end
function value(depth)
  depth = depth or 0
  local r = rand(depth > 2 and 6 or 9)
  if r == 0 then return nil end
  if r == 1 then return pick(numbers) end
  if r == 2 then return pick(dtypes) end
  if r == 3 then return pick(devices) end
  if r == 4 then return rand(2) == 0 end
  if r == 5 then return tensor() end
  if r == 6 then return small_shape() end
  if r == 7 then return function() end end
  return table_value(depth)
end

-- A well-formed problem, so some calls get past the first checks (built
-- again every 50 calls: the traps below free its tensors).
local p, good
local function rebuild()
  -- q, k, v, dO of 256 KiB: malloc maps them, so a use after free faults.
  p = vsalab.problem.build{B = 1, H = 2, Sq = 1024, Skv = 1088, D = 64,
    topk = 2, seed = seed % 1000, device = "cpu"}
  good = {p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs}
end
rebuild()

-- Traps: free one of the problem's tensors from inside a call.
local function free_one()
  local t = good[rand(#good) + 1]
  if not t.freed then t:free() end
end
local function trap_table()
  local t = table_value(1)
  return setmetatable(t, {__index = function() free_one() end})
end
local function arm_finalizer()
  local u = newproxy(true)
  getmetatable(u).__gc = free_one
end
collectgarbage("setpause", 100) -- collect often, so finalizers land mid-call

local functions = {}
for name, f in pairs(vsalab) do
  -- Left out: run bookkeeping (opens a DB), timers that would fire
  -- later, outside the call (set_point_timeout is the runner's plumbing),
  -- npy_save (it would write files named like random strings here), and
  -- the process control of --devices (proc_*: spawns, signals and closes
  -- descriptors outside the call).
  local skip = {synchronize = true, run_finish = true, run = true, log = true,
    set_point_timeout = true, gpu_sleep = true, npy_save = true}
  if type(f) == "function" and not skip[name] and not name:match("^proc_") then
    functions[#functions + 1] = {name, f}
  end
end
table.sort(functions, function(a, b) return a[1] < b[1] end)
local methods = {"to_table", "to", "to_dtype", "clone", "contiguous", "copy_", "fill",
  "fill_randn", "numel", "is_contiguous", "narrow", "select", "transpose", "expand",
  "reshape", "get", "set", "free"}

local errors = 0
local done = 0
for i = 1, count do
  if os.time() > t_end then break end
  done = i
  if i % 50 == 0 then rebuild() end
  if rand(4) == 0 then arm_finalizer() end
  local ok
  local r = rand(10)
  if r < 4 then
    local f = pick(functions)
    local args = {}
    for a = 1, rand(6) do args[a] = value() end
    ok = pcall(f[2], unpack(args, 1, 6))
  elseif r < 7 then
    local t = tensor()
    local m = pick(methods)
    ok = pcall(function() return t[m](t, value(), value(), value()) end)
  else
    -- A backward/forward call with one argument replaced.
    local args = {unpack(good)}
    local f = pick{vsalab.backward_ref, vsalab.forward_ref, vsalab.backward_sm90a,
      vsalab.invert_indices, vsalab.oracle}
    if rand(2) == 0 then
      -- Well-formed arguments and an options table that frees one of them.
      if f == vsalab.forward_ref then
        args = {p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.vbs, trap_table()}
      else
        args[10] = trap_table()
      end
    else
      args[rand(10) + 1] = value()
    end
    ok = pcall(f, unpack(args, 1, 10))
  end
  if not ok then errors = errors + 1 end
  if i % 200 == 0 then collectgarbage() end
end
print(string.format("fuzz ok: %d calls, %d errors", done, errors))
