#!/usr/bin/env bash
# call_energy.sh [BINARY] — session 12's energy call: sm90a, sm90a-det and FastVideo's Triton backward
# (peers=triton; carry .peer) on the same inputs, burst (hot) and sustained,
# B1 H8 25% random lists and Wan 720P H40 10% / 25%, then cuDNN's dense
# backward sustained (dense_energy.py). Rows in $OUT/energy.db; the summary
# query at the end gives TFLOPS, watts and pJ per FLOP.
set -uo pipefail
B=${1:-.gpu-bin/vsalab}
out=${OUT:-gpu-out}; mkdir -p "$out"
k=kernels=sm90a,sm90a-det,triton
for t in hot sustained; do
  env -u VSALAB_SM100_EMU $B run --timing $t --db "$out/energy.db" experiments/seed_sweep.lua peers=triton $k \
    -a "Sq=[4096,16384,65536,131072]" > "$out/sweep_$t.log" 2>&1; echo "seed_sweep $t: exit $?"
  env -u VSALAB_SM100_EMU $B run --timing $t --db "$out/energy.db" experiments/wan720p.lua peers=triton $k \
    -a H=40 -a "density=[0.1,0.25]" > "$out/wan_$t.log" 2>&1; echo "wan720p $t: exit $?"
done
python3 tests/gpu/calls/dense_energy.py 16384 65536 2>&1 | tee "$out/dense.csv"
$B query --db "$out/energy.db" "SELECT experiment AS exp, kernel, H, Sq, density AS d, mode, round(ms_median, 4) AS ms,
  round(tflops, 1) AS tflops, samples AS n, throttled AS thr, json_extract(extra, '$.capped_ms') AS capped_ms,
  json_extract(extra, '$.watts') AS watts,
  round(json_extract(extra, '$.watts') / tflops, 3) AS pJ_per_flop, sm_clock_end_mhz AS mhz_end
  FROM result WHERE kernel IN ('sm90a', 'sm90a-det', 'triton') ORDER BY experiment, H, Sq, density, mode, kernel"
