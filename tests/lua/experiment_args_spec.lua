-- The experiments' key=value and -a arguments as a new user types them: a
-- bad value is a usage error (exit 2, named, no traceback) that --check
-- already gives, before any GPU work, measurement or run row.
local H = require "helpers"

describe("experiment arguments", function()
  local dir = H.tmpdir()
  local exp = H.root .. "/experiments/"
  teardown(function() os.execute("rm -rf " .. dir) end)

  local function refused(args, text)
    local rc, _, err = H.vsalab("run --check --db " .. dir .. "/a.db " .. exp .. args)
    H.usage_error(rc, err, text, args)
    assert.falsy(err:find("check out", 1, true), err)
  end

  it("names what an old -det kernel is called now", function()
    refused("smoke.lua kernels=sm90a-det", "'sm90a-det' is now 'sm90a' (fixed-point dQ, the same bits every run, is the default; the fp32 mode is 'sm90a-fp32')")
    refused("smoke.lua kernels=reference,sm90a-v4-det", "'sm90a-v4-det' is now 'sm90a-v4'")
  end)

  it("refuses empty list elements, and a one-block-size kernel named for points of another", function()
    refused("smoke.lua kernels=,", "argument 'kernels': empty element in ','")
    refused("smoke.lua kernels=reference,", "argument 'kernels': empty element in 'reference,'")
    refused("smoke.lua kernels=reference,,sm90a", "argument 'kernels': empty element in 'reference,,sm90a'")
    -- Known without a GPU: sm90a-v5 takes block 128 alone.
    refused("seed_sweep.lua kernels=sm90a-v5 -a block=[64]",
      "argument 'kernels': sm90a-v5 takes block 128 only, and no point of this run has it (give -a block=[128])")
    local rc, _, err = H.vsalab("run --check --db " .. dir .. "/a.db " .. exp
      .. "seed_sweep.lua kernels=sm90a-v5 -a block=[64,128]")
    assert.equal(0, rc, err)
  end)

  it("refuses counts that are not integers in range (--check passed them; the GPU run failed later)", function()
    refused("wan720p.lua check_heads=abc", "argument 'check_heads': expected an integer >= 1, got 'abc'")
    refused("wan720p.lua check_blocks=0", "argument 'check_blocks': expected an integer >= 1, got '0'")
    refused("wan720p.lua check_blocks=1.5", "argument 'check_blocks': expected an integer >= 1, got '1.5'")
    refused("seed_sweep.lua check_blocks=-2", "argument 'check_blocks': expected an integer >= 1, got '-2'")
    refused("seed_sweep.lua reference=yes", "argument 'reference': expected an integer in [0, 1], got 'yes'")
    refused("invert_bench.lua repeats=0", "argument 'repeats': expected an integer >= 1, got '0'")
    for _, ok in ipairs{"wan720p.lua check_heads=4 check_blocks=1", "seed_sweep.lua reference=1",
                        "invert_bench.lua repeats=5"} do
      local rc, _, err = H.vsalab("run --check --db " .. dir .. "/a.db " .. exp .. ok)
      assert.equal(0, rc, ok .. ": " .. err)
    end
    assert.is_nil(io.open(dir .. "/a.db"))
  end)

  it("refuses two list kinds that are one once named canonically (each point would be measured twice)", function()
    refused("smoke.lua -a lists=[vsa:2,vsa:2.0]",
      "argument 'lists': 'vsa:2' and 'vsa:2.0' are one list kind, so the sweep would measure its points twice")
    refused("smoke.lua -a lists=[random,vsa:0,vsa:0.0]", "'vsa:0' and 'vsa:0.0' are one list kind")
    local rc, _, err = H.vsalab("run --check --db " .. dir .. "/a.db " .. exp .. "smoke.lua -a lists=[random,vsa:2]")
    assert.equal(0, rc, err)
  end)

  it("trims spaces around -a values, as kernels= does: the same points, the same hashes", function()
    -- " vsa:2" and " random" were other values: the sweep's filter saw
    -- " random" as VSA lists, and the skipped points' hashes differed.
    local function plan(a)
      local rc, _, err = H.vsalab("run --check --db " .. dir .. "/a.db " .. exp .. "smoke.lua -a '" .. a .. "'")
      assert.equal(0, rc, a .. ": " .. err)
      return err
    end
    local want = plan("lists=[random,vsa:2]")
    assert.equal(want, plan("lists=[ random , vsa:2 ]"))
    assert.equal(want, plan("lists=[random, vsa:2]"))
    assert.equal(plan("density=[0.5,1]"), plan("density=[ 0.5, 1 ]"))
    assert.equal(plan("lists=random"), plan("lists= random "))
    refused("smoke.lua -a 'lists=[random, ,vsa:2]'", "sweep: axis 'lists': an empty value in '[random, ,vsa:2]'")
    refused("smoke.lua -a 'density=[ ]'", "no values in '[ ]'")
  end)

  it("refuses a block size off the list, naming the supported ones (64 and 128)", function()
    for _, script in ipairs{"wan720p.lua", "smoke.lua", "seed_sweep.lua"} do
      refused(script .. " -a block=96", "argument 'block': expected a block size (64, 128), got 96 (-a block=96)")
      refused(script .. " -a block=[64,256]", "expected a block size (64, 128), got 256")
      refused(script .. " -a block=abc", "axis 'block' takes numbers")
      local rc, _, err = H.vsalab("run --check --db " .. dir .. "/a.db " .. exp .. script .. " -a block=[64,128]")
      assert.equal(0, rc, script .. ": " .. err)
    end
    refused("wan720p.lua block=128", "argument 'block': block is an axis of the sweep: give it as -a block=128")
  end)

  it("refuses an Sq that is not a multiple of a point's block size (each -a alone checked out)", function()
    refused("seed_sweep.lua -a Sq=192 -a block=128",
      "argument 'Sq': 192 is not a multiple of the block size 128 (a point of -a block=128)")
    refused("seed_sweep.lua -a Sq=[256,320] -a block=[64,128]", "argument 'Sq': 320 is not a multiple of the block size 128")
    local rc, _, err = H.vsalab("run --check --db " .. dir .. "/a.db " .. exp .. "seed_sweep.lua -a Sq=[256,384] -a block=[64,128]")
    assert.equal(0, rc, err)
  end)

  it("says an axis given as key=value wants -a, and names a bad -a flag or an -a without values", function()
    refused("wan720p.lua H=40", "argument 'H': H is an axis of the sweep: give it as -a H=40")
    refused("seed_sweep.lua density=0.1", "argument 'density': density is an axis of the sweep: give it as -a density=0.1")
    refused("seed_sweep.lua -a Sq[pow3]=[12:14]",
      "sweep: unknown axis flag [pow3] in -a Sq[pow3]=[12:14] (the only axis flag is [pow2]")
    refused("smoke.lua -a density=", "sweep: -a density= gives the axis no values (e.g. -a density=[v1,v2])")
    -- A second key=value for one key, likewise.
    refused("smoke.lua kernels=reference kernels=invert",
      "argument 'kernels': given twice ('kernels=reference', then 'kernels=invert'); a list is one argument: kernels=a,b")
    -- A second -a for one axis replaced the first without a word.
    refused("smoke.lua -a density=0.5 -a density=0.25",
      "sweep: axis 'density' is set twice (-a density=0.5, then -a density=0.25); give its values in one list")
    -- Not an axis: the known arguments, as before.
    refused("wan720p.lua foo=1", "argument 'foo': unknown (known: check_blocks")
    -- A script with no sweep: its --help offered -a, which then read as
    -- "expected key=value".
    refused("invert_bench.lua -a layout=[bshd]", "argument '-a': this script has no sweep")
  end)
end)
