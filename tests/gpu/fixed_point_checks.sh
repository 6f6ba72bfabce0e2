#!/usr/bin/env bash
# fixed_point_checks.sh BINARY — the correctness checks a change to the
# fixed-point dQ path (the shared preprocess, the exponents) must pass on
# the GPU: compute-sanitizer memcheck, racecheck and synccheck on every
# backward that uses it (sm90a for the fp32 preprocess path beside them),
# the emulated sm100a's kernel paths and 20 bitwise launches, and every
# CASES case on sm90a-fp32. Logs into $OUT; one "rc" line per check.
set -uo pipefail
B=${1:?usage: fixed_point_checks.sh BINARY}
for tool in memcheck racecheck synccheck; do
  VSALAB_SM100_EMU=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/gpu/sanitize_one.lua \
    sm90a sm90a-fp32 sm90a-v4-fp32 sm100a-emu > $OUT/san_$tool.log 2>&1
  echo "$tool rc $?"; grep -E "SUMMARY|FAIL" $OUT/san_$tool.log | head -3
done
VSALAB_SM100_EMU=1 timeout 120 $B run tests/gpu/sm100a_emu.lua > $OUT/sm100emu.log 2>&1; echo "sm100a_emu rc $?"
tail -3 $OUT/sm100emu.log
timeout 110 $B run tests/gpu/cases.lua sm90a-fp32 > $OUT/cases.log 2>&1; echo "cases rc $?"
grep -E "FAIL|checks passed" $OUT/cases.log | head -12
