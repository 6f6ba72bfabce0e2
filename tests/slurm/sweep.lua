-- sweep.lua — the CPU sweep of tests/slurm/slurm_test.sh: the smoke
-- experiment (its axis overrides pass through), then, when
-- VSALAB_TEST_FAIL_SHARD names this process's shard, a deliberate failure
-- after its rows are committed (a failed array task whose DB must survive);
-- with VSALAB_TEST_HOLD set, it then waits (up to 120 s) to be cancelled.
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
local smoke = assert(loadfile(dir .. "/../../experiments/smoke.lua"))
smoke(...)
local fail, shard = os.getenv("VSALAB_TEST_FAIL_SHARD"), vsalab.context.shard
if fail and shard and tonumber(fail) == shard.index then
  error(string.format("shard %d fails on purpose (VSALAB_TEST_FAIL_SHARD)", shard.index), 0)
end
if os.getenv("VSALAB_TEST_HOLD") then
  io.stderr:write("holding: waiting to be cancelled\n")
  io.stderr:flush()
  local t = vsalab.proc_now()
  while vsalab.proc_now() - t < 120 do end -- calls C: a signal is seen at once
end
