-- sweep.lua — the CPU sweep of tests/slurm/slurm_test.sh: the smoke
-- experiment (its axis overrides pass through), then, when
-- VSALAB_TEST_FAIL_SHARD names this process's shard, a deliberate failure
-- after its rows are committed (a failed array task whose DB must survive).
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
local smoke = assert(loadfile(dir .. "/../../experiments/smoke.lua"))
smoke(...)
local fail, shard = os.getenv("VSALAB_TEST_FAIL_SHARD"), vsalab.context.shard
if fail and shard and tonumber(fail) == shard.index then
  error(string.format("shard %d fails on purpose (VSALAB_TEST_FAIL_SHARD)", shard.index), 0)
end
