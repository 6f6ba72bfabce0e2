#!/usr/bin/env bash
# call_energy2.sh [BINARY] — session 12's second energy call: the sustained
# bench's GPU spec, then sustained rows (calls queued back to back) that
# split the energy a selected pair costs: sm90a, sm90a-v4 (two kv blocks a
# CTA: fewer Q/dO loads and dQ reduces) and Triton on random lists; sm90a
# with the dQ reduce ablated (VSALAB_ABLATE=no_dq_reduce: dq wrong, its rows
# fail their check, ms and watts kept); sm90a and sm90a-v4 on VSA-like lists
# (vsa:4, sharing ~0.45). Rows in $OUT/energy2.db.
set -uo pipefail
B=${1:-.gpu-bin/vsalab}
out=${OUT:-gpu-out}; mkdir -p "$out"
libs=$(dirname "$B")/lua
export LUA_PATH="$libs/share/?.lua;$libs/share/?/init.lua;;" LUA_CPATH="$libs/lib/?.so;;"
$B run tests/run_busted.lua --tags=gpu -o utfTerminal --filter "sustained" tests/gpu/gpu_spec.lua > "$out/spec.log" 2>&1
echo "gpu_spec sustained: exit $?"; tail -3 "$out/spec.log"
db="$out/energy2.db"; s="-a Sq=[4096,16384,65536]"
run() { env -u VSALAB_SM100_EMU "$@"; echo "$*: exit $?" | cut -c1-160; }
run $B run --timing sustained --db "$db" experiments/seed_sweep.lua peers=triton kernels=sm90a,sm90a-v4,triton $s > "$out/random.log" 2>&1
run env VSALAB_ABLATE=no_dq_reduce $B run --timing sustained --db "$db" experiments/seed_sweep.lua kernels=sm90a $s > "$out/ablate.log" 2>&1
run $B run --timing sustained --db "$db" experiments/seed_sweep.lua kernels=sm90a,sm90a-v4 -a "Sq=[16384,65536]" -a lists=vsa:4 > "$out/vsa.log" 2>&1
$B query --db "$db" "SELECT run_id AS run, kernel, Sq, json_extract(extra, '$.lists') AS lists, round(ms_median, 4) AS ms,
  round(10*64*64*128*pairs/(ms_median*1e-3)/1e12, 1) AS tflops, passed, samples AS n, round(samples*ms_median/3000.0, 2) AS busy,
  json_extract(extra, '$.capped_ms') AS capped_ms, json_extract(extra, '$.watts') AS watts,
  round(json_extract(extra, '$.watts') / (10*64*64*128*pairs/(ms_median*1e-3)/1e12), 3) AS pJ_per_flop,
  json_extract(extra, '$.sharing') AS sharing, sm_clock_end_mhz AS mhz_end
  FROM result WHERE kernel IN ('sm90a', 'sm90a-v4', 'triton') ORDER BY Sq, lists, run_id, kernel"
