#!/usr/bin/env bash
# The session's last device call, on the final build: SASS/register check
# and small-shape correctness of every sm90a version (quick), the main job's
# wall time (wan720p, default options), the emulated sm100a backward after
# the shared preprocess changed, CASES on the default sm90a, and a short
# timing of v3.2 against v4.
set -uo pipefail
B=.gpu-bin/vsalab
timeout 90 tests/gpu/run.sh $B quick > $OUT/quick_step.log 2>&1; echo "quick rc $?"
grep -E "FAIL|launches|all outputs|error" $OUT/quick.log | head
timeout 150 tests/gpu/run.sh $B wan720p > /dev/null 2>&1; echo "wan720p rc $?"
grep -E "wall|sm90a " $OUT/wan720p.log | tail -8
VSALAB_SM100_EMU=1 timeout 120 $B run tests/gpu/sm100a_emu.lua > $OUT/sm100emu.log 2>&1; echo "sm100a_emu rc $?"
tail -6 $OUT/sm100emu.log
timeout 110 $B run tests/gpu/cases.lua sm90a > $OUT/cases.log 2>&1; echo "cases rc $?"
grep -E "FAIL|checks passed" $OUT/cases.log | head -12
timeout 60 $B run --db $OUT/seed.db experiments/seed_sweep.lua -a "Sq=[16384,65536]" kernels=sm90a,sm90a-v4 > $OUT/seed.log 2>&1; echo "seed rc $?"
$B query --db $OUT/seed.db "SELECT kernel, Sq, round(tflops,1) tflops, passed, sm_clock_start_mhz c0, sm_clock_end_mhz c1 FROM result WHERE kernel LIKE 'sm90a%' ORDER BY Sq, kernel"
