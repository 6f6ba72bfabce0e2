#!/usr/bin/env bash
# Device call O (session 8), the kept v3.4 build: call_l.sh's timings
# against v3.3, then compute-sanitizer on every backward whose preprocess
# changed, the emulated sm100a, CASES on sm90a-det.
set -uo pipefail
B=.gpu-bin/vsalab
bash tests/gpu/call_l.sh
for tool in memcheck racecheck synccheck; do
  VSALAB_SM100_EMU=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/gpu/sanitize_one.lua \
    sm90a sm90a-det sm90a-v4-det sm100a-emu > $OUT/san_$tool.log 2>&1
  echo "$tool rc $?"; grep -E "SUMMARY|FAIL" $OUT/san_$tool.log | head -3
done
VSALAB_SM100_EMU=1 timeout 120 $B run tests/gpu/sm100a_emu.lua > $OUT/sm100emu.log 2>&1; echo "sm100a_emu rc $?"
tail -3 $OUT/sm100emu.log
timeout 110 $B run tests/gpu/cases.lua sm90a-det > $OUT/cases.log 2>&1; echo "cases rc $?"
grep -E "FAIL|checks passed" $OUT/cases.log | head -12
cd $OUT && tar czf logs.tgz *.log *.txt && rm -f *.log
