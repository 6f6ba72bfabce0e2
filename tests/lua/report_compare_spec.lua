-- vsalab report A B: the comparison view (lua/vsalab/htmlcompare.lua) on
-- synthetic runs: both medians, B/A, compare's verdicts, a ratio chart and
-- the errors side by side, in one self-contained file that headless
-- Chromium renders.
local H = require "helpers"

local function synthetic(db, kernels, scale)
  local id = db:begin_run{script = "synthetic"}
  for _, S in ipairs{4096, 8192, 16384, 32768} do
    for _, k in ipairs(kernels) do
      local base = S / 4096 * 0.2 * (scale[k] or 1)
      local failed = k == "triton" and S == 16384
      db:log{run_id = id, experiment = "seed_sweep", kernel = k, B = 1, H = 8, Sq = S, Skv = S, D = 128,
        block = 64, density = 0.25, topk = S / 256, ragged = 0, ms_median = base, ms_min = base * 0.995,
        ms_max = base * 1.005, samples = 20, mode = "hot", passed = failed and 0 or 1,
        errors = {dq = {rel_l2 = failed and 0.4 or 2.5e-3, passed = not failed},
          dk = {rel_l2 = 1.5e-3, passed = true}, dv = {rel_l2 = 1.25e-3, passed = true}}}
    end
  end
  db:end_run(id, "finished")
  return id
end

describe("vsalab report A B", function()
  local dir = H.tmpdir()
  local path = dir .. "/c.db"
  local db = vsalab.db_open(path)
  local a = synthetic(db, {"sm90a", "triton"}, {triton = 1.35})
  local b = synthetic(db, {"sm90a", "triton"}, {sm90a = 1.2, triton = 1.35})
  db:close()
  teardown(function() os.execute("rm -rf " .. dir) end)

  local function report(args)
    local rc, out, err = H.vsalab("report --db " .. path .. " -o " .. dir .. "/r.html " .. args)
    return rc, H.read(dir .. "/r.html"), err .. out
  end

  it("sets two kernels of one run side by side", function()
    local rc, html, msg = report(a .. ":sm90a " .. a .. ":triton")
    assert.equal(0, rc, msg)
    assert.truthy(html:find("Comparison: " .. a .. ":sm90a (A, baseline) vs " .. a .. ":triton (B)", 1, true))
    assert.truthy(html:find("B/A time", 1, true)) -- the ratio chart's axis
    assert.truthy(html:find("Errors against the fp64 oracle, side by side", 1, true))
    -- 1.35x slower at every point: SLOW, and the failed check is flagged.
    local _, slow = html:gsub(">SLOW</td>", "")
    assert.equal(4, slow)
    assert.truthy(html:find("NEW FAIL", 1, true))
    assert.truthy(html:find(">4.00e-01<", 1, true) and html:find(">2.50e-03<", 1, true))
    assert.truthy(html:find("would fail this pair", 1, true))
    assert.falsy(html:find("<script", 1, true))
    assert.falsy(html:find("https?://[%w.]+/[^\"]*%.js"))
  end)

  it("compares two runs kernel by kernel, and refuses unknown sides", function()
    local rc, html, msg = report(a .. " " .. b)
    assert.equal(0, rc, msg)
    assert.truthy(html:find("Comparison: " .. a .. " (A, baseline) vs " .. b .. " (B)", 1, true))
    local _, same = html:gsub(">SAME</td>", "")
    local _, slow = html:gsub(">SLOW</td>", "")
    assert.equal(4, same) -- triton unchanged
    assert.equal(4, slow) -- sm90a 1.2x slower
    assert.equal(2, (report(a .. ":nosuch " .. b)))
    assert.equal(2, (report("999 " .. b)))
  end)

  it("says when host-clock points were judged with the wider floor, as compare does", function()
    local db2 = vsalab.db_open(path)
    local function cpu_run(ms)
      local id = db2:begin_run{script = "smoke"}
      db2:log{run_id = id, experiment = "smoke", kernel = "reference", B = 1, H = 2, Sq = 768, Skv = 768,
        D = 64, block = 64, density = 0.5, topk = 6, ragged = 0, ms_median = ms, ms_min = ms * 0.9,
        ms_max = ms * 1.1, samples = 3, mode = "hot", passed = 1, extra = [[{"clock":"host"}]]}
      db2:end_run(id, "finished")
      return id
    end
    local c, d = cpu_run(80), cpu_run(110) -- B/A 1.375: SAME only under the host floor
    db2:close()
    local rc, html, msg = report(c .. " " .. d)
    assert.equal(0, rc, msg)
    assert.truthy(html:find(">SAME</td>", 1, true), html)
    assert.truthy(html:find("1 point timed on the host clock (CPU): a 50% floor", 1, true), html)
    -- GPU rows alone: no such note.
    local _, html2 = report(a .. " " .. b)
    assert.falsy(html2:find("host clock", 1, true))
  end)

  it("tells apart points that differ only in list kind, as compare does", function()
    local db2 = vsalab.db_open(path)
    local id = db2:begin_run{script = "mine"}
    for _, k in ipairs{"reference", "mine"} do
      for _, lists in ipairs{"random", "vsa:2"} do
        local ms = (k == "mine" and 0.5 or 1) * (lists == "random" and 80 or 110)
        local point = lists == "random" and "{}" or '{"point":{"lists":"vsa:2"}}'
        db2:log{run_id = id, experiment = "mine", kernel = k, B = 1, H = 2, Sq = 768, Skv = 768,
          D = 64, block = 64, density = 0.25, topk = 3, ragged = 0, ms_median = ms, ms_min = ms,
          ms_max = ms, samples = 3, mode = "hot", passed = 1, extra = point}
      end
    end
    db2:end_run(id, "finished")
    db2:close()
    local rc, html, msg = report(id .. ":reference " .. id .. ":mine")
    assert.equal(0, rc, msg)
    -- Both tables show the list kind; the chart has a series per kind.
    html = html:sub(1, (html:find("<h2>Run ", 1, true))) -- the comparison view alone
    local _, vsa = html:gsub('<td class="l">vsa:2</td>', "")
    local _, random = html:gsub('<td class="l">random</td>', "")
    assert.equal(2, vsa, html)
    assert.equal(2, random, html)
    assert.truthy(html:find("H2 25% vsa:2", 1, true), html)
  end)

  it("renders in headless Chromium to a picture that is not blank", function()
    assert.equal(0, (report(a .. ":sm90a " .. a .. ":triton")))
    local png = H.screenshot(dir .. "/r.html", dir .. "/r.png", "1100,1000")
    assert.equal("\137PNG", png:sub(1, 4))
    assert.is_true(#png > 30000, "screenshot only " .. #png .. " bytes")
  end)
end)
