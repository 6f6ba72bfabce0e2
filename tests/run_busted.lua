-- Runs busted inside vsalab, so the specs use the real C bindings:
--   build/vsalab run tests/run_busted.lua [busted options] tests/lua
-- Specs tagged `gpu` are excluded unless --tags=gpu is given.
local has_tags = false
for _, a in ipairs(arg) do
  if a:match("^%-%-tags") or a:match("^%-%-exclude%-tags") then has_tags = true end
end
if not has_tags then table.insert(arg, 1, "--exclude-tags=gpu") end
-- Specs share tests/lua/helpers.lua through require "helpers".
local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. package.path
-- busted raises a nil error to leave with failures (compatibility.exit).
local ok, err = pcall(require "busted.runner", {standalone = false})
if not ok then
  if err == nil then os.exit(1) end
  error(err, 0)
end
