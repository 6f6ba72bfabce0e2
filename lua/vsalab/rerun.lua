-- vsalab rerun ROW: measure one result row's point again, with the same
-- inputs. A row's problem seed derives from its run's seed and its point
-- hash (vsalab.experiment.point_seed), and the point itself is stored in the
-- row's `extra.point`, so the inputs are rebuilt exactly; the row's kernel
-- is timed and checked again and a new run with one row is logged.
--
--   vsalab rerun [--db PATH] ROW
local core = require "vsalab.core"
local json_decode -- tiny: the DB's JSON text is ours (vsalab.json)

local M = {}

-- Parse the JSON subset vsalab.json writes (objects, arrays, numbers,
-- strings without escapes beyond \" and \\, booleans, null).
local function decode(s)
  local i = 1
  local function ws() i = s:find("[^ \t\r\n]", i) or #s + 1 end
  local value
  local function str()
    local j, out = i + 1, {}
    while true do
      local c = s:sub(j, j)
      if c == "" then error("json: unterminated string", 0) end
      if c == '"' then break end
      if c == "\\" then j = j + 1; c = s:sub(j, j) end
      out[#out + 1] = c
      j = j + 1
    end
    i = j + 1
    return table.concat(out)
  end
  function value()
    ws()
    local c = s:sub(i, i)
    if c == "{" then
      i = i + 1
      local t = {}
      ws()
      if s:sub(i, i) == "}" then i = i + 1; return t end
      while true do
        ws()
        local k = str()
        ws(); i = i + 1 -- ':'
        t[k] = value()
        ws()
        local d = s:sub(i, i); i = i + 1
        if d == "}" then return t end
      end
    elseif c == "[" then
      i = i + 1
      local t = {}
      ws()
      if s:sub(i, i) == "]" then i = i + 1; return t end
      while true do
        t[#t + 1] = value()
        ws()
        local d = s:sub(i, i); i = i + 1
        if d == "]" then return t end
      end
    elseif c == '"' then return str()
    elseif s:sub(i, i + 3) == "true" then i = i + 4; return true
    elseif s:sub(i, i + 4) == "false" then i = i + 5; return false
    elseif s:sub(i, i + 3) == "null" then i = i + 4; return nil
    else
      local num = s:match("^-?[%d.eE+-]+", i)
      if not num then error("json: unexpected '" .. c .. "'", 0) end
      i = i + #num
      return tonumber(num)
    end
  end
  return value()
end
M.decode = decode
json_decode = decode

function M.main(argv)
  local db_path = package.loaded.vsalab.context.db_path or "results.db"
  local row_id
  local i = 1
  while i <= #argv do
    if argv[i] == "--db" and argv[i + 1] then db_path = argv[i + 1]; i = i + 2
    elseif argv[i]:match("^%d+$") and not row_id then row_id = tonumber(argv[i]); i = i + 1
    else
      io.stderr:write("usage: vsalab rerun [--db PATH] ROW\n")
      return 2
    end
  end
  if not row_id then io.stderr:write("usage: vsalab rerun [--db PATH] ROW\n"); return 2 end
  local ok, db = pcall(core.db_open, db_path, {readonly = true})
  if not ok then io.stderr:write("vsalab rerun: ", tostring(db), "\n"); return 2 end
  local r = db:q([[SELECT r.*, run.seed AS run_seed, run.gpu_name AS gpu_name
                   FROM result r JOIN run ON run.id = r.run_id WHERE r.id = ?]], row_id)[1]
  db:close()
  if not r then io.stderr:write("vsalab rerun: no result row ", row_id, "\n"); return 2 end
  local extra = r.extra and json_decode(r.extra) or {}
  if not extra.point then
    io.stderr:write("vsalab rerun: row ", row_id, " has no stored point (logged before rerun support)\n")
    return 2
  end
  local exp = require "vsalab.experiment"
  -- The new run records what it reran and with which seed, so `vsalab
  -- compare` can match it point by point against the original.
  local ctx = package.loaded.vsalab.context
  ctx.script = "rerun of row " .. row_id
  ctx.seed = r.run_seed
  -- Where it ran: rows made on a machine without a GPU carry no gpu_name.
  local device = r.gpu_name and "cuda" or "cpu"
  io.stderr:write(string.format("rerun of row %d: %s %s on %s, run seed %s, point %s\n", row_id,
    r.experiment, r.kernel, device, tostring(r.run_seed), tostring(r.point_hash)))
  exp.run{name = r.experiment, device = device, configs = {extra.point},
    seed = r.run_seed, only_kernel = r.kernel,
    check = extra.q_blocks and {q_blocks = extra.q_blocks, kv_blocks = extra.kv_blocks} or "full"}
  return 0
end

return M
