-- ref_peer.lua — an external peer in a second vsalab process: reads a job
-- directory of the external-backend protocol (lua/vsalab/external.lua),
-- runs vsalab's reference backward on the inputs (in job.json's layout,
-- bhsd or bshd, natively) and writes dq/dk/dv (and,
-- when the job asks for timing, timing.json). The protocol's CPU test; no
-- Python needed:
--   vsalab run tests/peers/ref_peer.lua DIR
-- VSALAB_PEER_FAULT=exit|garbage|nan|slow|mode|deep|nanjson makes it
-- misbehave on purpose; =skip makes it decline the point (exit 3, the
-- protocol's "cannot take this point"); =crash-at-2 fails the second call
-- of a run (VSALAB_PEER_CALLS names a file counting the calls).
local dir = assert(arg[1], "usage: vsalab run tests/peers/ref_peer.lua DIR")
local f = assert(io.open(dir .. "/job.json"))
local job = vsalab.json.decode(f:read("*a"))
f:close()
assert(job.protocol == 1, "protocol 1 expected")
local fault = os.getenv("VSALAB_PEER_FAULT")
if fault == "exit" then
  io.stderr:write("ref_peer: failing on purpose\n")
  os.exit(5)
elseif fault == "skip" then
  print("skip: ref_peer declines this point on purpose")
  os.exit(3)
elseif fault == "crash-at-2" then
  local counter = assert(os.getenv("VSALAB_PEER_CALLS"), "crash-at-2 needs VSALAB_PEER_CALLS")
  local c = io.open(counter)
  local n = (c and tonumber(c:read("*l")) or 0) + 1
  if c then c:close() end
  c = assert(io.open(counter, "w")); c:write(n, "\n"); c:close()
  if n == 2 then vsalab.proc_self_kill() end
end
local dev = job.device == "cpu" and "cpu" or ("cuda:" .. tostring(job.cuda_device or 0))
local t = {}
for name, spec in pairs(job.inputs) do
  t[name] = vsalab.npy_load(dir .. "/" .. spec.file, {dtype = spec.dtype, shape = spec.shape, device = dev})
end
local function run()
  return vsalab.backward_ref(t.dO, t.q, t.k, t.v, t.o, t.lse, t.k2q_idx, t.k2q_num,
    t.variable_block_sizes, {sm_scale = job.sm_scale, layout = job.layout or "bhsd"})
end
local dq, dk, dv = run()
if fault == "nan" then dq:fill(0 / 0) end
for name, x in pairs{dq = dq, dk = dk, dv = dv} do
  if fault == "garbage" and name == "dv" then
    local g = io.open(dir .. "/dv.npy", "w"); g:write("not a npy file"); g:close()
  else
    vsalab.npy_save(dir .. "/" .. job.outputs[name].file, x)
  end
end
if job.bench then
  local b = job.bench
  local st = vsalab.bench(run, {warmup = b.warmup, min_samples = b.min_samples,
    max_noise = b.max_noise, min_time = b.min_time, max_time = b.max_time,
    max_samples = b.max_samples, keep_samples = true})
  local samples = st.times
  if fault == "slow" then for i, x in ipairs(samples) do samples[i] = x * 3 end end
  local g = assert(io.open(dir .. "/" .. job.timing_file, "w"))
  local text = vsalab.json.encode{samples_ms = samples, clock = st.clock, stop = st.stop,
    mode = fault == "mode" and "warm" or "hot", note = "vsalab backward_ref in a second process",
    extra = fault == "deep" and {nvml = "@"} or fault == "nanjson" and {x = "@"} or nil}
  -- Nesting the JSON reader takes but a row's extra cannot; Python's NaN.
  if fault == "deep" then text = text:gsub('"@"', ("["):rep(30) .. ("]"):rep(30)) end
  if fault == "nanjson" then text = text:gsub('"@"', "NaN") end
  g:write(text, "\n")
  g:close()
end
