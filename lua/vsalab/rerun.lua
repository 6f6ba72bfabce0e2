-- vsalab rerun ROW: measure one result row's point again, with the same
-- inputs. A row's problem seed derives from its run's seed and its point
-- hash (vsalab.experiment.point_seed), and the point itself is stored in the
-- row's `extra.point`, so the inputs are rebuilt exactly; the row's kernel
-- is timed and checked again, in the timing mode the row records (hot,
-- cold or graph), and a new run with one row is logged.
--
--   vsalab rerun [--db PATH] [--allow-changed] ROW
--
-- A plug-in's row stores its library's SHA-256: a library changed since
-- (rebuilt, replaced) is refused (exit 2), since its times would stand
-- beside the row's as the same code's; --allow-changed measures it as it
-- is now (the new row stores the new hash).
local cli = require "vsalab.cli"
local json = require "vsalab.json"

local M = {}

function M.main(argv)
  local usage = "usage: vsalab rerun [--db PATH] [--allow-changed] ROW"
  local o, rest = cli.parse("rerun", argv, {usage = usage, strict = true,
    options = {["--allow-changed"] = {key = "allow_changed", flag = true}},
    about = "measures result row ROW's point again with the same inputs, as a new run\n"
      .. "--allow-changed: rerun a plug-in's row although its library changed since"})
  if not o then return rest end
  local row_id = #rest == 1 and rest[1]:match("^%d+$") and #rest[1] <= 15 and tonumber(rest[1])
  if not row_id then
    local why = #rest == 0 and "expected a ROW (a result row's id)"
      or #rest > 1 and string.format("expected one ROW (a result row's id), got %d: '%s'", #rest,
        table.concat(rest, "', '"))
      or string.format("'%s' is not a result row id (a positive integer: the id column of "
        .. "vsalab show RUN)", rest[1])
    io.stderr:write("vsalab rerun: ", why, "\n", usage, "\n")
    return 2
  end
  local db = cli.open_db("rerun", o.db)
  if not db then return 2 end
  local r = db:q([[SELECT r.*, run.seed AS run_seed, run.gpu_name AS gpu_name
                   FROM result r JOIN run ON run.id = r.run_id WHERE r.id = ?]], row_id)[1]
  if not r then
    local n = db:q("SELECT count(*) AS n, min(id) AS lo, max(id) AS hi FROM result")[1]
    db:close()
    io.stderr:write("vsalab rerun: no result row ", row_id, n.n == 0 and " (the DB has no result rows)\n"
      or string.format(" (the DB has %d result row%s, ids %d to %d)\n", n.n, n.n == 1 and "" or "s", n.lo, n.hi))
    return 2
  end
  local extra = r.extra and json.decode(r.extra) or {}
  db:close()
  if r.kernel == "config" then
    io.stderr:write("vsalab rerun: row ", row_id, " records a skipped point (", tostring(r.note),
      "): nothing was measured; rerun the run with --resume\n")
    return 2
  end
  if not extra.point then
    io.stderr:write("vsalab rerun: row ", row_id, " has no stored point (a ", tostring(r.kernel),
      " row, or one logged before rerun support)\n")
    return 2
  end
  -- The row's layout, when its stored point does not name one (a script
  -- that fixed it outside the sweep): bhsd rows stay without it (their hash).
  if r.layout and r.layout ~= "bhsd" and extra.point.layout == nil then extra.point.layout = r.layout end
  local exp = require "vsalab.experiment"
  -- A plug-in's or an external peer's row records how to load it again.
  if extra.backend then
    local backends = require "vsalab.backends"
    local changed = backends.plugin_changed(extra.backend)
    if changed and not o.allow_changed then
      io.stderr:write("vsalab rerun: row ", row_id, ": plug-in ", tostring(extra.backend.path), " ", changed,
        ": its times would not be the measured library's; rerun --allow-changed ", row_id,
        " measures it as it is now\n")
      return 2
    elseif changed then
      io.stderr:write("rerun: plug-in ", tostring(extra.backend.path), " ", changed,
        ": --allow-changed, so the rerun times the library as it is now\n")
    end
    local okb, why = pcall(backends.restore, extra.backend)
    if not okb then
      -- The library's problem (deleted, rebuilt broken), not vsalab's: no source line.
      io.stderr:write("vsalab rerun: row ", row_id, ": cannot load backend ", tostring(r.kernel), ": ",
        (tostring(why):gsub("^[^:\n]*%.lua:%d+: ", "")), "\n")
      return 2
    end
  end
  -- The new run records what it reran and with which seed, so `vsalab
  -- compare` can match it point by point against the original.
  local ctx = package.loaded.vsalab.context
  ctx.script = "rerun of row " .. row_id
  ctx.seed = r.run_seed
  -- Timed as the row was, so `compare` sets like against like.
  if require("vsalab.bench").modes[r.mode] then ctx.timing = r.mode end
  -- Where it ran: a run on a machine without a GPU has no GPU's name in
  -- gpu_name (none, or "cpu: <model>").
  local device = require("vsalab.run").has_gpu(r.gpu_name) and "cuda" or "cpu"
  io.stderr:write(string.format("rerun of row %d: %s %s on %s, run seed %s, point %s, timing %s\n",
    row_id, r.experiment, r.kernel, device, tostring(r.run_seed), tostring(r.point_hash),
    tostring(ctx.timing or "hot")))
  local rows = exp.run{name = r.experiment, device = device, configs = {extra.point},
    seed = r.run_seed, only_kernel = r.kernel, gemm = false,
    check = extra.q_blocks and {q_blocks = extra.q_blocks, kv_blocks = extra.kv_blocks} or "full"}
  local measured
  for _, row in ipairs(rows) do
    if row.kernel == r.kernel and row.ms_median ~= nil then measured = row end
  end
  -- The host closes the run as failed with these messages (exit 1; the
  -- kernel's failure, not vsalab's: no traceback).
  local usage = require "vsalab.usage"
  if not measured then
    usage.fail(string.format("rerun of row %d: kernel '%s' did not run here (not available on %s, or the point was skipped)",
      row_id, tostring(r.kernel), device))
  end
  if measured.passed == 0 or measured.passed == false then
    usage.fail(string.format("rerun of row %d: %s failed its check this time (row %s)", row_id,
      tostring(r.kernel), tostring(measured.id)))
  end
  -- Where the new row went, and the command that sets it beside the original.
  local run = require "vsalab.run"
  local ok, cur = pcall(run.current) -- the run the row went to (begun already)
  local new_run = ok and cur and cur.id
  if new_run then
    local db_arg = o.db and (" --db " .. run.shell_word(o.db)) or ""
    io.stderr:write(string.format("vsalab: rerun of row %d is row %s of run %s; beside the original: "
      .. "`vsalab compare%s --partial %d %s`\n", row_id, tostring(measured.id), tostring(new_run), db_arg,
      r.run_id, tostring(new_run)))
  end
  return 0
end

return M
