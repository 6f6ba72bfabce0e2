-- Timing (host clock, no GPU): fixed counts, nvbench's stopping rule, the
-- statistics, and option checks.
local H = require "helpers"

local function work()
  local s = 0
  for i = 1, 20000 do s = s + i % 7 end
  return s
end

describe("bench", function()
  it("takes a fixed count with repeats", function()
    local st = vsalab.bench(work, {clock = "host", warmup = 1, repeats = 7, keep_samples = true})
    assert.equal(7, st.samples)
    assert.equal(7, #st.times)
    assert.equal("repeats", st.stop)
    assert.equal("hot", st.mode)
    assert.is_true(st.min <= st.p20 and st.p20 <= st.median and st.median <= st.p80 and st.p80 <= st.max)
  end)

  it("stops on the noise target once min_samples and min_time are met", function()
    local st = vsalab.bench(work, {clock = "host", warmup = 1, min_samples = 12,
      min_time = 0, max_noise = 1e9})
    assert.equal(12, st.samples)
    assert.equal("noise", st.stop)
  end)

  it("stops at max_time when the noise target is out of reach", function()
    local t0 = os.clock()
    local st = vsalab.bench(work, {clock = "host", warmup = 0, min_samples = 3,
      min_time = 0, max_noise = 0, max_time = 0.2})
    assert.equal("max_time", st.stop)
    assert.is_true(st.samples >= 3)
    assert.is_true(os.clock() - t0 < 5)
  end)

  it("stops at max_samples", function()
    local st = vsalab.bench(work, {clock = "host", warmup = 0, min_samples = 2,
      max_samples = 5, min_time = 10, max_time = 100, max_noise = 0})
    assert.equal(5, st.samples)
    assert.equal("max_samples", st.stop)
  end)

  it("rejects bad options by name", function()
    assert.truthy(H.err(vsalab.bench, work, {mode = "graph", clock = "host"}):match("mode"))
    assert.truthy(H.err(vsalab.bench, work, {mode = "cold", clock = "host"}):match("cuda clock"))
    assert.truthy(H.err(vsalab.bench, work, {max_noise = -1, clock = "host"}):match("max_noise"))
    assert.truthy(H.err(vsalab.bench, work, {repeats = 0, clock = "host"}):match("repeats"))
    assert.truthy(H.err(vsalab.bench, work, {hold = "yes", clock = "host"}):match("'hold' must be a boolean"))
    assert.truthy(H.err(vsalab.bench, work, {keep_samples = "no", clock = "host"}):match("'keep_samples' must be a boolean"))
    -- The helpers name what is wrong, not a line of their own source.
    assert.truthy(H.err(vsalab.stats, {1, "x"}):find("stats: sample 2 must be a finite number, got x", 1, true))
    assert.truthy(H.err(vsalab.stats, {1, 0 / 0, 2}):find("stats: sample 2 must be a finite number", 1, true))
    assert.truthy(H.err(vsalab.stats, {1, 1 / 0}):find("stats: sample 2 must be a finite number", 1, true))
    assert.truthy(H.err(vsalab.stats, {1, nil, 3}):find("stats: samples must be a list 1..n without holes", 1, true))
    assert.truthy(H.err(vsalab.stats, {}):find("stats: need a list of samples", 1, true))
    assert.truthy(H.err(vsalab.pair_flops, "128"):find("pair_flops: expected numbers D and block", 1, true))
    assert.truthy(H.err(vsalab.cosine, {x2 = 1}):find("cosine: expected what vsalab.compare returns", 1, true))
    assert.truthy(H.err(vsalab.cosine, {x2 = 1 / 0, ref2 = 1, diff2 = 0}):find("cosine: x2 is inf, not a finite sum", 1, true))
    assert.truthy(H.err(vsalab.cosine, {x2 = -1, ref2 = 1, diff2 = 0}):find("cosine: x2 is -1", 1, true))
    assert.near(1, vsalab.cosine{x2 = 4, ref2 = 4, diff2 = 0}, 1e-12)
    for _, d in ipairs{0 / 0, 1 / 0, -1, 0, 1.5} do
      assert.truthy(H.err(vsalab.pair_flops, d):find("pair_flops: D must be a positive integer", 1, true))
    end
    assert.truthy(H.err(vsalab.pair_flops, 128, 32):find("pair_flops: block 32 is not a block size vsalab takes (64, 128)", 1, true))
    assert.equal(10 * 128 * 128 * 128, vsalab.pair_flops(128, 128))
    assert.is_nil(vsalab.tflops(100, 128, 1, 32))
    assert.truthy(H.err(vsalab.bench, work, {max_samples = 7, clock = "host"}):match("max_samples %(7%) is below min_samples %(10%)"))
    assert.truthy(H.err(vsalab.bench, work, {min_time = 2, max_time = 1, clock = "host"}):match("min_time %(2 s%) is above max_time %(1 s%)"))
    -- Not a table: said so, not "attempt to index local 'opts'".
    for _, bad in ipairs{5, "sustained", true} do
      assert.equal("bench: opts must be a table of options, got " .. type(bad), H.err(vsalab.bench, work, bad))
    end
  end)

  it("propagates an error raised by the timed function", function()
    assert.truthy(H.err(vsalab.bench, function() error("inside") end, {clock = "host", repeats = 2}):match("inside"))
  end)
end)

describe("timing under the power cap (experiment.time_uncapped)", function()
  local experiment = require "vsalab.experiment"
  -- NVML readings whose power counter grows by capped[i] ms over burst i,
  -- each burst lasting `seconds` (default 0.03 s, a 16k burst).
  local function fake(capped, thermal, seconds)
    local n, power, therm, now = 0, 1000, 50, 100
    local bursts, sleeps = 0, {}
    local reading = 0
    local function clocks()
      reading = reading + 1
      if reading % 2 == 0 then -- after burst reading / 2
        power = power + (capped[reading / 2] or 0)
        therm = therm + (thermal and thermal[reading / 2] or 0)
        now = now + (seconds or 0.03)
      end
      return {sm_mhz = 1980, power_capped_ms = power, thermal_capped_ms = therm, time_s = now}
    end
    local function burst() bursts = bursts + 1; n = n + 1; return {median = n} end
    local function sleep(ms) sleeps[#sleeps + 1] = ms end
    return clocks, burst, sleep, function() return bursts, sleeps end
  end

  it("times once when the burst was not capped, or when NVML has no counters", function()
    local clocks, burst, sleep, seen = fake({0})
    local st, c0, c1, retries, capped = experiment.time_uncapped(burst, clocks, sleep)
    assert.equal(1, st.median)
    assert.equal(0, retries)
    assert.is_false(capped)
    assert.equal(0, experiment.capped_ms(c0, c1))
    assert.equal(1, (seen()))
    local n = 0
    local st2, _, _, r2, capped2 = experiment.time_uncapped(function() n = n + 1; return {median = n} end,
      function() return nil end, function() error("slept without counters") end)
    assert.equal(1, st2.median)
    assert.equal(0, r2)
    assert.is_false(capped2)
  end)

  it("retakes a capped burst after a pause and keeps the first uncapped one", function()
    local clocks, burst, sleep, seen = fake({12.5, 0, 0}, {0, 0, 0})
    local st, c0, c1, retries, capped = experiment.time_uncapped(burst, clocks, sleep)
    assert.equal(2, st.median)
    assert.equal(1, retries)
    assert.is_false(capped)
    assert.equal(0, experiment.capped_ms(c0, c1))
    local bursts, sleeps = seen()
    assert.equal(2, bursts)
    assert.same({experiment.cap_recovery_ms}, sleeps)
  end)

  it("gives up after cap_retries and keeps the least capped burst", function()
    local clocks, burst, sleep, seen = fake({0, 0, 0, 0}, {9, 3, 6, 6})
    local st, c0, c1, retries, capped = experiment.time_uncapped(burst, clocks, sleep)
    assert.equal(experiment.cap_retries, retries)
    assert.equal(1 + experiment.cap_retries, (seen()))
    assert.equal(2, st.median)
    assert.is_true(capped)
    assert.equal(3, experiment.capped_ms(c0, c1)) -- the thermal limit counts too
  end)

  it("does not retime a capped burst too long to be timed uncapped", function()
    local clocks, burst, sleep, seen = fake({40, 0, 0}, nil, experiment.cap_retry_max_s + 0.1)
    local st, c0, c1, retries, capped = experiment.time_uncapped(burst, clocks, sleep)
    assert.equal(1, st.median)
    assert.equal(0, retries)
    assert.is_true(capped)
    assert.equal(40, experiment.capped_ms(c0, c1))
    local bursts, sleeps = seen()
    assert.equal(1, bursts)
    assert.same({}, sleeps)
  end)

  it("reads the capped time from two readings, each counter on its own", function()
    local cap = experiment.capped_ms
    assert.equal(2.5, cap({power_capped_ms = 10, thermal_capped_ms = 1}, {power_capped_ms = 12, thermal_capped_ms = 1.5}))
    assert.equal(2, cap({power_capped_ms = 10}, {power_capped_ms = 12})) -- no thermal counter
    assert.equal(2, cap({thermal_capped_ms = 10}, {thermal_capped_ms = 12})) -- no power counter
    assert.equal(2, cap({power_capped_ms = 10, thermal_capped_ms = 1}, {power_capped_ms = 9, thermal_capped_ms = 3}))
    assert.is_nil(cap({sm_mhz = 1980}, {sm_mhz = 1980}))
    assert.is_nil(cap(nil, {power_capped_ms = 1}))
  end)

  it("calls a burst capped from cap_fraction of its time, or by the reasons without counters", function()
    local was = experiment.was_capped
    local f = experiment.cap_fraction
    assert.is_true(was({power_capped_ms = 0, time_s = 0}, {power_capped_ms = 1000 * f * 0.03 * 1.5, time_s = 0.03}))
    assert.is_false(was({power_capped_ms = 0, time_s = 0}, {power_capped_ms = 1000 * f * 0.03 * 0.5, time_s = 0.03}))
    assert.is_false(was({power_capped_ms = 0, time_s = 0, throttled = true}, {power_capped_ms = 0, time_s = 0.03}))
    assert.is_true(was({throttled = false}, {throttled = true}))
    assert.is_false(was({throttled = false}, {throttled = false}))
  end)

  it("retimes a capped point end to end and flags one it could not time uncapped", function()
    local dir = H.tmpdir()
    local smoke = H.root .. "/experiments/smoke.lua -a density=[0.5] kernels=reference"
    -- The first burst capped for half its time, the rest not.
    local rc, _, err = H.sh("VSALAB_TEST_CAPPED=50,0 " .. H.exe .. " run --db " .. dir .. "/a.db " .. smoke)
    assert(rc == 0, err)
    local d = vsalab.db_open(dir .. "/a.db", {readonly = true})
    local rows = d:q([[SELECT throttled, json_extract(extra, '$.capped_ms') AS ms,
      json_extract(extra, '$.cap_retries') AS retries FROM result WHERE kernel = 'reference' ORDER BY id]])
    d:close()
    assert.is_true(#rows >= 2)
    assert.same({throttled = 0, ms = 0, retries = 1}, rows[1])
    for i = 2, #rows do assert.same({throttled = 0, ms = 0}, rows[i]) end
    -- Every burst capped: kept, flagged, and the summary says so.
    local rc2, out2, err2 = H.sh("VSALAB_TEST_CAPPED=50 " .. H.exe .. " run --db " .. dir .. "/b.db " .. smoke)
    assert(rc2 == 0, err2)
    local d2 = vsalab.db_open(dir .. "/b.db", {readonly = true})
    for _, r in ipairs(d2:q([[SELECT throttled, json_extract(extra, '$.capped_ms') AS ms,
        json_extract(extra, '$.cap_retries') AS retries FROM result WHERE kernel = 'reference']])) do
      assert.same({throttled = 1, ms = 50, retries = experiment.cap_retries}, r)
    end
    d2:close()
    assert.truthy(out2:match("\nkernel [^\n]* capped "), out2)
    assert.truthy(out2:match("\nreference [^\n]* 50%.0 ms +pass"), out2)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("mode 'sustained'", function()
  local bench = require "vsalab.bench"
  local experiment = require "vsalab.experiment"

  it("samples back to back for sustained_s, never stopping early on low noise", function()
    local keep = bench.sustained_s
    bench.sustained_s = 0.2
    local core = require "vsalab.core"
    local calls = 0
    local t0 = core.proc_now()
    local ok, st = pcall(bench.bench, function() calls = calls + 1; core.proc_poll({}, 1) end,
      {mode = "sustained", clock = "host", warmup = 0, max_time = 0.01, min_samples = 5})
    local elapsed = core.proc_now() - t0
    bench.sustained_s = keep
    assert(ok, st)
    assert.equal("sustained", st.mode)
    assert.equal("max_time", st.stop) -- not "noise": max_noise is 0
    assert.equal(calls, st.samples)
    assert.is_true(st.samples >= 5)
    -- The window overrides the caller's burst length (max_time = 0.01 above).
    assert.is_true(elapsed >= 0.2, "sampled for " .. elapsed .. " s")
  end)

  it("hands bench_raw the window, keeping other options", function()
    local o = bench.sustained_opts{mode = "sustained", warmup = 2, repeats = 7, hold = false, min_time = 0.5}
    assert.same({mode = "sustained", warmup = 2, hold = false, min_time = bench.sustained_s,
      max_time = bench.sustained_s, max_noise = 0, max_samples = bench.sustained_max_samples}, o)
    -- A sample cap a 3 µs call fills only after 3 s (at 100000, any call
    -- under 30 µs, the inversion's, stopped early); the caller's is kept.
    assert.is_true(bench.sustained_max_samples >= bench.sustained_s / 3e-6)
    assert.equal(5, bench.sustained_opts{mode = "sustained", max_samples = 5}.max_samples)
  end)

  it("gives the mean board power only over a second or more", function()
    assert.equal(650, experiment.watts({energy_j = 1000, time_s = 10}, {energy_j = 2950, time_s = 13}))
    assert.is_nil(experiment.watts({energy_j = 1000, time_s = 10}, {energy_j = 1020, time_s = 10.03}))
    assert.is_nil(experiment.watts({time_s = 10}, {time_s = 13}))
    assert.is_nil(experiment.watts(nil, {energy_j = 1, time_s = 1}))
  end)

  it("takes a peer's own readings around its samples, counter by counter", function()
    -- vsalab's readings bracket the peer's start-up: 40 s at 200 W.
    local c0 = {sm_mhz = 1980, energy_j = 0, power_capped_ms = 0, time_s = 0}
    local c1 = {sm_mhz = 1700, energy_j = 8000, power_capped_ms = 2900, time_s = 40}
    local nv = {before = {energy_j = 5000, power_capped_ms = 100, time_s = 30.5},
      after = {energy_j = 7100, power_capped_ms = 2900, time_s = 33.5, thermal_capped_ms = 1}}
    local p0, p1 = experiment.peer_readings(c0, c1, nv)
    assert.equal(700, experiment.watts(p0, p1))
    assert.equal(2800, experiment.capped_ms(p0, p1))
    assert.is_nil(p1.thermal_capped_ms) -- in one reading only: not taken
    assert.equal(1700, p1.sm_mhz)
    assert.equal(200, experiment.watts(c0, c1)) -- the inputs are not changed
    -- No times from the peer: vsalab's own readings stand.
    for _, bad in ipairs{false, {}, {before = {energy_j = 1}, after = {energy_j = 2, time_s = 3}}} do
      local q0, q1 = experiment.peer_readings(c0, c1, bad)
      assert.equal(200, experiment.watts(q0, q1))
    end
    -- A counter the peer could not read is dropped, not mixed with vsalab's.
    local q0, q1 = experiment.peer_readings(c0, c1,
      {before = {energy_j = 0 / 0, time_s = 1}, after = {energy_j = 1, time_s = 3}})
    assert.is_nil(experiment.watts(q0, q1))
    assert.is_nil(experiment.capped_ms(q0, q1))
    assert.is_nil((experiment.peer_readings(nil, c1, nv)))
  end)

  it("takes no peer reading that cannot be: swapped, outside vsalab's, or beyond its counters", function()
    -- Once: swapped energies gave -500 W, a capped counter of 1e15 ms over
    -- 3 s was logged and throttled the row, ±1e308 times gave 0 W.
    local c0 = {sm_mhz = 1980, energy_j = 0, power_capped_ms = 0, time_s = 0}
    local c1 = {sm_mhz = 1700, energy_j = 8000, power_capped_ms = 2900, time_s = 40}
    local function nv(b, a) return {before = b, after = a} end
    -- Times swapped, or not inside vsalab's readings: vsalab's own stand.
    for _, bad in ipairs{nv({time_s = 33.5, energy_j = 5000}, {time_s = 30.5, energy_j = 7100}),
        nv({time_s = -1e308, energy_j = 0}, {time_s = 1e308, energy_j = 1e308}),
        nv({time_s = 30, energy_j = 0}, {time_s = 41, energy_j = 10})} do
      local q0, q1 = experiment.peer_readings(c0, c1, bad)
      assert.equal(200, experiment.watts(q0, q1))
      assert.equal(2900, experiment.capped_ms(q0, q1))
    end
    -- A counter that falls, or grows more than vsalab's around the whole
    -- peer, is dropped; the others are taken.
    for _, bad in ipairs{
        nv({time_s = 30.5, energy_j = 7100, power_capped_ms = 0}, {time_s = 33.5, energy_j = 5000, power_capped_ms = 1e15}),
        nv({time_s = 30.5, energy_j = -1e308, power_capped_ms = -1e308}, {time_s = 33.5, energy_j = 1e308, power_capped_ms = 1e308})} do
      local q0, q1 = experiment.peer_readings(c0, c1, bad)
      assert.is_nil(experiment.watts(q0, q1))
      assert.is_nil(experiment.capped_ms(q0, q1))
      assert.is_false(experiment.was_capped(q0, q1))
    end
    local q0, q1 = experiment.peer_readings(c0, c1,
      nv({time_s = 30.5, energy_j = 7100, power_capped_ms = 100}, {time_s = 33.5, energy_j = 5000, power_capped_ms = 200}))
    assert.is_nil(experiment.watts(q0, q1))
    assert.equal(100, experiment.capped_ms(q0, q1))
  end)
end)
