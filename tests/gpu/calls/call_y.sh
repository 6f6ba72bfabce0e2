#!/usr/bin/env bash
# Device call Y (session 13): the GPU steps session 12 left out, on the
# final harness: the three sanitizers, the emulated sm100a, and the bench
# and sm90a specs changed this session (the sustained sample cap; graph
# replay's dq tolerance in the default mode). Logs under $OUT.
set -uo pipefail
B=.gpu-bin/vsalab
export LUA_PATH=".gpu-bin/lua/share/?.lua;.gpu-bin/lua/share/?/init.lua;;" LUA_CPATH=".gpu-bin/lua/lib/?.so;;"
timeout 120 $B run tests/run_busted.lua --tags=gpu -o utfTerminal tests/gpu/bench_spec.lua tests/gpu/sm90a_spec.lua \
  > $OUT/specs_changed.log 2>&1
echo "bench + sm90a specs rc $?"; grep -E "samples of a|successes|Failure|rel L2" $OUT/specs_changed.log | head -8
OUT=$OUT/r timeout 420 tests/gpu/run.sh $B sanitize sm100emu > $OUT/run.log 2>&1
echo "sanitize + sm100emu rc $?"; grep -E "=== |ERROR SUMMARY" $OUT/run.log $OUT/r/sanitize.* 2>/dev/null | head -20
tar -czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r # few files come back
