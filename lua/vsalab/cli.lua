-- cli.lua — what the results commands (runs, show, query, compare, report,
-- rerun) share: the option loop and the read-only open of the results DB.
-- Problems are printed to stderr as "vsalab CMD: ..." and the helpers return
-- nil; the commands then exit 2 (docs/cli.md, "Exit status"). --help or -h
-- prints the command's usage on stdout: parse then returns nil, 0 (exit 0).
local core = require "vsalab.core"

local M = {}

-- Print "vsalab CMD: msg"; returns nil.
function M.fail(cmd, msg)
  io.stderr:write("vsalab ", cmd, ": ", msg, "\n")
end

-- parse(cmd, argv, spec) -> opts, positional (or nil after printing why).
-- spec.options: flag -> {key = name in opts, check = function(v) -> value
-- or nil, why} (an option with a value), or {key =, flag = true} (no
-- value: opts[key] = true); --db (default: --db of the invocation, else results.db) is
-- always taken. spec.usage is printed after a usage error, and with
-- spec.about (more lines) for --help / -h. spec.strict: a word starting
-- with '-' that is no option is an error; otherwise it is positional (query
-- values may be negative numbers), and --help counts before the first one.
-- "--" ends the options; --opt=VALUE is --opt VALUE.
-- Returns opts, positional; or nil, exit status (2 after a usage error, 0
-- after --help).
function M.parse(cmd, argv, spec)
  local ctx = package.loaded.vsalab and package.loaded.vsalab.context or {}
  local o, rest = {db = ctx.db_path or "results.db"}, {}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    -- "--" ends the options: what follows is positional even when it
    -- starts with "-" (a query value "--db").
    if a == "--" then
      for j = i + 1, #argv do rest[#rest + 1] = argv[j] end
      break
    end
    -- --db=PATH is --db PATH (else a query read it as its SQL).
    local name, inline = a:match("^(%-%-[%w%-]+)=(.*)$")
    if name and ((spec.options or {})[name] or name == "--db") then
      argv = {unpack(argv)}
      argv[i] = name
      table.insert(argv, i + 1, inline)
      a = name
    end
    local opt = (spec.options or {})[a] or (a == "--db" and {key = "db"})
    if (a == "--help" or a == "-h") and (spec.strict or #rest == 0) then
      io.stdout:write(spec.usage, "\n", spec.about and (spec.about .. "\n") or "")
      return nil, 0
    elseif opt and opt.flag then
      if inline and name == a then return M.fail(cmd, a .. " takes no value\n" .. spec.usage), 2 end
      o[opt.key] = true
      i = i + 1
    elseif opt then
      local v = argv[i + 1]
      if not v then return M.fail(cmd, a .. " needs a value\n" .. spec.usage), 2 end
      if opt.check then
        local val, why = opt.check(v)
        if val == nil then return M.fail(cmd, a .. " " .. why), 2 end
        v = val
      end
      o[opt.key] = v
      i = i + 2
    elseif spec.strict and a:sub(1, 1) == "-" then
      return M.fail(cmd, "unknown option " .. a .. "\n" .. spec.usage), 2
    else
      rest[#rest + 1] = a
      i = i + 1
    end
  end
  return o, rest
end

-- The results DB at path, read-only (or nil after printing why). Damage
-- SQLite finds later, mid-read, is the file's problem, not a bug: q raises
-- it as a usage error (exit 2, no traceback), as damage found at open is.
-- Read as a snapshot: no -shm or -wal file is left beside a DB no one is
-- writing (on a shared filesystem too); one being written is read through
-- its writer's log as usual.
function M.open_db(cmd, path)
  if path ~= ":memory:" and not core.file_type(path) then
    -- No file there: where it looked, and how a DB comes to be.
    local where = path:sub(1, 1) == "/" and path or ((os.getenv("PWD") or ".") .. "/" .. path)
    return M.fail(cmd, string.format("no results DB at %s (%s); `vsalab run SCRIPT` writes one (try "
      .. "`vsalab run experiments/smoke.lua` in the vsalab checkout: seconds on a CPU), or name "
      .. "another with --db PATH", where,
      path == "results.db" and "the default: results.db in this directory" or "from --db"))
  end
  local ok, db = pcall(core.db_open, path, {snapshot = true})
  if not ok then return M.fail(cmd, tostring(db)) end
  local proxy = {}
  function proxy.q(_, ...)
    local okq, rows = pcall(db.q, db, ...)
    if okq then return rows end
    local msg = tostring(rows)
    if msg:find("malformed", 1, true) or msg:find("not a database", 1, true) then
      require("vsalab.usage").error(cmd .. ": " .. path .. " is damaged: " .. msg)
    end
    error(rows, 0)
  end
  function proxy.close() return db:close() end
  return proxy
end

return M
