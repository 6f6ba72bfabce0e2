#!/usr/bin/env bash
# Device calls O and P (session 8), the kept v3.4 build (P: after the
# review mends): call_l.sh's timings against v3.3, then compute-sanitizer
# on every backward whose preprocess changed, the emulated sm100a, CASES on
# sm90a-det, and both modes beside Triton (.peer) from 4k to 65k.
# Session 9 (v3.5, calls S on): OLD=.gpu-bin/vsalab-v3.4 bash tests/gpu/calls/call_o.sh
set -uo pipefail
B=.gpu-bin/vsalab
bash tests/gpu/calls/call_l.sh
bash tests/gpu/fixed_point_checks.sh $B
timeout 150 $B run --db $OUT/peers.db experiments/seed_sweep.lua -a "Sq=[4096,8192,16384,32768,65536]" \
  peers=triton kernels=sm90a,sm90a-det,triton > $OUT/peers.log 2>&1; echo "peers rc $?"
$B query --db $OUT/peers.db "SELECT kernel, Sq, round(ms_median*1000,1) us, round(tflops,1) tflops, passed ok, sm_clock_start_mhz c0, (SELECT round(rel_l2,5) FROM result_error e WHERE e.result_id = result.id AND e.output = 'dq') dq_err FROM result WHERE kernel IN ('sm90a', 'sm90a-det', 'triton') ORDER BY Sq, kernel"
cd $OUT && tar czf logs.tgz *.log *.txt && rm -f *.log
