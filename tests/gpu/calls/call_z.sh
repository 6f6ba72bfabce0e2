#!/usr/bin/env bash
# Device call Z (session 13): the merged tree (both helpers' passes) on the
# GPU: run.sh quick, the quick GPU specs (all but the CASES file), then
# sm90a, sm90a-det and FastVideo's Triton backward (peers=triton, .peer
# carried) on identical inputs at 4k and 16k, hot, and 16k sustained.
# Logs under $OUT.
set -uo pipefail
B=.gpu-bin/vsalab
export LUA_PATH=".gpu-bin/lua/share/?.lua;.gpu-bin/lua/share/?/init.lua;;" LUA_CPATH=".gpu-bin/lua/lib/?.so;;"
export VSALAB_PLUGIN_DIR=.gpu-bin # the example plug-ins plugin_spec loads (run.sh sets it too)
OUT=$OUT/r timeout 60 tests/gpu/run.sh $B quick > $OUT/quick.log 2>&1; echo "quick rc $?"
timeout 150 $B run tests/run_busted.lua --tags=gpu -o utfTerminal tests/gpu/gpu_spec.lua tests/gpu/bench_spec.lua \
  tests/gpu/sm90a_spec.lua tests/gpu/vsa_lists_spec.lua tests/gpu/plugin_spec.lua > $OUT/specs.log 2>&1
echo "specs rc $?"; grep -E "successes|Failure" $OUT/specs.log | head -6
db=$OUT/peers.db
timeout 200 $B run --db $db experiments/seed_sweep.lua peers=triton kernels=sm90a,sm90a-det,triton \
  -a "Sq=[4096,16384]" > $OUT/hot.log 2>&1; echo "hot rc $?"
timeout 100 $B run --timing sustained --db $db experiments/seed_sweep.lua peers=triton kernels=sm90a,triton \
  -a "Sq=[16384]" > $OUT/sustained.log 2>&1; echo "sustained rc $?"
$B query --db $db "SELECT r.run_id, r.kernel, r.Sq, r.mode, round(r.tflops, 1) AS tflops, r.passed, r.samples,
  e.rel_l2 AS dq_rel_l2, r.sm_clock_end_mhz AS mhz, round(json_extract(r.extra, '$.watts')) AS watts
  FROM result r LEFT JOIN result_error e ON e.result_id = r.id AND e.output = 'dq'
  WHERE r.kernel <> 'invert' ORDER BY r.run_id, r.Sq, r.kernel"
$B query --db $db "SELECT run_id, Sq, mode, samples, json_extract(extra, '$.stop') AS stop FROM result
  WHERE kernel = 'invert' ORDER BY run_id, Sq"
rm -rf $OUT/r
