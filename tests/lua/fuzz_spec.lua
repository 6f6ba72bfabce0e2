-- Fuzz: thousands of random argument combinations at the Lua API (in a
-- subprocess, so a crash is a failed exit status, not a dead test runner)
-- and random command lines at the CLI. Lua errors are fine; crashes,
-- aborts and hangs are not.
local H = require "helpers"

describe("fuzz", function()
  -- Both fuzzers run in a scratch directory: random arguments name files
  -- (db_open, --db) that must not land in the source tree.
  it("the Lua API raises or returns, never crashes", function()
    local dir = H.tmpdir()
    for _ = 1, 3 do
      local seed = H.seed()
      local rc, out, err = H.sh("cd " .. dir .. " && timeout 300 " .. H.exe .. " run " .. H.root ..
        "/tests/fuzz/api_fuzz.lua " .. seed .. " 2000")
      assert(rc == 0 and out:match("fuzz ok"),
        string.format("seed %d: exit %s\n%s", seed, tostring(rc), err:sub(-2000)))
    end
    os.execute("rm -rf " .. dir)
  end)

  it("the CLI exits 0, 1 or 2 on any command line", function()
    local dir = H.tmpdir()
    H.write(dir .. "/ok.lua", "print(#arg)\n")
    H.write(dir .. "/bad.lua", "error('x')\n")
    H.write(dir .. "/syntax.lua", "local = 1\n")
    local tokens = {"run", "help", "--version", "--db", dir .. "/f.db", "", "--device",
      "0", "99", "-1", "x", "--seed", "281474976710656", "1e400", "--", "-x",
      dir .. "/ok.lua", dir .. "/bad.lua", dir .. "/syntax.lua", dir .. "/none.lua",
      "key=value", "'a b'", dir}
    local x = H.seed()
    local function rand(n) x = (x * 48271) % 2147483647; return x % n end
    for _ = 1, 150 do
      local argv = {}
      for i = 1, rand(6) do argv[i] = "'" .. tokens[rand(#tokens) + 1] .. "'" end
      local cmd = table.concat(argv, " ")
      local rc = H.sh("cd " .. dir .. " && timeout 30 " .. H.exe .. " " .. cmd .. " </dev/null")
      assert(rc == 0 or rc == 1 or rc == 2, "vsalab " .. cmd .. " exited " .. tostring(rc))
    end
    os.execute("rm -rf " .. dir)
  end)
end)
