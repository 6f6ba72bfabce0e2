-- The sweep API: expansion, zipped axes, skips, stable hashes, overrides.
local H = require "helpers"
local sweep = require "vsalab.sweep"

describe("sweep", function()
  local function make()
    return sweep.new{
      axes = {{"H", {40, 12}}, {"density", {0.1, 0.25}}},
      zip = {{"latent", "label"}, {{21, 45, 80}, "720p"}, {{21, 30, 52}, "480p"}},
      fixed = {B = 1, D = 128},
      skip = function(pt) if pt.H == 40 and pt.label == "480p" then return "not in ANCHORS" end end,
    }
  end

  it("expands axes times zipped rows, first axis slowest, with fixed params", function()
    local pts = make():points()
    assert.equal(8, #pts)
    assert.equal(40, pts[1].H)
    assert.equal(0.1, pts[1].density)
    assert.equal("720p", pts[1].label)
    assert.equal("480p", pts[2].label)
    assert.equal(12, pts[5].H)
    assert.equal(1, pts[3].B)
    assert.equal("not in ANCHORS", pts[2].skipped)
    assert.is_nil(pts[1].skipped)
    local desc = make():describe(function() return 10 end)
    assert.equal("6 points to run, 2 skipped, about 60 s", desc)
    local r = sweep.range(0.1, 1.0, 0.1)
    assert.equal(10, #r)
    assert.equal(1.0, r[10])
    assert.equal(0.3, r[3])
  end)

  it("takes a skip that returns true or a number (a boolean reached io.write: a traceback)", function()
    local sw = sweep.new{axes = {{"density", {0.5, 1.0, 0.25}}}, fixed = {B = 1, H = 1, Sq = 128, D = 16},
      skip = function(pt) if pt.density == 1.0 then return true elseif pt.density == 0.25 then return 7 end end}
    local pts = sw:points()
    assert.is_nil(pts[1].skipped)
    assert.equal("skipped by the sweep", pts[2].skipped)
    assert.equal("7", pts[3].skipped)
    local dir = H.tmpdir()
    H.write(dir .. "/s.lua", [[
      local exp = require "vsalab.experiment"
      local sweep = require "vsalab.sweep"
      local sw = sweep.new{axes = {{"density", {0.5, 1.0}}}, fixed = {B = 1, H = 1, Sq = 128, D = 16},
        skip = function(pt) return pt.density == 1.0 end}
      exp.run{name = "s", device = "cpu", sweep = sw, check = "full", seed = 1}
    ]])
    local rc, _, err = H.vsalab("run --db " .. dir .. "/r.db " .. dir .. "/s.lua")
    os.execute("rm -rf " .. dir)
    assert.equal(0, rc, err)
    assert.truthy(err:find(": skipped by the sweep", 1, true), err)
  end)

  it("gives each point a stable hash", function()
    local a, b = make():points(), make():points()
    local seen = {}
    for i, p in ipairs(a) do
      assert.equal(p.hash, b[i].hash)
      assert.is_nil(seen[p.hash])
      seen[p.hash] = true
    end
    -- Independent of construction order and of the hash field itself.
    assert.equal(sweep.hash({x = 1, y = "a"}), sweep.hash({y = "a", x = 1, hash = "zz"}))
    assert.are_not.equal(sweep.hash({x = 1}), sweep.hash({x = 2}))
  end)

  it("takes nvbench-style overrides", function()
    local sw = make()
    local rest = sw:override{"-a", "density=[0.5,0.75]", "-aH=8", "other"}
    assert.same({"other"}, rest)
    local pts = sw:points()
    assert.equal(4, #pts)
    assert.equal(8, pts[1].H)
    assert.equal(0.75, pts[3].density)
    sw = sweep.new{axes = {{"tokens", {1}}, {"k", {1}}}}
    sw:override{"-a", "tokens[pow2]=[12:14]", "-a", "k=[1:7:3]"}
    local t = {}
    for _, p in ipairs(sw:points()) do t[#t + 1] = p.tokens .. "/" .. p.k end
    assert.same({"4096/1", "4096/4", "4096/7", "8192/1", "8192/4", "8192/7",
      "16384/1", "16384/4", "16384/7"}, t)
  end)

  it("rejects unknown axes and malformed overrides by name", function()
    assert.truthy(H.err(function() make():override{"-a", "heads=4"} end):match("no axis 'heads'"))
    assert.truthy(H.err(function() make():override{"-a", "H"} end):match("expected name=values"))
    assert.truthy(H.err(function() make():override{"-a", "H=[1:x]"} end):match("bad range"))
    assert.truthy(H.err(function() make():override{"-a"} end):match("needs name=values"))
    for _, bad in ipairs{"H=[4", "H=4]", "H=[4,]8"} do
      assert.truthy(H.err(function() make():override{"-a", bad} end):match("unbalanced brackets"), bad)
    end
    for _, bad in ipairs{"density=[0:inf]", "density=[-inf:0]", "density=[0:1e7:1e-9]",
                         "density=[nan:1]", "H[pow2]=[0:1e9]", "H[pow2]=[2000,3]"} do
      assert.truthy(H.err(function() make():override{"-a", bad} end):match("bad range") or
        H.err(function() make():override{"-a", bad} end):match("pow2"), bad)
    end
    -- The range is named once, with what is wrong with it.
    for bad, why in pairs{["H=[1:5:0]"] = "the step must be positive", ["H=[1:3:-1]"] = "the step must be positive",
                          ["H=[1:x]"] = "the end is not a number", ["H=[1:5:y]"] = "the step is not a number"} do
      local e = H.err(function() make():override{"-a", bad} end)
      assert.equal("sweep: axis 'H': bad range '" .. bad:sub(3) .. "': " .. why .. " in -a " .. bad, e)
    end
    local e = H.err(function() make():override{"-a", "H=[1:100000000:1]"} end)
    assert.equal("sweep: axis 'H': bad range '[1:100000000:1]': has 100000000 values, more than 100000"
      .. " in -a H=[1:100000000:1]", e)
    -- An empty range says which way it runs.
    e = H.err(function() make():override{"-a", "density=[1:0:0.25]"} end)
    assert.equal("sweep: axis 'density': no values in '[1:0:0.25]' (a range counts up from its start to its end)"
      .. " in -a density=[1:0:0.25]", e)
    e = H.err(function() make():override{"-a", "H=[0:1e15:1e10]"} end)
    assert.equal("sweep: axis 'H': bad range '[0:1e15:1e10]': has 100001 values, more than 100000"
      .. " in -a H=[0:1e15:1e10]", e)
    e = H.err(function() make():override{"-a", "density=[0:1:1e-300]"} end)
    assert.equal("sweep: axis 'density': bad range '[0:1:1e-300]': has 1e+300 values, more than 100000"
      .. " in -a density=[0:1:1e-300]", e)
    assert.truthy(H.err(function() make():override{"-a", "density=[0.5,0.5]"} end):match("listed twice"))
    for _, bad in ipairs{"density=nan", "density=inf", "density=[1e400]"} do
      assert.truthy(H.err(function() make():override{"-a", bad} end):match("not a finite number"), bad)
    end
    assert.truthy(H.err(function() make():override{"-a", "H[pow2]=[0.5]"} end):match("not an integer"))
    -- A product of axes too large to run fails before anything is built.
    local big = make()
    big:override{"-a", "H=[1:2000]", "-a", "density=[0.001:1:0.001]"}
    assert.truthy(H.err(function() return big:points() end):match("more than 1000000"))
    for _, bad in ipairs{"H=abc", "H=[4,x]"} do
      assert.truthy(H.err(function() make():override{"-a", bad} end):match("axis 'H' takes numbers"), bad)
    end
  end)
end)
