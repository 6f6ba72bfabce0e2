#!/usr/bin/env bash
# One device call for issue 13's v3.3 step (session 6): the dQ phase issues
# half 1 before half 0 is emitted, and the fixed-point mode's K/V statistics
# kernel is memory-bound. Correctness first (run.sh quick: SASS check, small
# shapes, 20 bitwise launches per deterministic backend), then old (v3.2,
# the previous binary, .gpu-bin/vsalab-v3.2) / new / old on identical
# shapes, both dQ modes, the Triton peer in the new run; Wan 720P H40 at
# both list kinds; the per-kernel breakdown; CASES on the fixed-point mode.
set -uo pipefail
B=.gpu-bin/vsalab
OLD=.gpu-bin/vsalab-v3.2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 90 tests/gpu/run.sh $B quick > $OUT/quick_step.log 2>&1; echo "quick rc $?"
grep -E "FAIL|launches|all outputs|error" $OUT/quick.log | head
S="-a Sq=[4096,8192,16384,32768,65536,131072]"
timeout 100 $OLD run --db $OUT/old.db experiments/seed_sweep.lua $S kernels=sm90a,sm90a-det > $OUT/seed_old1.log 2>&1; echo "old1 rc $?"
timeout 150 $B run --db $OUT/results.db experiments/seed_sweep.lua $S \
  peers=triton kernels=sm90a,sm90a-det,triton > $OUT/seed.log 2>&1; echo "seed rc $?"
timeout 100 $OLD run --db $OUT/old.db experiments/seed_sweep.lua $S kernels=sm90a,sm90a-det > $OUT/seed_old2.log 2>&1; echo "old2 rc $?"
timeout 120 $B run --db $OUT/results.db experiments/wan720p.lua -a H=40 -a "density=[0.1,0.25]" \
  -a "lists=[random,vsa:4]" kernels=sm90a,sm90a-det > $OUT/wan.log 2>&1; echo "wan rc $?"
timeout 100 $OLD run --db $OUT/old.db experiments/wan720p.lua -a H=40 -a "density=[0.1,0.25]" \
  -a "lists=[random,vsa:4]" kernels=sm90a,sm90a-det > $OUT/wan_old.log 2>&1; echo "wan old rc $?"
Q="SELECT run_id r, kernel, Sq, H, density d, json_extract(extra,'$.lists') lists, round(ms_median,4) ms, round(tflops,1) tflops, passed ok, sm_clock_start_mhz c0, sm_clock_end_mhz c1 FROM result WHERE kernel <> 'invert' ORDER BY lists, H, density, Sq, kernel, run_id"
$B query --db $OUT/old.db "$Q"
$B query --db $OUT/results.db "$Q"
timeout 60 tests/gpu/run.sh $B breakdown > /dev/null 2>&1; echo "breakdown rc $?"
grep -E "S=|_kernel|Duration|duration" $OUT/breakdown.log | head -40
timeout 110 $B run tests/gpu/cases.lua sm90a-det > $OUT/cases.log 2>&1; echo "cases rc $?"
grep -E "FAIL|checks passed" $OUT/cases.log | head -12
cd $OUT && tar czf logs.tgz *.log *.txt && rm -f *.log
