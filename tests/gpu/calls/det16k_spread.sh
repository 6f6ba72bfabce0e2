#!/usr/bin/env bash
# det16k_spread.sh [BINARY] — the same seed_sweep point (16k, seed 1234:
# identical inputs and allocation sequence) in 8 separate processes,
# sm90a and sm90a-det each, with what NVML saw during each timed burst:
# median, min, max, clocks at either end, the time a power or thermal limit
# held the clocks down (capped_ms) and the bursts retaken for it. Session 11 found sm90a-det's time here varying by process
# (1.49-1.64 ms) with the clocks reading 1980 MHz at both ends
# (kernels/NOTES.md, "Timing under the power cap").
set -uo pipefail
B=${1:-.gpu-bin/vsalab}
out=${OUT:-gpu-out}; mkdir -p "$out"
rm -f "$out"/spread.db*
for i in $(seq 8); do
  timeout 60 $B run --db $out/spread.db experiments/seed_sweep.lua -a Sq=16384 reference=0 \
    kernels=sm90a,sm90a-det > /dev/null 2>&1 || echo "process $i rc $?"
done
$B query --db $out/spread.db "SELECT run_id r, kernel, round(ms_median*1000,1) med, round(ms_min*1000,1) mn,
  round(ms_max*1000,1) mx, samples n, sm_clock_start_mhz c0, sm_clock_end_mhz c1, throttled thr,
  json_extract(extra, '$.capped_ms') capped_ms, json_extract(extra, '$.cap_retries') retries FROM result WHERE kernel LIKE 'sm90a%' ORDER BY kernel, run_id"
