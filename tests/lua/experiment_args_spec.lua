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
    assert.equal(2, rc, args .. ": " .. err)
    assert.truthy(err:find(text, 1, true), args .. ": " .. err)
    assert.falsy(err:find("traceback", 1, true), err)
    assert.falsy(err:find("check out", 1, true), err)
  end

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
end)
