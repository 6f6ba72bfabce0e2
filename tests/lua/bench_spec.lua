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
    assert.truthy(H.err(vsalab.bench, work, {max_samples = 7, clock = "host"}):match("max_samples %(7%) is below min_samples %(10%)"))
    assert.truthy(H.err(vsalab.bench, work, {min_time = 2, max_time = 1, clock = "host"}):match("min_time %(2 s%) is above max_time %(1 s%)"))
  end)

  it("propagates an error raised by the timed function", function()
    assert.truthy(H.err(vsalab.bench, function() error("inside") end, {clock = "host", repeats = 2}):match("inside"))
  end)
end)
