-- power_trace.lua — each named backend's timed call back to back at one
-- shape (B1 H8 D128 25%, random lists), two rounds in turn, printing the
-- median of every 100 calls, so a slowdown over time (the board's power or
-- clock management) shows as a trend (tests/gpu/run.sh power-trace samples
-- nvidia-smi beside it):
--   build/vsalab run tests/gpu/power_trace.lua SQ CALLS BACKEND...
local usage = require "vsalab.usage"
local S, calls = tonumber((...)), tonumber((select(2, ...)))
local names = {select(3, ...)}
if not S or not calls or calls < 1 or #names == 0 then
  usage.error("usage: vsalab run tests/gpu/power_trace.lua SQ CALLS BACKEND...")
end
local bench = require "vsalab.bench"
local p = vsalab.problem.build{B = 1, H = 8, Sq = S, D = 128, density = 0.25,
  seed = 1234, device = "cuda"}
local timed = {}
for _, name in ipairs(names) do
  local b = vsalab.backends.get(name)
  if not b.timed then usage.error("power_trace.lua: " .. name .. " has no kernel-only timed call") end
  local dq, dk, dv = b.run(p)
  timed[name] = {fn = b.timed(p, {dq = dq, dk = dk, dv = dv}), outs = {dq, dk, dv}}
end
for round = 1, 2 do
  for _, name in ipairs(names) do
    local st = bench.bench(timed[name].fn, {repeats = calls, keep_samples = true, hold = false})
    local line = {}
    for i = 1, #st.times, 100 do
      local chunk = {}
      for j = i, math.min(i + 99, #st.times) do chunk[#chunk + 1] = st.times[j] end
      line[#line + 1] = string.format("%.0f", bench.stats(chunk).median * 1000)
    end
    print(string.format("%s round %d %s S=%d median %.1f us, per 100 calls: %s", os.date("!%H:%M:%S"),
      round, name, S, st.median * 1000, table.concat(line, " ")))
  end
end
for _, t in pairs(timed) do for _, x in ipairs(t.outs) do x:free() end end
