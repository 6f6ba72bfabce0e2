-- vsalab report: a self-contained HTML file, rendered by headless Chromium
-- (Debian's package, installed by scripts/setup.sh) into a non-blank PNG.
local H = require "helpers"

describe("vsalab report", function()
  local dir, db = H.smoke_db("r.db")
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("writes one self-contained HTML file", function()
    local rc, out, err = H.vsalab("report --db " .. db .. " -o " .. dir .. "/r.html latest")
    assert(rc == 0, err)
    assert.truthy(out:match("wrote"))
    local html = assert(H.read(dir .. "/r.html"))
    assert.truthy(html:find("<svg", 1, true))
    assert.truthy(html:find("Errors against the fp64 oracle", 1, true))
    assert.truthy(html:find("experiments/smoke.lua", 1, true))
    assert.falsy(html:find("<script", 1, true))
    assert.falsy(html:find("https?://[%w.]+/[^\"]*%.js"))
    assert.equal(2, (H.vsalab("report --db " .. db .. " 99")))
  end)

  it("shows only the kernel a RUN:KERNEL side names (report 7:mine), every kernel for a plain RUN", function()
    local function html_of(args)
      local rc, _, err = H.vsalab("report --db " .. db .. " -o " .. dir .. "/k.html " .. args)
      assert.equal(0, rc, err)
      return assert(H.read(dir .. "/k.html"))
    end
    local only = html_of("latest:reference")
    assert.truthy(only:find("kernel reference only (RUN:KERNEL)", 1, true))
    assert.falsy(only:find('<td class="l">invert</td>', 1, true), "invert rows shown for latest:reference")
    assert.truthy(only:find('<td class="l">reference</td>', 1, true))
    local all = html_of("latest")
    assert.truthy(all:find('<td class="l">invert</td>', 1, true))
    assert.falsy(all:find("only (RUN:KERNEL)", 1, true))
    -- Named both ways, the run shows everything.
    assert.truthy(html_of("latest latest:reference"):find('<td class="l">invert</td>', 1, true))
  end)

  it("marks rows timed under a power or thermal limit", function()
    os.execute("cp " .. db .. " " .. dir .. "/thr.db")
    local w = vsalab.db_open(dir .. "/thr.db")
    w:q("UPDATE result SET throttled = 1 WHERE id = (SELECT max(id) FROM result)")
    w:close()
    local rc, _, err = H.vsalab("report --db " .. dir .. "/thr.db -o " .. dir .. "/thr.html latest")
    assert(rc == 0, err)
    local html = assert(H.read(dir .. "/thr.html"))
    assert.truthy(html:find(">throttled</th>", 1, true), html:sub(1, 200))
    local _, n = html:gsub('<td class="">yes</td>', "")
    assert.equal(1, n)
  end)

  it("exits 1 naming the -o path when it cannot create the file", function()
    local target = dir .. "/no/such/dir/r.html"
    local rc, _, err = H.vsalab("report --db " .. db .. " -o " .. target)
    assert.equal(1, rc)
    assert.truthy(err:find("could not write " .. target .. ": No such file", 1, true), err)
  end)

  it("says once which command found the DB damaged mid-read (was 'vsalab report: report: ...')", function()
    -- The run table reads; the result table's root page is garbage, met
    -- when a RUN:KERNEL side looks for the kernel's rows.
    local path = dir .. "/dmg.db"
    os.execute("cp " .. db .. " " .. path)
    local r = vsalab.db_open(path, {readonly = true})
    local page = r:q("PRAGMA page_size")[1].page_size
    local root = r:q("SELECT rootpage FROM sqlite_master WHERE name = 'result'")[1].rootpage
    r:close()
    local f = assert(io.open(path, "r+b"))
    f:seek("set", (root - 1) * page + 8)
    f:write(string.rep("\255", page - 8))
    f:close()
    for _, cmd in ipairs{"report", "compare"} do
      local rc, _, err = H.vsalab(cmd .. " --db " .. path .. " latest:reference latest:invert"
        .. (cmd == "report" and " -o " .. dir .. "/dmg.html" or ""))
      H.usage_error(rc, err, cmd .. ": " .. path .. " is damaged", cmd)
      assert.falsy(err:find(cmd .. ": " .. cmd .. ":", 1, true), err)
    end
  end)

  it("never writes the report over a database", function()
    os.execute("cp " .. db .. " " .. dir .. "/copy.db && ln -sf " .. db .. " " .. dir .. "/link.html")
    -- Another DB's WAL (its header is not SQLite's): any non-report file.
    H.write(dir .. "/other.db-wal", "\55\127\6\130 wal frames")
    for _, target in ipairs{db, dir .. "/link.html", dir .. "/copy.db", dir .. "/other.db-wal"} do
      local rc, _, err = H.vsalab("report --db " .. db .. " -o " .. target)
      assert.equal(2, rc, target)
      assert.truthy(err:find("not overwritten", 1, true), err)
    end
    local rc, out = H.vsalab("runs --db " .. db)
    assert.equal(0, rc)
    assert.truthy(out:match("finished"), out)
    -- An earlier report is replaced.
    assert.equal(0, (H.vsalab("report --db " .. db .. " -o " .. dir .. "/again.html")))
    assert.equal(0, (H.vsalab("report --db " .. db .. " -o " .. dir .. "/again.html")))
  end)

  it("renders in headless Chromium to a picture that is not blank", function()
    H.vsalab("report --db " .. db .. " -o " .. dir .. "/r.html")
    local png = H.screenshot(dir .. "/r.html", dir .. "/r.png", "1100,1400")
    assert.equal("\137PNG", png:sub(1, 4))
    -- A blank 1100x1400 page compresses to a few KB; text, tables and a
    -- chart do not.
    assert.is_true(#png > 30000, "screenshot only " .. #png .. " bytes")
  end)
end)

describe("experiment summary", function()
  local exp = require "vsalab.experiment"
  local function summary_of(rows)
    local out, stdout = {}, io.stdout
    io.stdout = {write = function(self, ...) for _, v in ipairs{...} do out[#out + 1] = v end end}
    local ok, e = pcall(exp.summary, rows)
    io.stdout = stdout
    assert(ok, e)
    return table.concat(out)
  end
  local function row(ragged)
    return {kernel = "reference", B = 1, H = 2, Sq = 256, density = 0.5, topk = 2,
      ragged = ragged, ms_median = 1.5, tflops = 0.1, passed = 1}
  end

  it("marks ragged rows only when some row is ragged", function()
    local plain = summary_of({row(0), row(0)})
    assert.falsy(plain:find("ragged", 1, true), plain)
    local mixed = summary_of({row(0), row(1)})
    assert.truthy(mixed:find("ragged", 1, true), mixed)
    -- 0/1, as `show` and `compare` print the column.
    assert.truthy(mixed:find("\nreference +1 +2 +256 +0%.500 +2 +0 ") and mixed:find("\nreference +1 +2 +256 +0%.500 +2 +1 "), mixed)
  end)

  it("prints a NaN error as nan, never glibc's signed -nan", function()
    local r = row(0)
    r.errors = {dq = {rel_l2 = -(0 / 0)}, dk = {rel_l2 = 0 / 0}, dv = {rel_l2 = 1e-3}}
    local out = summary_of({r})
    assert.falsy(out:find("-nan", 1, true), out)
    assert.truthy(out:find(" nan +nan +1%.00e%-03"), out)
  end)

  it("shows a capped column only when a point was timed under a power or thermal limit", function()
    local function timed(kernel, throttled, extra)
      local r = row(0)
      r.kernel, r.throttled, r.extra = kernel, throttled, extra
      return r
    end
    local plain = summary_of({timed("sm90a", 0), timed("sm90a-det", nil)})
    assert.truthy(plain:find("sm90a-det", 1, true), plain)
    assert.falsy(plain:find("capped", 1, true), plain)
    local t = summary_of({timed("sm90a", 0), timed("sm90a-det", 1, {capped_ms = 89.4}), timed("triton", 1)})
    assert.truthy(t:find("capped", 1, true), t)
    assert.truthy(t:match("sm90a%-det[^\n]* 89%.4 ms "), t)
    assert.truthy(t:match("\ntriton [^\n]* yes "), t)
    assert.truthy(t:match("\nsm90a [^\n]* %- +pass"), t)
  end)
end)
