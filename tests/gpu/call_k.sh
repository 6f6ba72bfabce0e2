#!/usr/bin/env bash
# Device call K (session 8): v3.4, the fixed-point mode's exponents computed
# in the main kernel (the K/V statistics are blocks of the preprocess's own
# launch; nothing waits on them), timed against the v3.3 binary
# (.gpu-bin/vsalab-v3.3, built from 40a59f3) and Triton in one call:
# quick on the new build, both binaries' two modes with Triton from 4k to
# 65k, then each mode of each binary alone at 4k and 8k (three rounds,
# so the card's clock drift falls on all), the breakdown. That build was
# reverted (kernels/NOTES.md v3.4); run now, this times the kept one.
set -uo pipefail
B=.gpu-bin/vsalab O=.gpu-bin/vsalab-v3.3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
timeout 90 tests/gpu/run.sh $B quick > $OUT/quick_step.log 2>&1; echo "quick rc $?"
grep -E "FAIL|launches|all outputs|error" $OUT/quick.log | head
S="-a Sq=[4096,8192,16384,32768,65536]"
timeout 150 $B run --db $OUT/new.db experiments/seed_sweep.lua $S peers=triton \
  kernels=sm90a,sm90a-det,triton > $OUT/new1.log 2>&1; echo "new1 rc $?"
timeout 100 $O run --db $OUT/old.db experiments/seed_sweep.lua $S kernels=sm90a,sm90a-det > $OUT/old1.log 2>&1; echo "old1 rc $?"
T="-a Sq=[4096,8192] reference=0"
for r in 1 2 3; do
  for k in sm90a-det sm90a; do
    timeout 40 $B run --db $OUT/new.db experiments/seed_sweep.lua $T kernels=$k > /dev/null 2>&1 || echo "new $k rc $?"
    timeout 40 $O run --db $OUT/old.db experiments/seed_sweep.lua $T kernels=$k > /dev/null 2>&1 || echo "old $k rc $?"
  done
done
Q="SELECT run_id r, kernel, Sq, round(ms_median*1000,1) us, round(tflops,1) tflops, passed ok, sm_clock_start_mhz c0, (SELECT round(rel_l2,5) FROM result_error e WHERE e.result_id = result.id AND e.output = 'dq') dq_err FROM result WHERE kernel <> 'invert' ORDER BY Sq, kernel, run_id"
echo "== new"; $B query --db $OUT/new.db "$Q"
echo "== old"; $B query --db $OUT/old.db "$Q"
timeout 60 tests/gpu/run.sh $B breakdown > /dev/null 2>&1; echo "breakdown rc $?"
grep -E "^  [a-z].*\(|duration" $OUT/breakdown.log | sed -E 's/\(.*//' | paste - - | awk '{print $(NF-2), $NF}'
cd $OUT && tar czf logs.tgz *.log *.txt && rm -f *.log
