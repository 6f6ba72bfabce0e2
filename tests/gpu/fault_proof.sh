#!/usr/bin/env bash
# fault_proof.sh — a sticky CUDA error mid-sweep (VSALAB_FAULT_AT=2 launches a
# kernel that stores to an unmapped address at point 2) must end the run
# 'failed' with the error recorded, keep point 1's rows, leave the DB intact
# (integrity_check ok) and usable by the next run.
#   tests/gpu/fault_proof.sh [VSALAB_BINARY]
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/vsalab}
out=${OUT:-gpu-out}
mkdir -p "$out"
db=$out/fault.db
rm -f "$db"*
sweep="-a Sq=[4096,8192,16384] reference=0"
VSALAB_FAULT_AT=2 "$bin" run --db "$db" experiments/seed_sweep.lua $sweep > "$out/fault1.log" 2>&1
echo "faulting run exit $? (expect non-zero); its last lines:"
tail -3 "$out/fault1.log"
"$bin" runs --db "$db"
"$bin" query --db "$db" "SELECT id, status, substr(error, 1, 160) AS error FROM run"
"$bin" query --db "$db" "SELECT run_id, kernel, Sq, passed FROM result ORDER BY id"
"$bin" query --db "$db" "PRAGMA integrity_check"
"$bin" run --db "$db" experiments/seed_sweep.lua -a Sq=4096 reference=0 > "$out/fault2.log" 2>&1
echo "next run on the same DB exit $? (expect 0)"
"$bin" runs --db "$db"
