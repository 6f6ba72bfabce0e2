#!/usr/bin/env bash
# One device call for issue 13's v3.2/v4 step: correctness of both on small
# shapes and every CASES case, then one timed sweep with the previous
# binary's v3.1 (.gpu-bin/vsalab-v3.1, when carried), v3.2, v4 and the
# Triton peer on identical inputs, random and VSA-like lists.
set -uo pipefail
B=.gpu-bin/vsalab
OLD=.gpu-bin/vsalab-v3.1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 120 $B run tests/gpu/sm90a_quick.lua > $OUT/quick.log 2>&1; echo "quick rc $?"
grep -E "error|v4|launches|FAIL" $OUT/quick.log | head -24
timeout 200 $B run tests/gpu/cases.lua sm90a-v4-det sm90a-v4 > $OUT/cases.log 2>&1; echo "cases rc $?"
grep -E "FAIL|checks passed" $OUT/cases.log | head -20
S="-a Sq=[4096,8192,16384,65536]"
K="kernels=sm90a,sm90a-det,sm90a-v4,sm90a-v4-det"
if [ -x $OLD ]; then
  timeout 120 $OLD run --db $OUT/old.db experiments/seed_sweep.lua $S kernels=sm90a,sm90a-det > $OUT/seed_old.log 2>&1; echo "seed old rc $?"
fi
timeout 300 $B run --db $OUT/results.db experiments/seed_sweep.lua $S -a "lists=[random,vsa:4]" \
  peers=triton $K,triton > $OUT/seed.log 2>&1; echo "seed rc $?"
timeout 200 $B run --db $OUT/results.db experiments/wan720p.lua -a H=40 -a "density=[0.1,0.25]" \
  -a "lists=[random,vsa:4]" kernels=sm90a,sm90a-v4 > $OUT/wan.log 2>&1; echo "wan rc $?"
Q="SELECT kernel, Sq, H, density, json_extract(extra,'$.lists') lists, round(json_extract(extra,'$.sharing'),3) sh, round(ms_median,4) ms, round(tflops,1) tflops, passed, samples FROM result WHERE kernel <> 'invert' ORDER BY lists, H, density, Sq, kernel"
[ -f $OUT/old.db ] && $B query --db $OUT/old.db "$Q"
$B query --db $OUT/results.db "$Q"
