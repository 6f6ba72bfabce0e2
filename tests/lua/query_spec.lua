-- vsalab runs / show / query on a DB built by the smoke experiment.
local H = require "helpers"

describe("result queries", function()
  local dir = H.tmpdir()
  local db = dir .. "/q.db"
  assert.equal(0, (H.vsalab("run --db " .. db .. " " .. H.root .. "/experiments/smoke.lua")))
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("lists runs in every format", function()
    local rc, out = H.vsalab("runs --db " .. db)
    assert.equal(0, rc)
    assert.truthy(out:match("finished"))
    assert.truthy(out:match("smoke%.lua"))
    rc, out = H.vsalab("runs --db " .. db .. " --format csv")
    assert.truthy(out:match("^id,status,started_at"))
    rc, out = H.vsalab("runs --db " .. db .. " --format json")
    assert.truthy(out:match('^%[{"id":1,"status":"finished","started_at"'), out)
    rc, out = H.vsalab("runs --db " .. db .. " --format markdown")
    assert.truthy(out:match("^| id | status"))
  end)

  it("shows a run's environment and rows", function()
    local rc, out = H.vsalab("show --db " .. db .. " latest")
    assert.equal(0, rc)
    assert.truthy(out:match("run 1  finished"))
    assert.truthy(out:match("reference"))
    assert.equal(2, (H.vsalab("show --db " .. db .. " 42")))
  end)

  it("runs any read-only SQL with bound values", function()
    local rc, out = H.vsalab("query --db " .. db .. " \"SELECT count(*) AS n FROM result WHERE kernel = ?\" reference --format csv")
    assert.equal(0, rc)
    assert.equal("n\n4\n", out)
    rc = H.vsalab("query --db " .. db .. " \"DELETE FROM result\"")
    assert.equal(1, rc) -- read-only
    local d = vsalab.db_open(db, {readonly = true})
    assert.equal(8, #d:q("SELECT id FROM result"))
    d:close()
    assert.equal(1, (H.vsalab("query --db " .. db .. " \"SELEC nonsense\"")))
    assert.equal(2, (H.vsalab("query --db " .. db .. " --format xml \"SELECT 1\"")))
    assert.equal(2, (H.vsalab("runs --db " .. dir .. "/none.db")))
  end)
end)
