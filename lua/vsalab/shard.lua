-- Shards and logical runs: a sweep split over several processes.
--
-- `vsalab run --shard I/N` measures only the points whose stable hash (the
-- sweep's FNV-1a, lua/vsalab/sweep.lua, mixed by M.mix) is I modulo N, so N shards cover
-- every point exactly once whatever order they run in and on whatever
-- hosts. Every shard records the same sweep id (run.sweep_id), which makes
-- its run rows one logical run for `runs`, `compare` and `report` once
-- `vsalab merge` has put them in one file.
local json = require "vsalab.json"

local M = {}

local bit = require "bit"

-- a * b modulo 2^32, exact in doubles (16-bit halves: no product over 2^48).
local function mul32(a, b)
  return ((a % 65536) * b + ((math.floor(a / 65536) * b) % 65536) * 65536) % 4294967296
end

local function u32(x) return x % 4294967296 end

-- MurmurHash3's finaliser: FNV-1a's low bits depend only on the low bits
-- of the text's bytes (points that end alike share them), so the hash is
-- mixed before it is reduced modulo the shard count.
function M.mix(h)
  h = u32(bit.bxor(h, bit.rshift(h, 16)))
  h = mul32(h, 0x85ebca6b)
  h = u32(bit.bxor(h, bit.rshift(h, 13)))
  h = mul32(h, 0xc2b2ae35)
  return u32(bit.bxor(h, bit.rshift(h, 16)))
end

-- Whether point hash h (8 hex digits) falls in shard {index=, count=}
-- (every point does when shard is nil).
function M.owns(shard, h)
  if not shard then return true end
  return M.mix(tonumber(h, 16)) % shard.count == shard.index
end

-- The points of configs (each with .hash) that shard owns, in order.
function M.select(shard, configs)
  if not shard then return configs end
  local out = {}
  for _, c in ipairs(configs) do
    if M.owns(shard, c.hash or require("vsalab.experiment").hash_of(c)) then out[#out + 1] = c end
  end
  return out
end

-- The sweep id of this invocation: --sweep-id, else for a shard
-- "slurm-<array job id>" inside a Slurm job array, else one derived from
-- the script's name, its arguments, the seed and the shard count (so the
-- shards of one command line agree without talking). nil for an unsharded
-- run without --sweep-id.
function M.sweep_id(ctx)
  if ctx.sweep_id then return ctx.sweep_id end
  if not ctx.shard then return nil end
  local job = os.getenv("SLURM_ARRAY_JOB_ID")
  if job and job:match("^%d+$") then return "slurm-" .. job end
  local name = (ctx.script or "repl"):match("[^/]+$")
  return "sweep-" .. require("vsalab.sweep").hash{script = name, args = json.encode(ctx.args or {}),
    seed = ctx.seed, shards = ctx.shard.count}
end

-- Why run r (seed, args, shard_count, shard_index) cannot be a shard of
-- the sweep run o is one of, or nil: the shards of one sweep are one
-- measurement (the same seed, script arguments and shard count, one run
-- per slice); anything else would read as one complete logical run that
-- is not. `merge` and a new run's row (lua/vsalab/run.lua) both check it.
function M.conflict(o, r)
  if o.seed ~= r.seed then return string.format("seed %s, not %s", tostring(r.seed), tostring(o.seed)) end
  if o.args ~= r.args then return "other script arguments" end
  if o.shard_count ~= r.shard_count then
    return string.format("%s shards, not %s", tostring(r.shard_count), tostring(o.shard_count))
  end
  if r.shard_index ~= nil and o.shard_index == r.shard_index then
    return string.format("shard %d too (two runs of one slice)", r.shard_index)
  end
  return nil
end

-- The run ids of run id's logical run: every run of its sweep, or the run
-- alone.
function M.members(db, id)
  if not M.has_sweeps(db) then return {id} end
  local r = db:q("SELECT sweep_id FROM run WHERE id = ?", id)[1]
  if not r or not r.sweep_id then return {id} end
  local ids = {}
  for i, m in ipairs(db:q("SELECT id FROM run WHERE sweep_id = ? ORDER BY id", r.sweep_id)) do ids[i] = m.id end
  return ids
end

-- Whether db's run table has sweep ids (schema 3+; an older file opened
-- read-only is read as it is).
function M.has_sweeps(db)
  return #db:q("SELECT 1 FROM pragma_table_info('run') WHERE name = 'sweep_id'") > 0
end

-- "IN (1,2,3)" for an id list (integers only, from the DB).
function M.in_list(ids)
  local t = {}
  for i, v in ipairs(ids) do t[i] = string.format("%d", v) end
  return "(" .. table.concat(t, ",") .. ")"
end

return M
