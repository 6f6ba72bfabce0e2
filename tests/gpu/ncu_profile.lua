-- ncu_profile.lua — launches for Nsight Compute (tests/gpu/run.sh profile) at
-- B1 H8 S32768 25%, random lists: sm90a v3 (default), v3 with the dQ
-- reduce ablated (VSALAB_ABLATE=no_dq_reduce: dq wrong, timing only), then
-- v4 and v4 ablated. ncu's -k regex picks the main
-- kernels:
--   ncu --clock-control none -k regex:"bwd_(ws_|kv2_)?kernel" --set full \
--       build/vsalab run tests/gpu/ncu_profile.lua
local ffi = require "ffi"
ffi.cdef [[int setenv(const char *, const char *, int); int unsetenv(const char *);]]
local Sq = tonumber(os.getenv("PROFILE_SQ") or "32768")
local p = vsalab.problem.build{B = 1, H = 8, Sq = Sq, D = 128, density = 0.25,
  seed = 5, device = "cuda"}
local versions = {3, 4}
for _, version in ipairs(versions) do
  for _, ablate in ipairs{false, true} do
    if ablate then ffi.C.setenv("VSALAB_ABLATE", "no_dq_reduce", 1) else ffi.C.unsetenv("VSALAB_ABLATE") end
    local dq, dk, dv = vsalab.backward_sm90a(p.dO, p.q, p.k, p.v, p.o, p.lse,
      p.k2q_idx, p.k2q_num, p.vbs, {canonical = false, version = version})
    vsalab.synchronize()
    dq:free(); dk:free(); dv:free()
    print(("profiled sm90a v%d%s at B1 H8 S%d 25%%, pairs %d"):format(version,
      ablate and " (dQ reduce ablated)" or "", Sq, p.pairs))
  end
end
ffi.C.unsetenv("VSALAB_ABLATE")
