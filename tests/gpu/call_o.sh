#!/usr/bin/env bash
# Device calls O and P (session 8), the kept v3.4 build (P: after the
# review mends): call_l.sh's timings against v3.3, then compute-sanitizer
# on every backward whose preprocess changed, the emulated sm100a, CASES on
# sm90a-det, and both modes beside Triton (.peer) from 4k to 65k.
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
timeout 150 $B run --db $OUT/peers.db experiments/seed_sweep.lua -a "Sq=[4096,8192,16384,32768,65536]" \
  peers=triton kernels=sm90a,sm90a-det,triton > $OUT/peers.log 2>&1; echo "peers rc $?"
$B query --db $OUT/peers.db "SELECT kernel, Sq, round(ms_median*1000,1) us, round(tflops,1) tflops, passed ok, sm_clock_start_mhz c0, (SELECT round(rel_l2,5) FROM result_error e WHERE e.result_id = result.id AND e.output = 'dq') dq_err FROM result WHERE kernel IN ('sm90a', 'sm90a-det', 'triton') ORDER BY Sq, kernel"
cd $OUT && tar czf logs.tgz *.log *.txt && rm -f *.log
