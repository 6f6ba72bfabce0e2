-- power_trace.lua — sm90a (fp32) then sm90a-det at one shape for about 3 s
-- each, back to back, printing the median of every 100 timed calls, so a
-- time-varying slowdown (the card's power or clock management) shows as a
-- trend, with nvidia-smi sampling beside it (tests/gpu/calls/power_trace.sh):
--   vsalab run tests/gpu/calls/power_trace.lua [Sq] [calls]
local S, calls = tonumber(arg[1]) or 16384, tonumber(arg[2]) or 2000
local bench = require "vsalab.bench"
local p = vsalab.problem.build{B = 1, H = 8, Sq = S, D = 128, density = 0.25,
  seed = 1234, device = "cuda"}
for _, det in ipairs{false, true, false, true} do
  local opts = {canonical = false, deterministic = det}
  local dq, dk, dv = vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse,
    p.k2q_idx, p.k2q_num, p.vbs, opts)
  local t = {canonical = false, deterministic = det, poison = false, out = {dq, dk, dv}}
  local st = bench.bench(function()
    vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse, p.k2q_idx, p.k2q_num, p.vbs, t)
  end, {repeats = calls, keep_samples = true, hold = false})
  local line = {}
  for i = 1, #st.times, 100 do
    local chunk = {}
    for j = i, math.min(i + 99, #st.times) do chunk[#chunk + 1] = st.times[j] end
    line[#line + 1] = string.format("%.0f", bench.stats(chunk).median * 1000)
  end
  print(string.format("%s %s S=%d median %.1f us, per 100 calls: %s", os.date("!%H:%M:%S"),
    det and "det " or "fp32", S, st.median * 1000, table.concat(line, " ")))
  dq:free(); dk:free(); dv:free()
end
