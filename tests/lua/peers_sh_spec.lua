-- scripts/peers.sh as a user mistypes it: a usage error exits 2 naming
-- what is wrong, and leaves an existing .peers/ install as it was.
local H = require "helpers"

describe("scripts/peers.sh", function()
  local dir = H.tmpdir()
  teardown(function() os.execute("rm -rf " .. dir) end)

  -- A copy of the script in a tree of its own: it installs into the
  -- .peers/ beside its scripts/ folder, never into this checkout's.
  local function tree()
    local t = H.tmpdir()
    os.execute("mkdir -p " .. t .. "/scripts " .. t .. "/.peers/pkg && cp " .. H.root .. "/scripts/peers.sh "
      .. H.root .. "/scripts/peers.lock " .. t .. "/scripts/ && echo kept > " .. t .. "/.peers/pkg/marker")
    return t
  end

  it("keeps an installed .peers/ when install is given a folder it cannot use", function()
    -- install removed .peers/ first and checked its folder after: a typo
    -- deleted the working install.
    local t = tree()
    os.execute("mkdir -p " .. dir .. "/empty")
    for _, a in ipairs{"/nonexistent", "-x", dir .. "/empty", "''"} do
      local rc, _, err = H.sh("bash " .. t .. "/scripts/peers.sh install " .. a)
      assert.equal(2, rc, a .. ": " .. err)
      assert.truthy(err:find("^peers.sh: install: "), a .. ": " .. err)
      local f = io.open(t .. "/.peers/pkg/marker")
      assert(f, "install " .. a .. " removed .peers/")
      assert.equal("kept", f:read("*l"))
      f:close()
    end
    -- Parts that fail their checksum are refused before .peers/ is touched.
    os.execute("mkdir -p " .. dir .. "/parts && echo junk > " .. dir .. "/parts/peers.tar.xz.00 && "
      .. "echo '0000000000000000000000000000000000000000000000000000000000000000  peers.tar.xz.00' > "
      .. dir .. "/parts/peers.sha256")
    local rc, _, err = H.sh("bash " .. t .. "/scripts/peers.sh install " .. dir .. "/parts")
    assert.equal(2, rc, err)
    assert.truthy(err:find("do not match peers.sha256", 1, true), err)
    assert.truthy(io.open(t .. "/.peers/pkg/marker"), "a bad checksum removed .peers/")
    local left = io.popen("ls -A " .. t):read("*a")
    assert.falsy(left:find("peers-new", 1, true), left)
    os.execute("rm -rf " .. t)
  end)
end)
