#!/usr/bin/env bash
# Device calls L–O (session 8): a v3.4 build against the v3.3 binary
# (.gpu-bin/vsalab-v3.3, built from 40a59f3). L–N timed the exponents
# computed in the v3 main kernel (reverted, kernels/NOTES.md v3.4); O, via
# call_o.sh, the kept build (a row-exponent launch after the merged
# preprocess). quick on the new build; both modes of both binaries alone in
# turn at 4k and 8k, three rounds; 16k, 32k, 65k once each (clock drift at
# long shapes); the breakdown. OLD names another previous binary (session
# 9: the v3.4 build of e675f86 against v3.5).
set -uo pipefail
B=.gpu-bin/vsalab O=${OLD:-.gpu-bin/vsalab-v3.3} # OLD: the previous binary
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
timeout 90 tests/gpu/run.sh $B quick > $OUT/quick_step.log 2>&1; echo "quick rc $?"
grep -E "FAIL|launches|all outputs|error" $OUT/quick.log | head
T="-a Sq=[4096,8192]"
for r in 1 2 3; do
  for k in sm90a-det sm90a; do
    timeout 40 $B run --db $OUT/new.db experiments/seed_sweep.lua $T kernels=$k > /dev/null 2>&1 || echo "new $k rc $?"
    timeout 40 $O run --db $OUT/old.db experiments/seed_sweep.lua $T kernels=$k > /dev/null 2>&1 || echo "old $k rc $?"
  done
done
for S in 16384 32768 65536; do
  for k in sm90a-det sm90a; do
    timeout 60 $B run --db $OUT/new.db experiments/seed_sweep.lua -a Sq=$S kernels=$k > /dev/null 2>&1 || echo "new $k $S rc $?"
    timeout 60 $O run --db $OUT/old.db experiments/seed_sweep.lua -a Sq=$S kernels=$k > /dev/null 2>&1 || echo "old $k $S rc $?"
  done
done
Q="SELECT run_id r, kernel, Sq, round(ms_median*1000,1) us, round(tflops,1) tflops, passed ok, sm_clock_start_mhz c0, sm_clock_end_mhz c1, (SELECT round(rel_l2,5) FROM result_error e WHERE e.result_id = result.id AND e.output = 'dq') dq_err FROM result WHERE kernel NOT IN ('invert', 'gemm_bf16') ORDER BY Sq, kernel, run_id"
echo "== new"; $B query --db $OUT/new.db "$Q"
echo "== old"; $B query --db $OUT/old.db "$Q"
timeout 60 tests/gpu/run.sh $B breakdown > /dev/null 2>&1; echo "breakdown rc $?"
awk '/Context/{n=$0; sub(/\(.*/,"",n); sub(/.*::/,"",n)} /gpu__time_duration/{print n, $NF}' $OUT/breakdown.log
