-- Paths as the user gave them, made absolute against the shell's working
-- directory ($PWD), for what a DB row records (a plug-in's library, a
-- merged run's source DB) so it still names the file from elsewhere.
--   require("vsalab.paths").absolute("build/libmine.so")
--     --> "/home/me/vsalab/build/libmine.so"
-- Returns the path unchanged when it is absolute or $PWD is unset. No
-- symlinks are resolved and the file need not exist.
local M = {}

function M.absolute(path)
  if path:sub(1, 1) == "/" then return path end
  local pwd = os.getenv("PWD")
  return pwd and (pwd .. "/" .. path) or path
end

return M
