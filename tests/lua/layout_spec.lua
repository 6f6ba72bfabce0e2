-- The token layouts (bhsd [B,H,S,D], bshd [B,S,H,D]) on the CPU: names and
-- errors, the CPU reference and the oracle through the Lua API (bshd is
-- bhsd transposed, bit for bit), the layout axis of the experiments (hash
-- of bhsd points unchanged, bad values exit 2), the DB's layout column
-- (schema 5: an older DB's rows read bhsd), compare keyed by layout, and
-- the numpy peer at bshd.
local H = require "helpers"
local layouts = require "vsalab.layouts"

local function build(layout, extra)
  local s = {B = 2, H = 3, Sq = 192, Skv = 256, D = 32, density = 0.5, seed = 11, device = "cpu",
    layout = layout}
  for k, v in pairs(extra or {}) do s[k] = v end
  return vsalab.problem.build(s)
end

local function same_bits(a, b)
  local c = vsalab.compare(a, b)
  return c.max_abs == 0 and c.nonfinite == 0
end

describe("layouts", function()
  it("names the two layouts and refuses others, naming the supported ones", function()
    assert.same({"bhsd", "bshd"}, layouts.names)
    assert.equal("bhsd", layouts.check(nil))
    assert.equal("bshd", layouts.check("bshd"))
    -- As strict as the kernels' own layout= (the C side): no trimming.
    assert.is_false((pcall(layouts.check, " bshd ")))
    assert.same({2, 7, 3, 4}, layouts.shape("bshd", 2, 3, 7, 4))
    local ok, e = pcall(layouts.check, "bsdh", "layout")
    assert.is_false(ok)
    assert.equal("layout: 'bsdh' is not supported (supported: bhsd, bshd)", e)
    e = H.err(vsalab.problem.build, {H = 1, Sq = 64, seed = 1, device = "cpu", layout = "BSHD"})
    assert.truthy(e:find("layout: 'BSHD' is not supported (supported: bhsd, bshd)", 1, true), e)
  end)

  it("builds a bshd problem holding the bhsd problem's numbers", function()
    local a, b = build("bhsd"), build("bshd")
    assert.equal("bshd", b.layout)
    assert.same({2, 192, 3, 32}, b.q.shape)
    assert.same({2, 256, 3, 32}, b.k.shape)
    assert.same({2, 3, 192}, b.lse.shape)
    for _, n in ipairs{"q", "k", "v", "dO", "o"} do
      assert.is_true(same_bits(b[n], a[n]:transpose(2, 3):contiguous()), n)
    end
  end)

  it("runs the CPU reference in bshd with the bhsd results transposed, bit for bit", function()
    for _, block in ipairs{64, 128} do
      local extra = {block = block, Sq = 3 * block, Skv = 4 * block, ragged = true}
      local a, b = build("bhsd", extra), build("bshd", extra)
      local ra = {vsalab.backends.get("reference").run(a)}
      local rb = {vsalab.backends.get("reference").run(b)}
      for i, n in ipairs{"dq", "dk", "dv"} do
        assert.same(layouts.shape("bshd", 2, 3, i == 1 and b.Sq or b.Skv, 32), rb[i].shape)
        assert.is_true(same_bits(rb[i], ra[i]:transpose(2, 3):contiguous()), n .. " at block " .. block)
      end
      -- f32 outputs and the forward too.
      local fa = {vsalab.backward_ref(a.dO, a.q, a.k, a.v, a.o, a.lse, a.k2q_idx, a.k2q_num, a.vbs,
        {out_dtype = "f32"})}
      local fb = {vsalab.backward_ref(b.dO, b.q, b.k, b.v, b.o, b.lse, b.k2q_idx, b.k2q_num, b.vbs,
        {out_dtype = "f32", layout = "bshd"})}
      for i = 1, 3 do assert.is_true(same_bits(fb[i], fa[i]:transpose(2, 3):contiguous())) end
      local o, lse = vsalab.forward_ref(b.q, b.k, b.v, b.q2k_idx, b.q2k_num, b.vbs, {layout = "bshd"})
      assert.is_true(same_bits(o, b.o))
      assert.is_true(same_bits(lse, b.lse))
      -- The oracle in bshd: the bhsd oracle transposed; the spot check passes.
      local oa = vsalab.oracle{q = a.q, k = a.k, v = a.v, dO = a.dO, q2k_idx = a.q2k_idx,
        q2k_num = a.q2k_num, variable_block_sizes = a.vbs}
      local ob = vsalab.oracle{q = b.q, k = b.k, v = b.v, dO = b.dO, q2k_idx = b.q2k_idx,
        q2k_num = b.q2k_num, variable_block_sizes = b.vbs, layout = "bshd"}
      for _, n in ipairs{"o", "dq", "dk", "dv"} do
        assert.is_true(same_bits(ob[n], oa[n]:transpose(2, 3):contiguous()), "oracle " .. n)
      end
      local res = vsalab.check.spot_check(b, {dq = rb[1], dk = rb[2], dv = rb[3]}, {heads = 2})
      assert.is_true(res.passed)
    end
  end)

  it("checks every tensor against the layout, naming the argument", function()
    local a, b = build("bhsd"), build("bshd")
    local e = H.err(vsalab.backward_ref, a.dO, b.q, b.k, b.v, b.o, b.lse, b.k2q_idx, b.k2q_num, b.vbs,
      {layout = "bshd"})
    assert.truthy(e:find("dO: shape [2,3,192,32] does not match layout bshd [B,Sq,H,D] = [2,192,3,32]", 1, true), e)
    e = H.err(vsalab.backward_ref, b.dO, b.q, a.k, b.v, b.o, b.lse, b.k2q_idx, b.k2q_num, b.vbs,
      {layout = "bshd"})
    assert.truthy(e:find("k: shape [2,3,256,32] does not match layout bshd [B,Skv,H,D] = [2,256,3,32]", 1, true), e)
    e = H.err(vsalab.backward_ref, b.dO, b.q, b.k, b.v, b.o, b.lse, b.k2q_idx, b.k2q_num, b.vbs,
      {layout = "bsdh"})
    assert.truthy(e:find("layout: 'bsdh' is not supported (supported: bhsd, bshd)", 1, true), e)
    e = H.err(vsalab.oracle, {q = b.q, k = b.k, v = b.v, dO = a.dO, q2k_idx = b.q2k_idx,
      q2k_num = b.q2k_num, variable_block_sizes = b.vbs, layout = "bshd"})
    assert.truthy(e:find("dO: shape [2,3,192,32] does not match layout bshd", 1, true), e)
    -- out buffers in the wrong layout.
    local sq = vsalab.empty({2, 3, 192, 32}, {dtype = "bf16"})
    local sk = vsalab.empty({2, 256, 3, 32}, {dtype = "bf16"})
    e = H.err(vsalab.backward_ref, b.dO, b.q, b.k, b.v, b.o, b.lse, b.k2q_idx, b.k2q_num, b.vbs,
      {layout = "bshd", out = {sq, sk, sk:clone()}})
    assert.truthy(e:find("out[1] (dq): expected shape [2,192,3,32]", 1, true), e)
  end)

  it("leaves a plug-in out of the layouts it does not declare, saying why", function()
    local plugin = os.getenv("VSALAB_V1_ABI_PLUGIN")
    if not plugin then pending("VSALAB_V1_ABI_PLUGIN is not set (ctest sets it)") return end
    local b = vsalab.backends.load{path = plugin, symbol = "v1_backward", name = "layout_test_plugin"}
    local ok, why = b.supported("cpu", {D = 64, block = 64, layout = "bshd"})
    assert.is_false(ok)
    assert.truthy(why:find("layout bshd: not supported by this kernel (the plug-in takes bhsd)", 1, true), why)
    assert.is_true((b.supported("cpu", {D = 64, block = 64, layout = "bhsd"})))
    vsalab.backends.unregister("layout_test_plugin")
  end)
end)

describe("the layout axis", function()
  local sweep = vsalab.sweep
  it("keeps the hash of bhsd points and gives bshd points their own", function()
    local pt = {B = 1, H = 2, D = 64, density = 0.5, latent = {6, 7, 9}}
    local with = {}
    for k, v in pairs(pt) do with[k] = v end
    with.layout = "bhsd"
    assert.equal(sweep.hash(pt), sweep.hash(with))
    with.layout = "bshd"
    assert.are_not.equal(sweep.hash(pt), sweep.hash(with))
  end)

  it("refuses an unknown layout with exit 2 and no traceback", function()
    local rc, _, err = H.vsalab("run --check " .. H.root .. "/experiments/smoke.lua -a layout=bsdh")
    H.usage_error(rc, err, "argument 'layout': expected a layout (bhsd, bshd), got bsdh (-a layout=bsdh)")
    rc, _, err = H.vsalab("run --check " .. H.root .. "/experiments/wan720p.lua -a layout=[bhsd,BSHD]")
    H.usage_error(rc, err, "argument 'layout'")
  end)

  it("logs each row's layout, and compare matches points by it", function()
    local dir = H.tmpdir()
    local db = dir .. "/l.db"
    local smoke = H.root .. "/experiments/smoke.lua -a density=0.5"
    assert.equal(0, (H.vsalab("run --db " .. db .. " " .. smoke .. " -a layout=[bhsd,bshd]")))
    assert.equal(0, (H.vsalab("run --db " .. db .. " " .. smoke .. " -a layout=bshd")))
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT layout, count(*) AS n FROM result WHERE run_id = 1 AND kernel = 'reference' GROUP BY layout ORDER BY layout")
    assert.equal(2, #rows)
    assert.same({"bhsd", 2, "bshd", 2}, {rows[1].layout, rows[1].n, rows[2].layout, rows[2].n})
    -- bshd points get their own hash; a bhsd row's hash is the one it had before the axis.
    local h = d:q("SELECT DISTINCT point_hash FROM result WHERE run_id = 1 AND layout = 'bshd'")
    local hb = d:q("SELECT DISTINCT point_hash FROM result WHERE run_id = 1 AND layout = 'bhsd'")
    assert.equal(2, #h)
    assert.equal(2, #hb)
    assert.are_not.equal(h[1].point_hash, hb[1].point_hash)
    d:close()
    local rc, out = H.vsalab("compare --db " .. db .. " 1 2 --partial")
    assert.truthy(out:find("layout", 1, true), out)
    assert.truthy(out:match("ONLY A (%d+)") == "4", out) -- the bhsd points (invert and reference)
    assert.truthy(out:match("ONLY B (%d+)") == "0", out)
    assert.truthy(rc == 0 or rc == 1)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("schema 5", function()
  it("opens a schema-4 DB, its rows reading layout 'bhsd'", function()
    local dir = H.tmpdir()
    local db = dir .. "/old.db"
    local sql = {}
    for _, f in ipairs{"db/schema.sql", "db/upgrades/0002_measurement.sql", "db/upgrades/0003_multi.sql",
        "db/upgrades/0004_block.sql"} do
      sql[#sql + 1] = assert(H.read(H.root .. "/" .. f))
    end
    sql[#sql + 1] = "PRAGMA user_version = 4; INSERT INTO run (script, uid) VALUES ('old', 'u1');"
      .. " INSERT INTO result (run_id, experiment, kernel, block, ms_median) VALUES (1, 'e', 'k', 64, 1.5);"
    H.write(dir .. "/old.sql", table.concat(sql, "\n"))
    local rc = H.sh("sqlite3 " .. db .. " < " .. dir .. "/old.sql")
    if rc ~= 0 then pending("no sqlite3 command to write a schema-4 file") return end
    -- Read-only: the old file as it stands (no column), read as bhsd by show.
    local _, out = H.vsalab("show --db " .. db .. " --format csv 1")
    assert.truthy(out:find("bhsd", 1, true), out)
    local d = vsalab.db_open(db) -- writable: upgraded to 5
    assert.equal(vsalab.db_schema_version, d:q("PRAGMA user_version")[1].user_version)
    assert.equal(5, vsalab.db_schema_version)
    local old = d:q("SELECT layout FROM result")
    assert.equal(1, #old)
    assert.equal("bhsd", old[1].layout)
    local id = d:begin_run{script = "new"}
    d:log{run_id = id, experiment = "e", kernel = "k", layout = "bshd"}
    d:log{run_id = id, experiment = "e", kernel = "k"}
    local new = d:q("SELECT layout FROM result WHERE run_id = ? ORDER BY id", id)
    assert.equal("bshd", new[1].layout)
    assert.equal("bhsd", new[2].layout) -- none given: the default
    assert.is_false((pcall(d.log, d, {run_id = id, experiment = "e", kernel = "k", layout = "bsdh"})))
    d:end_run(id, "finished")
    d:close()
    os.execute("rm -rf " .. dir)
  end)
end)

describe("the numpy peer", function()
  it("runs a bshd point and matches the reference", function()
    if os.execute("python3 -c 'import numpy' >/dev/null 2>&1") ~= 0 then
      pending("python3 cannot import numpy") return
    end
    local peer = vsalab.backends.peer("numpy")
    local b = build("bshd")
    assert.is_true((peer.supported("cpu", b)))
    local dq, dk, dv = peer.run(b)
    local rq, rk, rv = vsalab.backends.get("reference").run(b)
    assert.same(b.q.shape, dq.shape)
    for n, pair in pairs{dq = {dq, rq}, dk = {dk, rk}, dv = {dv, rv}} do
      local c = vsalab.compare(pair[1], pair[2])
      assert.is_true(c.rel_l2 < 1e-2 and c.nonfinite == 0, n .. " rel L2 " .. c.rel_l2)
    end
    vsalab.backends.unregister("numpy")
  end)
end)
