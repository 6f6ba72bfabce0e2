-- Plug-in backends (include/vsalab_plugin.h): loading and its refusals, the
-- example CPU plug-in checked against the fp64 oracle and through every
-- CPU case, a wrong plug-in caught, a failing plug-in failing its point
-- only, and plugin= on the command line through run, rerun and compare.
local H = require "helpers"

local function build_file(env, rel)
  local p = os.getenv(env)
  if p then return p end
  return H.root .. "/build/" .. rel
end
local lib = build_file("VSALAB_EXAMPLE_PLUGIN", "libvsalab_example_cpu.so")
local bad_abi = build_file("VSALAB_BAD_ABI_PLUGIN", "tests/libvsalab_test_bad_abi.so")
local v1_lib = build_file("VSALAB_V1_ABI_PLUGIN", "tests/libvsalab_test_v1_abi.so")
local cuda_lib = build_file("VSALAB_CUDA_EXAMPLE_PLUGIN", "libvsalab_example_cuda.so")

local function problem(seed)
  return vsalab.problem.build{H = 2, Sq = 256, Skv = 384, D = 64, density = 0.5, seed = seed,
    device = "cpu"}
end

describe("backends.load", function()
  -- Specs share one process: leave the registry as it was for the others.
  teardown(function()
    for _, n in ipairs{"example_spec", "example_cases", "unscaled", "failing", "overrun", "example_guard_ok",
        "example_shapes", "v1"} do
      vsalab.backends.unregister(n)
    end
  end)
  it("refuses a missing file, a missing symbol, another ABI and a non-library", function()
    assert.truthy(H.err(vsalab.backends.load, {path = "/nonexistent/libx.so"})
      :find("no file '/nonexistent/libx.so'", 1, true))
    assert.truthy(H.err(vsalab.backends.load, {path = lib, symbol = "no_such_backward"})
      :find("has no symbol 'no_such_backward'", 1, true))
    local e = H.err(vsalab.backends.load, {path = bad_abi, symbol = "bad_backward"})
    assert.truthy(e:find("ABI version 999", 1, true) and e:find("speaks versions 1 and 2", 1, true), e)
    assert.truthy(H.err(vsalab.backends.load, {path = H.exe}):find("cannot load", 1, true))
    assert.truthy(H.err(vsalab.backends.load, {path = lib, nmae = "x"}):find("unknown field 'nmae'", 1, true))
    assert.truthy(H.err(vsalab.backends.load, {symbol = "x"}):find("field 'path'", 1, true))
    assert.truthy(H.err(vsalab.backends.load, {path = lib, supported = 3}):find("field 'supported'", 1, true))
  end)

  it("refuses the name of vsalab's own backwards and rows (the plug-in took over 'reference' unseen)", function()
    for name, want in pairs{reference = "'reference' is vsalab's own backward", sm90a = "'sm90a' is vsalab's own backward",
        invert = "'invert' names the inversion's rows", gemm_bf16 = "'gemm_bf16' names the GEMM ceiling's rows"} do
      local e = H.err(vsalab.backends.load, {path = lib, name = name})
      assert.truthy(e:find(want, 1, true), e)
      e = H.err(vsalab.backends.external, {name = name, cmd = {"true"}})
      assert.truthy(e:find(want, 1, true), e)
    end
    -- The built-in backward is still the one registered.
    assert.is_nil(vsalab.backends.get("reference").origin)
  end)

  it("registers a backend that passes the fp64 oracle on fresh inputs", function()
    local b = vsalab.backends.load{path = lib, name = "example_spec"}
    assert.equal(b, vsalab.backends.get("example_spec"))
    assert.is_false((b.supported("cuda")))
    assert.is_true((b.supported("cpu")))
    local p = problem(H.seed())
    local dq, dk, dv = b.run(p)
    assert.equal("bf16", dq.dtype)
    local ref = vsalab.oracle{q = p.q, k = p.k, v = p.v, dO = p.dO, o = p.o, lse = p.lse,
      q2k_idx = p.q2k_idx, q2k_num = p.q2k_num, variable_block_sizes = p.vbs, sm_scale = p.sm_scale}
    local res = vsalab.check_outputs({dq = dq, dk = dk, dv = dv}, ref)
    assert.is_true(res.passed, vsalab.json.encode(res.errors))
    -- The timed closure writes every element of poisoned buffers.
    for _, t in ipairs{dq, dk, dv} do t:fill(0 / 0) end
    b.timed(p, {dq = dq, dk = dk, dv = dv})()
    assert.is_true(vsalab.check_outputs({dq = dq, dk = dk, dv = dv}, ref).passed)
  end)

  it("passes every CPU case of CASES.md, at both block sizes in both layouts", function()
    local b = vsalab.backends.load{path = lib, name = "example_cases"}
    local failed, ran = {}, {}
    for _, r in ipairs(vsalab.cases.run(b, {device = "cpu", seed = H.seed(), layouts = {"bhsd", "bshd"}})) do
      if not r.passed then failed[#failed + 1] = vsalab.cases.format(r) end
      ran[tostring(r.block) .. " " .. tostring(r.layout)] = true
    end
    assert.equal(0, #failed, table.concat(failed, "\n"))
    for _, k in ipairs{"64 bhsd", "128 bhsd", "64 bshd", "128 bshd"} do assert.truthy(ran[k], k .. " did not run") end
  end)

  it("declares its block sizes and layouts (ABI 2), and runs a block-128 BSHD problem", function()
    local b = vsalab.backends.load{path = lib, name = "example_shapes"}
    local info = b.plugin:info()
    assert.equal(2, info.abi_version)
    assert.same({64, 128}, info.blocks)
    assert.same({"bhsd", "bshd"}, info.layouts)
    local p = vsalab.problem.build{H = 2, Sq = 256, Skv = 384, D = 32, block = 128, density = 0.6,
      ragged = true, seed = H.seed(), device = "cpu", layout = "bshd"}
    assert.is_true((b.supported("cpu", p)))
    local dq, dk, dv = b.run(p)
    assert.same({1, 256, 2, 32}, dq.shape)
    local ref = vsalab.oracle{q = p.q, k = p.k, v = p.v, dO = p.dO, o = p.o, lse = p.lse,
      q2k_idx = p.q2k_idx, q2k_num = p.q2k_num, variable_block_sizes = p.vbs, sm_scale = p.sm_scale,
      layout = "bshd"}
    local res = vsalab.check_outputs({dq = dq, dk = dk, dv = dv}, ref)
    assert.is_true(res.passed, vsalab.json.encode(res.errors))
  end)

  it("loads a version-1 library: block 64 and bhsd only, handed the version-1 struct", function()
    local b = vsalab.backends.load{path = v1_lib, symbol = "v1_backward", name = "v1"}
    local info = b.plugin:info()
    assert.equal(1, info.abi_version)
    assert.same({64}, info.blocks)
    assert.same({"bhsd"}, info.layouts)
    local p = problem(H.seed())
    local e = H.err(b.run, p)
    -- The struct as version 1 laid it out: it ends at user_data (two
    -- pointers after the 14 tensors), before version 2's block and layout.
    assert.truthy(e:find("v1 plug-in: abi_version 1, struct_size ", 1, true), e)
    assert.truthy(e:find(", nq 4", 1, true), e)
    local ffi = require "ffi"
    local tensor = 8 + 4 + 4 + 4 * 8 + 4 * 8 -- data, dtype, ndim, shape[4], stride[4]
    assert.equal(ffi.sizeof("void *") == 8 and (4 * 3 + 4 * 7 + 4 + 4 + 14 * tensor + 16) or -1,
      tonumber(e:match("struct_size (%d+)")), e)
    local p128 = vsalab.problem.build{H = 1, Sq = 256, D = 32, block = 128, density = 0.5, seed = H.seed(),
      device = "cpu"}
    local ok, why = b.supported("cpu", p128)
    assert.is_false(ok)
    assert.truthy(why:find("block 128: not supported by this kernel (the plug-in takes 64)", 1, true), why)
    local pbshd = vsalab.problem.build{H = 1, Sq = 256, D = 32, density = 0.5, seed = H.seed(),
      device = "cpu", layout = "bshd"}
    ok, why = b.supported("cpu", pbshd)
    assert.is_false(ok)
    assert.truthy(why:find("layout bshd: not supported by this kernel (the plug-in takes bhsd)", 1, true), why)
  end)

  it("catches a wrong plug-in (dk without sm_scale)", function()
    local b = vsalab.backends.load{path = lib, symbol = "example_unscaled_backward", name = "unscaled"}
    local p = problem(H.seed())
    local dq, dk, dv = b.run(p)
    local res = vsalab.check.spot_check(p, {dq = dq, dk = dk, dv = dv}, {heads = 2})
    assert.is_false(res.passed)
    assert.is_false(res.errors.dk.passed)
    assert.is_true(res.errors.dv.passed)
  end)

  it("fails a plug-in that writes outside its outputs, naming the output", function()
    local b = vsalab.backends.load{path = lib, symbol = "example_overrun_backward", name = "overrun"}
    local e = H.err(b.run, problem(H.seed()))
    assert.truthy(e:find("backend overrun failed: wrote outside dq: 1 of the 2048 bf16 elements before it changed", 1, true), e)
    -- The well-behaved plug-in on the same guarded buffers: no false alarm.
    local ok = vsalab.backends.load{path = lib, name = "example_guard_ok"}
    assert.equal(3, select("#", ok.run(problem(H.seed()))))
  end)

  it("raises the plug-in's own message when it returns an error", function()
    local b = vsalab.backends.load{path = lib, symbol = "example_failing_backward", name = "failing"}
    local e = H.err(b.run, problem(H.seed()))
    assert.truthy(e:find("backend failing failed: example: refused on purpose", 1, true), e)
    assert.truthy(e:find("(code 2)", 1, true), e)
  end)
end)

describe("plugin= on the command line", function()
  local dir = H.tmpdir()
  local db = dir .. "/p.db"
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("adds checked rows beside the reference's, which rerun and compare take", function()
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. H.root .. "/experiments/smoke.lua -a density=[0.5] plugin=" .. lib)
    assert(rc == 0, err)
    local rows = vsalab.db_open(db, {readonly = true}):q(
      "SELECT id, kernel, passed, tflops, ragged, extra FROM result WHERE kernel = 'vsalab_example_cpu' ORDER BY id")
    assert.equal(2, #rows) -- the 50% point and the ragged one
    for _, r in ipairs(rows) do
      assert.equal(1, r.passed)
      assert.truthy(r.tflops)
      assert.truthy(r.extra:find('"kind":"plugin"', 1, true), r.extra)
    end
    local rc2, _, err2 = H.vsalab("rerun --db " .. db .. " " .. rows[1].id)
    assert(rc2 == 0, err2)
    local rc3, out3 = H.vsalab("compare --db " .. db .. " --floor-pct 1000 1:reference 1:vsalab_example_cpu")
    assert.equal(0, rc3, out3)
    assert.truthy(out3:find("2 matching points", 1, true), out3)
    -- Each point names both kernels (it showed B's alone).
    local _, named = out3:gsub("reference %-> vsalab_example_cpu", "")
    assert.equal(2, named, out3)
    assert.equal(2, (H.vsalab("compare --db " .. db .. " 1:reference 2")))
    assert.equal(2, (H.vsalab("compare --db " .. db .. " 1:reference 1:no_such_kernel")))
  end)

  it("stores the library's hash with each row; rerun refuses a changed library unless --allow-changed", function()
    local copy = dir .. "/libhashed.so"
    os.execute("cp " .. lib .. " " .. copy)
    local h = dir .. "/h.db"
    local rc, _, err = H.vsalab("run --db " .. h .. " " .. H.root .. "/experiments/smoke.lua -a density=[0.5] plugin=" .. copy)
    assert(rc == 0, err)
    local function hashes()
      local out = {}
      for _, r in ipairs(vsalab.db_open(h, {readonly = true}):q(
          "SELECT json_extract(extra, '$.backend.sha256') AS sha FROM result WHERE kernel = 'hashed' ORDER BY id")) do
        out[#out + 1] = r.sha
      end
      return out
    end
    local _, sum = H.sh("sha256sum " .. copy)
    local first = sum:match("^(%x+)")
    assert.same({first, first}, hashes())
    local id = vsalab.db_open(h, {readonly = true}):q("SELECT min(id) AS id FROM result WHERE kernel = 'hashed'")[1].id
    rc, _, err = H.vsalab("rerun --db " .. h .. " " .. id)
    assert(rc == 0, err)
    assert.falsy(err:find("changed since", 1, true), err)
    -- Rebuilt (a byte appended: still the same loadable library): refused,
    -- no run logged (it warned, and timed the new library as the old row's).
    os.execute("printf x >> " .. copy)
    local _, sum2 = H.sh("sha256sum " .. copy)
    local changed = "plug-in " .. copy .. " changed since it was measured (sha256 " .. first:sub(1, 12)
      .. " then, " .. sum2:sub(1, 12) .. " now)"
    rc, _, err = H.vsalab("rerun --db " .. h .. " " .. id)
    assert.equal(2, rc, err)
    assert.truthy(err:find("vsalab rerun: row " .. id .. ": " .. changed, 1, true), err)
    assert.truthy(err:find("rerun --allow-changed " .. id .. " measures it as it is now", 1, true), err)
    assert.equal(3, #hashes())
    assert.equal(2, vsalab.db_open(h, {readonly = true}):q("SELECT count(*) AS n FROM run")[1].n)
    rc, _, err = H.vsalab("rerun --db " .. h .. " --allow-changed " .. id)
    assert(rc == 0, err)
    assert.truthy(err:find("rerun: " .. changed .. ": --allow-changed", 1, true), err)
    local all = hashes()
    assert.equal(4, #all)
    assert.equal(first, all[3])
    assert.is_not.equal(first, all[4])
  end)

  it("hashes a library whose path has a backslash, a quote and a space", function()
    -- sha256sum escapes its line for a name with a backslash: the hash was lost.
    local function q(x) return "'" .. x:gsub("'", "'\\''") .. "'" end
    local odd = dir .. "/odd \\ it's " .. H.seed()
    os.execute("mkdir -p " .. q(odd) .. " && cp " .. lib .. " " .. q(odd .. "/lib\\x.so"))
    local copy = odd .. "/lib\\x.so"
    local h = dir .. "/odd.db"
    local rc, _, err = H.vsalab("run --db " .. h .. " " .. H.root .. "/experiments/smoke.lua -a density=[0.5] "
      .. q("plugin=" .. copy) .. " plugin_name=odd")
    assert(rc == 0, err)
    local _, sum = H.sh("sha256sum < " .. q(copy))
    local rows = vsalab.db_open(h, {readonly = true}):q(
      "SELECT id, json_extract(extra, '$.backend.sha256') AS sha FROM result WHERE kernel = 'odd' ORDER BY id")
    assert.equal(2, #rows)
    assert.equal(sum:match("^(%x+)"), rows[1].sha)
    os.execute("printf x >> " .. q(copy))
    rc, _, err = H.vsalab("rerun --db " .. h .. " --allow-changed " .. rows[1].id)
    assert(rc == 0, err)
    assert.truthy(err:find("changed since it was measured", 1, true), err)
    -- Deleted since: the file named, no source line of vsalab's.
    os.execute("rm " .. q(copy))
    rc, _, err = H.vsalab("rerun --db " .. h .. " " .. rows[1].id)
    assert.equal(2, rc, err)
    assert.truthy(err:find("cannot load backend odd: plugin: no file '" .. copy .. "'", 1, true), err)
    assert.falsy(err:find(".lua:", 1, true), err)
  end)

  it("logs a failing plug-in's points as failed with its message and goes on", function()
    local f = dir .. "/f.db"
    local rc, _, err = H.vsalab("run --db " .. f .. " " .. H.root .. "/experiments/smoke.lua -a density=[0.5] plugin=" ..
      lib .. " plugin_symbol=example_failing_backward plugin_name=failing")
    assert.equal(1, rc, err) -- smoke itself fails when a row failed
    -- ... saying which and why, without a traceback.
    assert.truthy(err:find("vsalab: smoke: failing failed its check: backend failing failed: example: "
      .. "refused on purpose", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
    local d = vsalab.db_open(f, {readonly = true})
    local rows = d:q("SELECT kernel, passed, ms_median, note FROM result WHERE kernel = 'failing'")
    assert.equal(2, #rows) -- both points measured: the sweep went on
    for _, r in ipairs(rows) do
      assert.equal(0, r.passed)
      assert.is_nil(r.ms_median)
      assert.truthy(r.note:find("refused on purpose", 1, true), r.note)
    end
    assert.equal(2, #d:q("SELECT 1 FROM result WHERE kernel = 'reference' AND passed = 1"))
    assert.equal("failed", d:q("SELECT status FROM run")[1].status)
    d:close()
  end)

  it("checks the guard zones after the timed calls too, naming the output", function()
    -- Right on its checked call, one element past dk on every later one:
    -- the timed calls wrote past dk unseen.
    local f = dir .. "/late.db"
    local rc, _, err = H.vsalab("run --db " .. f .. " " .. H.root .. "/experiments/smoke.lua -a density=[0.5] plugin=" ..
      lib .. " plugin_symbol=example_late_overrun_backward plugin_name=late")
    assert.equal(1, rc, err)
    local d = vsalab.db_open(f, {readonly = true})
    local rows = d:q("SELECT passed, ms_median, note FROM result WHERE kernel = 'late' ORDER BY id")
    d:close()
    assert.equal(2, #rows)
    assert.equal(0, rows[1].passed)
    assert.is_nil(rows[1].ms_median)
    assert.truthy(rows[1].note:find("backend late failed: wrote outside dk in its timed calls: 1 of the 2048 "
      .. "bf16 elements after it changed", 1, true), rows[1].note)
  end)

  it("fails a plug-in that writes into its inputs (the reference is computed first)", function()
    -- The plug-in overwrites v and then computes a correct backward of the
    -- changed inputs: only a reference taken before it ran catches that.
    local f = dir .. "/w.db"
    local rc, _, err = H.vsalab("run --db " .. f .. " " .. H.root .. "/experiments/smoke.lua -a density=[0.5] plugin=" ..
      lib .. " plugin_symbol=example_input_writer plugin_name=writer")
    assert.equal(1, rc, err)
    local d = vsalab.db_open(f, {readonly = true})
    local rows = d:q("SELECT passed, tflops FROM result WHERE kernel = 'writer'")
    assert.is_true(#rows > 0)
    for _, r in ipairs(rows) do
      assert.equal(0, r.passed)
      assert.is_nil(r.tflops)
    end
    d:close()
  end)

  it("names a CUDA plug-in unavailable on the CPU, and the sweep goes on without it", function()
    local rc, _, err = H.vsalab("run --db " .. dir .. "/c.db " .. H.root .. "/experiments/smoke.lua -a density=[0.5] plugin=" .. cuda_lib)
    assert.equal(0, rc, err)
    assert.truthy(err:find("vsalab_example_cuda unavailable: vsalab_example_cuda is a CUDA plug-in", 1, true), err)
  end)

  it("refuses plugin_symbol= without plugin= and a missing library (usage errors: 2, no traceback)", function()
    local rc, _, err = H.vsalab("run --db " .. dir .. "/x.db " .. H.root .. "/experiments/smoke.lua plugin_symbol=x")
    assert.equal(2, rc)
    assert.truthy(err:find("give plugin=PATH too", 1, true), err)
    rc, _, err = H.vsalab("run --db " .. dir .. "/x.db " .. H.root .. "/experiments/smoke.lua plugin=" .. dir .. "/none.so")
    H.usage_error(rc, err, "no file")
    -- Named by the argument given, not by backends.load's fields.
    local spaced = dir .. "/libwith space" .. H.seed() .. ".so"
    os.execute("cp " .. lib .. " '" .. spaced .. "'")
    local renamed = dir .. "/libreference.so"
    os.execute("cp " .. lib .. " " .. renamed)
    for args, want in pairs{
        ["plugin="] = "argument 'plugin': expected the path of a shared library",
        ["plugin=" .. lib .. " plugin_name=a/b"] = "argument 'plugin_name': letters, digits and _ . : - only, got 'a/b'",
        ["'plugin=" .. spaced .. "'"] = "argument 'plugin': the backend name from its file name, 'with space",
        ["plugin=" .. lib .. " plugin_name=reference"] = "argument 'plugin_name': 'reference' is vsalab's own backward: pick another name",
        ["plugin=" .. lib .. " plugin_name=invert"] = "argument 'plugin_name': 'invert' names the inversion's rows",
        ["plugin=" .. renamed] = "argument 'plugin': the backend name from its file name, 'reference' is vsalab's own backward: give plugin_name=NAME",
      } do
      rc, _, err = H.vsalab("run --db " .. dir .. "/x.db " .. H.root .. "/experiments/smoke.lua " .. args)
      assert.equal(2, rc, args)
      assert.truthy(err:find(want, 1, true), err)
      assert.falsy(err:find("field", 1, true), err)
    end
  end)
end)

describe("a plug-in at a block size it does not take", function()
  it("gets a skipped row saying why, not silence", function()
    local dir = H.tmpdir()
    local db = dir .. "/b128.db"
    local rc, _, err = H.vsalab("run --db " .. db .. " " .. H.root .. "/experiments/smoke.lua plugin="
      .. v1_lib .. " plugin_symbol=v1_backward plugin_name=v1 -a 'block=[128]' -a 'density=[0.5]'")
    assert.equal(0, rc, err)
    local d = vsalab.db_open(db, {readonly = true})
    local rows = d:q("SELECT passed, note FROM result WHERE kernel = 'v1'")
    d:close()
    assert.is_true(#rows > 0, "no row for the plug-in")
    for _, r in ipairs(rows) do
      assert.is_nil(r.passed)
      assert.truthy(tostring(r.note):find("skipped: block 128", 1, true), tostring(r.note))
    end
    os.execute("rm -rf " .. dir)
  end)

  it("refuses, before measuring, a run that asked only for it where it takes no point (it ended 'finished', exit 0)", function()
    local dir = H.tmpdir()
    local db = dir .. "/only.db"
    local args = H.root .. "/experiments/smoke.lua plugin=" .. v1_lib
      .. " plugin_symbol=v1_backward plugin_name=v1 kernels=v1 -a 'layout=[bshd]' -a 'density=[0.5]'"
    for _, check in ipairs{"--check ", ""} do
      local rc, _, err = H.vsalab("run " .. check .. "--db " .. db .. " " .. args)
      H.usage_error(rc, err, "argument 'kernels': v1 cannot run here: layout bshd: not supported by this "
        .. "kernel (the plug-in takes bhsd) (at every point of this run)", check)
    end
    assert.is_nil(io.open(db))
    os.execute("rm -rf " .. dir)
  end)
end)
