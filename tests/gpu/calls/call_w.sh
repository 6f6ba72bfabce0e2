#!/usr/bin/env bash
# Device call W (session 9): the final tree (v3.6 kernels; the host after
# the helpers' hardening and run --check) on the GPU: quick, the compare,
# fault and devices proofs, graph-mode timing of the
# deterministic kernel (a programmatic dependent launch inside a CUDA
# graph), and run --check with a GPU present. Each step time-boxed.
set -uo pipefail
B=.gpu-bin/vsalab
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
OUT=$OUT timeout 300 tests/gpu/run.sh $B quick compare fault devices > $OUT/steps.log 2>&1; echo "steps rc $?"
grep -E "^=== .*: exit|FAIL|all outputs|launches" $OUT/steps.log | head -30
timeout 60 $B run --timing graph --db $OUT/graph.db experiments/seed_sweep.lua -a "Sq=[4096,16384]" kernels=sm90a-det,sm90a > $OUT/graph.log 2>&1; echo "graph rc $?"
$B query --db $OUT/graph.db "SELECT kernel, Sq, mode, round(ms_median*1000,1) us, round(tflops,1) tflops, passed ok FROM result WHERE kernel LIKE 'sm90a%' ORDER BY kernel, Sq"
timeout 30 $B run --check --db $OUT/check.db experiments/wan720p.lua -a H=40 > $OUT/check.log 2>&1; echo "check rc $? (db: $(ls $OUT/check.db 2>/dev/null || echo none))"
tail -1 $OUT/check.log
cd $OUT && tar czf logs.tgz *.log *.txt 2>/dev/null; rm -f *.log
