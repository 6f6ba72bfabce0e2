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

  it("trims only a peers install: any other folder keeps its bin/ and include/", function()
    local t = tree()
    local victim = dir .. "/victim"
    os.execute("mkdir -p " .. victim .. "/bin " .. victim .. "/include && echo mine > " .. victim .. "/bin/tool")
    local rc, _, err = H.sh("bash " .. t .. "/scripts/peers.sh trim " .. victim)
    assert.equal(2, rc, err)
    assert.truthy(err:find("is not a peers install", 1, true), err)
    assert.truthy(io.open(victim .. "/bin/tool"), "trim removed another folder's bin/")
    -- A peers install loses what the peers never load, and keeps the rest.
    local peers = dir .. "/peers"
    os.execute("mkdir -p " .. peers .. "/cudnn/__pycache__ " .. peers .. "/nvidia_cutlass_dsl/cu13/include "
      .. peers .. "/bin && echo x > " .. peers .. "/cudnn/api.py")
    rc, _, err = H.sh("bash " .. t .. "/scripts/peers.sh trim " .. peers)
    assert.equal(0, rc, err)
    assert.truthy(io.open(peers .. "/cudnn/api.py"))
    assert.falsy(io.open(peers .. "/bin"), "bin/ left")
    assert.falsy(io.open(peers .. "/nvidia_cutlass_dsl/cu13/include"), "include/ left")
    assert.falsy(io.open(peers .. "/cudnn/__pycache__"), "__pycache__ left")
    os.execute("rm -rf " .. t)
  end)
end)

describe("tests/gpu/peer_tables.sh", function()
  local script = H.root .. "/tests/gpu/peer_tables.sh"

  it("checks every part and SEED_SQ before it runs anything", function()
    -- A bad last part was found only after the sweeps before it ran
    -- (minutes of GPU time).
    local dir = H.tmpdir()
    for _, c in ipairs{
      {"seed bogus", "unknown part 'bogus'"},
      {"table wan x", "unknown part 'x'"},
      {"seed", "SEED_SQ must be", "SEED_SQ='[abc]' "},
      {"table", "no tables DB at " .. dir .. "/none.db"},
    } do
      local rc, out, err = H.sh("cd " .. dir .. " && " .. (c[3] or "") .. "TABLES_DB=none.db bash " .. script
        .. " " .. H.exe .. " " .. c[1])
      assert.equal(2, rc, c[1] .. ": " .. err)
      assert.truthy(err:find(c[2], 1, true), c[1] .. ": " .. err)
      assert.equal("", out, c[1])
    end
    assert.falsy(io.open(dir .. "/gpu-out"), "a refused call made gpu-out/")
    os.execute("rm -rf " .. dir)
  end)
end)
