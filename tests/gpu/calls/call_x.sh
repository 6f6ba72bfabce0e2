#!/usr/bin/env bash
# Device call X (session 9): a lone void held sample is dropped with a
# warning (src/bindings/l_bench.c): the two hold specs of gpu_spec.lua, then the
# devices proof that call W lost to a void sample. Logs under $OUT.
set -uo pipefail
B=.gpu-bin/vsalab
export LUA_PATH=".gpu-bin/lua/share/?.lua;.gpu-bin/lua/share/?/init.lua;;" LUA_CPATH=".gpu-bin/lua/lib/?.so;;"
timeout 60 $B run tests/run_busted.lua --tags=gpu --filter="void" -o utfTerminal tests/gpu/gpu_spec.lua > $OUT/hold_specs.log 2>&1
echo "hold specs rc $?"; tail -4 $OUT/hold_specs.log
VSALAB_SM100_EMU=1 timeout 80 tests/gpu/devices_proof.sh $B > $OUT/devices.log 2>&1; echo "devices rc $?"
grep -E "FAIL|proof|warning" $OUT/devices.log | head -8
