#!/usr/bin/env bash
# One device call for issue 13's v3.2/v4 step, after call_c.sh: v3.2 and v4
# rebuilt without wgmma serialisation or spills. Correctness (small shapes,
# 20 bitwise launches, CASES on v4-det), then old (v3.1, the previous
# binary, .gpu-bin/vsalab-v3.1) / new / old timed back to back on the same
# shapes so clock drift shows, the Triton peer on identical inputs in the
# new run, Wan 720P H40 at both list kinds, and Nsight Compute on v3.2/v4.
set -uo pipefail
B=.gpu-bin/vsalab
OLD=.gpu-bin/vsalab-v3.1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 120 $B run tests/gpu/sm90a_quick.lua > $OUT/quick.log 2>&1; echo "quick rc $?"
grep -E "error|launches|FAIL|all outputs" $OUT/quick.log | head
timeout 120 $B run tests/gpu/cases.lua sm90a-v4-det > $OUT/cases.log 2>&1; echo "cases rc $?"
grep -E "FAIL|checks passed" $OUT/cases.log | head
S="-a Sq=[4096,8192,16384,65536]"
timeout 90 $OLD run --db $OUT/old.db experiments/seed_sweep.lua $S kernels=sm90a,sm90a-det > $OUT/seed_old1.log 2>&1; echo "old1 rc $?"
timeout 240 $B run --db $OUT/results.db experiments/seed_sweep.lua $S -a "lists=[random,vsa:4]" \
  peers=triton kernels=sm90a,sm90a-det,sm90a-v4,sm90a-v4-det,triton > $OUT/seed.log 2>&1; echo "seed rc $?"
timeout 90 $OLD run --db $OUT/old.db experiments/seed_sweep.lua $S kernels=sm90a,sm90a-det > $OUT/seed_old2.log 2>&1; echo "old2 rc $?"
timeout 150 $B run --db $OUT/results.db experiments/wan720p.lua -a H=40 -a "density=[0.1,0.25]" \
  -a "lists=[random,vsa:4]" kernels=sm90a,sm90a-v4 > $OUT/wan.log 2>&1; echo "wan rc $?"
Q="SELECT run_id r, kernel, Sq, H, density d, json_extract(extra,'$.lists') lists, round(json_extract(extra,'$.sharing'),3) sh, round(ms_median,4) ms, round(tflops,1) tflops, passed ok, sm_clock_start_mhz c0, sm_clock_end_mhz c1 FROM result WHERE kernel <> 'invert' ORDER BY lists, H, density, Sq, kernel, run_id"
$B query --db $OUT/old.db "$Q"
$B query --db $OUT/results.db "$Q"
timeout 60 tests/gpu/run.sh $B profile > /dev/null 2>&1; echo "profile rc $?"
grep -E "bwd_.*kernel|Duration|L2 Cache Throughput|L1/TEX Cache|Compute \(SM\)|Issue Slots Busy" $OUT/profile.log | head -40
