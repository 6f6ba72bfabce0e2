#!/usr/bin/env bash
# check_fault_recovery.sh — (tests/gpu/run.sh fault) a sticky CUDA error mid-sweep (VSALAB_FAULT_AT=2 launches a
# kernel that stores to an unmapped address at point 2) must end the run
# 'failed' with the error recorded, keep point 1's rows, leave the DB intact
# (integrity_check ok) and usable by the next run.
#   tests/gpu/check_fault_recovery.sh [VSALAB_BINARY]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
bin=${1:-build/vsalab}
out=${OUT:-gpu-out}
mkdir -p "$out"
db=$out/fault.db
rm -f "$db"*
sweep="-a Sq=[4096,8192,16384] reference=0"
status=0
VSALAB_FAULT_AT=2 "$bin" run --db "$db" experiments/seed_sweep.lua $sweep > "$out/fault1.log" 2>&1
rc=$?
echo "faulting run exit $rc (expect non-zero); its last lines:"
[ "$rc" -ne 0 ] || status=1
tail -3 "$out/fault1.log"
"$bin" runs --db "$db"
"$bin" query --db "$db" "SELECT id, status, substr(error, 1, 160) AS error FROM run"
"$bin" query --db "$db" "SELECT run_id, kernel, Sq, passed FROM result ORDER BY id"
"$bin" query --db "$db" "PRAGMA integrity_check" | tee "$out/fault_integrity.txt"
grep -qx "ok *" "$out/fault_integrity.txt" || { echo "FAIL: integrity_check"; status=1; }
"$bin" query --db "$db" --format csv "SELECT status || ':' || (error LIKE '%cudaErrorIllegalAddress%') || ':' || (SELECT count(*) FROM result WHERE run_id = 1 AND Sq = 4096) FROM run WHERE id = 1" | tail -1 | tee "$out/fault_run1.txt"
grep -qE '^"?failed:1:[1-9]' "$out/fault_run1.txt" || { echo "FAIL: run 1 is not failed with the fault recorded and point 1 kept"; status=1; }
"$bin" run --db "$db" experiments/seed_sweep.lua -a Sq=4096 reference=0 > "$out/fault2.log" 2>&1
rc=$?
echo "next run on the same DB exit $rc (expect 0)"
[ "$rc" -eq 0 ] || status=1
"$bin" runs --db "$db"
exit $status
