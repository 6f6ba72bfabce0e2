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

describe("vsalab report, read by a new user", function()
  local dir = H.tmpdir()
  local path = dir .. "/n.db"
  teardown(function() os.execute("rm -rf " .. dir) end)
  local has_chromium = os.execute("command -v chromium >/dev/null 2>&1") == 0

  -- A run whose points all have one token count (768): kernels x densities,
  -- each kernel `scale` times its base time; every column of a row filled,
  -- as a GPU run fills them (a GEMM ceiling, a throttled row, long notes).
  local function one_shape_run(db, scale, run_info)
    local info = {script = "experiments/smoke.lua", gpu_name = "NVIDIA H200"}
    for k, v in pairs(run_info or {}) do info[k] = v end
    local id = db:begin_run(info)
    for _, k in ipairs{"reference", "sm90a", "sm100a-emu"} do
      for _, d in ipairs{0.25, 0.5, 1.0} do
        local ms = (k == "reference" and 8 or 1) * d * (scale[k] or 1)
        db:log{run_id = id, experiment = "smoke", kernel = k, B = 1, H = 2, Sq = 768, Skv = 768,
          D = 64, block = 64, density = d, topk = 12 * d, ragged = 0, ms_median = ms, ms_min = ms * 0.99,
          ms_max = ms * 1.01, samples = 20, rel_stddev = 0.004, tflops = 0.4 / ms, mode = "hot",
          passed = 1, throttled = (k == "sm90a" and d == 1) and 1 or 0,
          note = "emulated (checked, not a speed): heads 0,1; 4 q + 4 kv blocks each vs fp64 oracle",
          extra = [[{"sharing":0.594,"point":{"lists":"vsa:2"}}]],
          errors = {dq = {rel_l2 = 2.5e-3, passed = true}, dk = {rel_l2 = 1.5e-3, passed = true}}}
      end
    end
    db:log{run_id = id, experiment = "gemm", kernel = "gemm_bf16", B = 1, H = 1, Sq = 8192, Skv = 8192,
      D = 128, block = 64, density = 1, ms_median = 1, tflops = 700, mode = "hot", passed = 1}
    db:end_run(id, "finished")
    return id
  end
  local db = vsalab.db_open(path)
  local a = one_shape_run(db, {})
  local b = one_shape_run(db, {sm90a = 1.3})
  -- One sweep in two shards (as `vsalab merge` leaves them in one file).
  local s1 = one_shape_run(db, {}, {sweep_id = "sw1", shard_index = 0, shard_count = 2})
  local s2 = one_shape_run(db, {}, {sweep_id = "sw1", shard_index = 1, shard_count = 2})
  db:close()

  local function report(args)
    local rc, out, err = H.vsalab("report --db " .. path .. " -o " .. dir .. "/r.html " .. args)
    local f = io.open(dir .. "/r.html")
    local html = f and f:read("*a")
    if f then f:close() end
    return rc, html, err .. out
  end

  it("draws points that share one token count as bars, coloured by series, verdicts by shape", function()
    local rc, html, msg = report(a .. " " .. b)
    assert.equal(0, rc, msg)
    local svg
    for one in html:gmatch('<svg.-</svg>') do
      if one:find("smoke · B/A", 1, true) then svg = one end
    end
    assert.truthy(svg, html)
    assert.truthy(svg:find("every point at 768 tokens: one bar per point", 1, true), svg)
    -- The legend's colour of each series.
    local color = {}
    for fill, name in svg:gmatch('<rect x="%d+" y="%d+" width="24" height="8" fill="([^"]+)"/>\n<text[^>]*>([^<]+)</text>') do
      color[name] = fill
    end
    local series = 0
    for _ in pairs(color) do series = series + 1 end
    assert.equal(9, series, svg)
    -- Every bar and every marker in its series' colour (not its verdict's);
    -- sm90a's three points (1.3x) SLOW, each an upward triangle.
    local bars, slow = 0, 0
    for fill, name in svg:gmatch('<rect [^>]*fill="([^"]+)" fill%-opacity="0.75"><title>(.-): %d+ tokens') do
      bars = bars + 1
      assert.equal(color[name], fill, name)
    end
    assert.equal(9, bars, svg)
    for d, fill, name, verdict in svg:gmatch('<path d="([^"]+)" fill="([^"]+)"[^>]*><title>(.-): %d+ tokens[^<]*, (%u+)</title>') do
      assert.equal(color[name], fill, name)
      assert.equal("SLOW", verdict)
      slow = slow + 1
      -- The apex above the base: the first point has the smallest y.
      local y1, y2 = d:match("^M[%d.]+,([%d.]+) L[%d.]+,([%d.]+)")
      assert.is_true(tonumber(y1) < tonumber(y2), d)
    end
    assert.equal(3, slow, svg)
  end)

  it("fits the rows table in a 1,400 px window", function()
    assert(has_chromium, "chromium is not installed (scripts/setup.sh installs it)")
    local rc, html, msg = report(tostring(a))
    assert.equal(0, rc, msg)
    -- The page measures itself: the width the rows table needs against the
    -- window's, written into the DOM that --dump-dom prints.
    H.write(dir .. "/measure.html", (html:gsub("</body>", [[<script>
      var t = document.querySelector('table.rows');
      document.body.setAttribute('data-fit', [Math.ceil(t.getBoundingClientRect().right),
        document.documentElement.clientWidth, document.documentElement.scrollWidth,
        window.innerWidth].join(' '));
      </script></body>]])))
    local rc2, dom = H.sh("timeout 90 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
      .. "--window-size=1400,900 --dump-dom file://" .. dir .. "/measure.html")
    assert.equal(0, rc2)
    local need, room, page, window = dom:match('data%-fit="(%d+) (%d+) (%d+) (%d+)"')
    assert.truthy(need, dom:sub(1, 300))
    assert.equal(1400, tonumber(window))
    assert.is_true(tonumber(need) <= tonumber(room), "the rows table ends at " .. need .. " px of " .. room)
    assert.is_true(tonumber(page) <= 1400, "the page is " .. page .. " px wide")
  end)

  it("names a merged run by its first shard, as `runs` does", function()
    local _, runs = H.vsalab("runs --db " .. path)
    assert.truthy(runs:match("\n" .. s1 .. " +finished"), runs)
    for _, args in ipairs{"", tostring(s2), "latest"} do
      local rc, html, msg = report(args)
      assert.equal(0, rc, msg)
      assert.truthy(html:find("<h2>Run " .. s1 .. " ", 1, true), args .. ": " .. html:match("<h2>Run [^<]*"))
      assert.falsy(html:find("<h2>Run " .. s2 .. " ", 1, true), args)
      assert.truthy(html:find("sweep sw1: runs " .. s1 .. ", " .. s2 .. ", one logical run", 1, true))
    end
  end)
end)
