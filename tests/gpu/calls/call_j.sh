#!/usr/bin/env bash
# The session's last device call (session 6), on the final build: v3.3
# (the dQ phase issues half 1 before half 0 leaves; the fixed-point mode's
# K/V statistics kernel is memory-bound, writes per-head slots with no
# memset or atomics, and the preprocess overlaps it as a programmatic
# dependent launch). quick (SASS check, small shapes, 20 bitwise launches),
# compute-sanitizer on the backwards whose preprocess changed, CASES on
# sm90a-det, the emulated sm100a, then both dQ modes and Triton from 4k to
# 131k, each mode again alone (clock drift), Wan 720P H40, the breakdown.
set -uo pipefail
B=.gpu-bin/vsalab
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
timeout 90 tests/gpu/run.sh $B quick > $OUT/quick_step.log 2>&1; echo "quick rc $?"
grep -E "FAIL|launches|all outputs|error" $OUT/quick.log | head
bash tests/gpu/fixed_point_checks.sh $B
D="--db $OUT/results.db"
timeout 150 $B run $D experiments/seed_sweep.lua -a "Sq=[4096,8192,16384,32768,65536,131072]" \
  peers=triton kernels=sm90a,sm90a-det,triton > $OUT/seed1.log 2>&1; echo "seed1 rc $?"
S="-a Sq=[4096,8192,16384,32768,65536]"
timeout 60 $B run $D experiments/seed_sweep.lua $S kernels=sm90a-det > $OUT/seed2.log 2>&1; echo "seed2 rc $?"
timeout 60 $B run $D experiments/seed_sweep.lua $S kernels=sm90a > $OUT/seed3.log 2>&1; echo "seed3 rc $?"
timeout 100 $B run $D experiments/wan720p.lua -a H=40 -a "density=[0.1,0.25]" kernels=sm90a,sm90a-det > $OUT/wan.log 2>&1; echo "wan rc $?"
Q="SELECT run_id r, kernel, Sq, H, density d, round(ms_median*1000,1) us, round(tflops,1) tflops, passed ok, sm_clock_start_mhz c0, sm_clock_end_mhz c1, (SELECT round(rel_l2,5) FROM result_error e WHERE e.result_id = result.id AND e.output = 'dq') dq_err FROM result WHERE kernel <> 'invert' ORDER BY H, density, Sq, kernel, run_id"
$B query --db $OUT/results.db "$Q"
timeout 60 tests/gpu/run.sh $B breakdown > /dev/null 2>&1; echo "breakdown rc $?"
grep -E "^  [a-z].*\(|duration" $OUT/breakdown.log | sed -E 's/\(.*//' | paste - - | awk '{print $(NF-2), $NF}'
cd $OUT && tar czf logs.tgz *.log *.txt && rm -f *.log
