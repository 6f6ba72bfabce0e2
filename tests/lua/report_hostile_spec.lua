-- vsalab report and compare on hostile rows: values a damaged or hand-made
-- DB can hold (infinite or subnormal TFLOPS, a zero or negative token count
-- written with CHECK constraints off), markup in every text column. The
-- report must finish, in seconds, and escape what it prints.
local H = require "helpers"

describe("vsalab report on hostile rows", function()
  local dir, db = H.smoke_db("r.db", 2)
  teardown(function() os.execute("rm -rf " .. dir) end)

  -- A copy of db with sql applied (CHECK constraints off, as a hand-made
  -- file could have them).
  local n = 0
  local function hostile(...)
    n = n + 1
    local path = string.format("%s/h%d.db", dir, n)
    os.execute("cp " .. db .. " " .. path)
    local w = vsalab.db_open(path)
    w:q("PRAGMA ignore_check_constraints = ON")
    for _, sql in ipairs{...} do w:q(sql) end
    w:close()
    return path
  end

  local function report(path, sides)
    local out = path:gsub("%.db$", ".html")
    -- (timeout stops a hang only: generous for ASan on a loaded host)
    local rc, o, err = H.sh("timeout 120 " .. H.exe .. " report --db " .. path .. " -o " .. out .. " " .. (sides or ""))
    assert(rc == 0, "report exited " .. rc .. ": " .. err)
    return assert(H.read(out)), o
  end

  it("draws a chart whatever the TFLOPS (infinite, subnormal, negative)", function()
    for _, v in ipairs{"9e999", "5e-324", "1e-310", "-1", "1e308"} do
      local html = report(hostile("UPDATE result SET tflops = " .. v
        .. " WHERE run_id = 2 AND kernel = 'reference' AND density = 0.25"))
      assert.truthy(html:find("<svg", 1, true), v)
    end
  end)

  it("draws a chart when a row's token count is zero or negative", function()
    for _, v in ipairs{"0", "-768"} do
      local html = report(hostile("UPDATE result SET Sq = " .. v .. ", Skv = " .. v
        .. " WHERE kernel = 'reference' AND density = 0.25"))
      assert.truthy(html:find("<svg", 1, true), v)
      -- The comparison view's B/A chart too.
      html = report(hostile("UPDATE result SET Sq = " .. v .. ", Skv = " .. v
        .. " WHERE kernel = 'reference' AND density = 0.25"), "1 2")
      assert.truthy(html:find("Comparison", 1, true), v)
    end
  end)

  it("orders the legend when a row's list kind is not a string", function()
    -- extra.point.lists is free JSON: a number beside 'random' in one chart.
    local html = report(hostile([[UPDATE result SET extra = json_set(extra, '$.point.lists', 5)
      WHERE run_id = 2 AND kernel = 'reference' AND density = 0.25]],
      [[UPDATE result SET density = 0.25 WHERE run_id = 2 AND kernel = 'reference' AND density = 0.5 AND ragged = 0]]), "1 2")
    assert.truthy(html:find("reference 5<"), "no series for lists = 5")
  end)
end)
