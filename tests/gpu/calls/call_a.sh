#!/usr/bin/env bash
# One device call: sm90a (incl. the fixed-point deterministic mode) and the
# emulated sm100a backward, their CASES, sanitizers, and a seed sweep with
# the Triton peer timed in the same call.
set -uo pipefail
B=.gpu-bin/vsalab
export VSALAB_SM100_EMU=1
tests/gpu/run.sh $B quick sm100emu > $OUT/quick_emu.log 2>&1; echo "quick+sm100emu rc $?"
grep -E "v3-det|launches|sm100a-emu|rung|ladder|checks passed|FAIL" $OUT/quick_emu.log | tail -20
timeout 300 $B run tests/gpu/cases.lua sm90a sm90a-det > $OUT/cases90.log 2>&1; echo "cases90 rc $?"
grep -E "FAIL|checks passed" $OUT/cases90.log | tail -12
timeout 300 tests/gpu/run.sh $B sanitize > $OUT/sanitize_all.log 2>&1; echo "sanitize rc $?"
grep -E "ERROR SUMMARY|pass|FAIL" $OUT/sanitize_all.log $OUT/sanitize.* | tail -20
$B run --db $OUT/results.db experiments/seed_sweep.lua -a "Sq=[4096,16384,65536]" > $OUT/seed.log 2>&1; echo "seed rc $?"
PYTHONUNBUFFERED=1 timeout 200 python3 tests/gpu/triton_peer.py --shapes seed --tokens 4096,16384,65536 --skip-anchors > $OUT/triton.log 2>&1; echo "triton rc $?"
$B query --db $OUT/results.db "SELECT kernel, Sq, round(ms_median,4) ms, round(tflops,1) tflops, passed, samples FROM result ORDER BY Sq, kernel"
grep -E "^block_sparse|^shape|bwd" $OUT/triton.log | head -12
