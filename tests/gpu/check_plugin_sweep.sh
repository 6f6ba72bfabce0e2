#!/usr/bin/env bash
# check_plugin_sweep.sh — plug-in backends on the GPU (tests/gpu/run.sh plugins):
#  1. the example CUDA plug-in (build/libvsalab_example_cuda.so, or beside
#     the binary after tests/gpu/pack.sh) in seed_sweep beside sm90a: its
#     rows must pass the oracle, in hot and in graph timing;
#  2. a plug-in that faults the GPU (symbol cuda_example_fault) must end the
#     run 'failed' with cudaErrorIllegalAddress recorded, the rows before it
#     kept and the DB intact.
#   tests/gpu/check_plugin_sweep.sh [VSALAB_BINARY]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
unset VSALAB_SM100_EMU # the emulated sm100a (a correctness test) stays out of these sweeps
bin=${1:-build/vsalab}
lib=$(dirname "$bin")/libvsalab_example_cuda.so
[ -f "$lib" ] || lib=build/libvsalab_example_cuda.so
out=${OUT:-gpu-out}
mkdir -p "$out"
db=$out/plugin.db
rm -f "$db"*
status=0
sweep="-a Sq=[4096,8192] reference=0"
# The plug-in beside the default kernel only: the variants add time, not proof.
for m in hot graph; do
  "$bin" run --timing $m --db "$db" experiments/seed_sweep.lua $sweep plugin="$lib" \
    kernels=sm90a,vsalab_example_cuda > "$out/plugin.$m" 2>&1 || status=1
  tail -12 "$out/plugin.$m"
done
"$bin" query --db "$db" "SELECT run_id, kernel, Sq, mode, round(ms_median,4) AS ms, round(tflops,1) AS tflops, passed FROM result WHERE kernel IN ('sm90a', 'vsalab_example_cuda') ORDER BY run_id, Sq, kernel"
bad=$("$bin" query --db "$db" --format csv "SELECT count(*) FROM result WHERE kernel = 'vsalab_example_cuda' AND (passed IS NOT 1 OR tflops IS NULL)" | tail -1)
n=$("$bin" query --db "$db" --format csv "SELECT count(*) FROM result WHERE kernel = 'vsalab_example_cuda' AND mode = 'graph'" | tail -1)
echo "example plug-in rows failing: $bad (expect 0); graph-timed rows: $n (expect 2)"
[ "$bad" = 0 ] && [ "$n" = 2 ] || status=1

fdb=$out/plugin_fault.db
rm -f "$fdb"*
"$bin" run --db "$fdb" experiments/seed_sweep.lua $sweep plugin="$lib" plugin_symbol=cuda_example_fault > "$out/plugin_fault.log" 2>&1
rc=$?
echo "faulting plug-in run exit $rc (expect non-zero)"; tail -3 "$out/plugin_fault.log"
[ "$rc" -ne 0 ] || status=1
"$bin" query --db "$fdb" "SELECT id, status, substr(error, 1, 160) AS error FROM run"
"$bin" query --db "$fdb" "SELECT kernel, Sq, passed FROM result ORDER BY id"
"$bin" query --db "$fdb" --format csv "SELECT status || ':' || (error LIKE '%cudaErrorIllegalAddress%') || ':' || (SELECT count(*) FROM result WHERE kernel = 'sm90a') FROM run WHERE id = 1" | tail -1 | tee "$out/plugin_fault.txt"
grep -qE '^"?failed:1:[1-9]' "$out/plugin_fault.txt" || { echo "FAIL: the faulting run is not failed with the fault recorded and sm90a's row kept"; status=1; }
"$bin" query --db "$fdb" "PRAGMA integrity_check" | grep -qx "ok *" || { echo "FAIL: integrity_check"; status=1; }
exit $status
