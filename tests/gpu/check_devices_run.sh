#!/usr/bin/env bash
# check_devices_run.sh — `vsalab run --devices` on real GPUs.
#   tests/gpu/check_devices_run.sh [VSALAB_BINARY]
#
# On any GPU count (the one-GPU H200 too; tests/gpu/run.sh step `devices`):
#  1. the same sweep with --device 0 (one process) and --devices all: the
#     --devices run is one run row, finished, listing every GPU of
#     nvidia-smi -L (index, name, UUID); every row names a GPU whose UUID
#     nvidia-smi lists; both runs hold the same points (point hash, kernel,
#     seed); `vsalab compare` says no SLOW or MISSING (same kernels, same
#     GPUs); wall times printed.
#  2. VSALAB_FAULT_AT=2 under --devices all: only point 2 is lost (a
#     kernel='config' row "failed (worker died)" with cudaErrorIllegalAddress),
#     a fresh worker finishes the other points, the run ends failed with
#     the lost point named, integrity_check ok.
# With two GPUs or more, also:
#  3. both GPUs measured points; the wall time of --devices all against
#     --device 0; per GPU: rows, mean SM clock, throttled rows; per point
#     measured on GPU 1 in the --devices run, its time against GPU 0's in
#     the one-process run (whether the two GPUs measure alike).
# EXPERIMENT and SWEEP override the script and its arguments (default:
# experiments/seed_sweep.lua at 4k-32k, no reference; SWEEP="" runs its
# whole default sweep, 4k-131k).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
bin=${1:-build/vsalab}
out=${OUT:-gpu-out}
mkdir -p "$out"
sweep=${SWEEP-"-a Sq=[4096,8192,16384,32768] reference=0"}
exp=${EXPERIMENT:-experiments/seed_sweep.lua}
one=$out/devices_one.db all=$out/devices_all.db fault=$out/devices_fault.db
rm -f "$one"* "$all"* "$fault"*
status=0
fail() { echo "FAIL: $*"; status=1; }
q() { "$bin" query --db "$1" --format csv "$2" | tail -n +2; }

nvidia-smi -L | tee "$out/devices_gpus.txt"
ngpu=$(grep -c '^GPU ' "$out/devices_gpus.txt")
uuids=$(grep -o 'GPU-[0-9a-f-]*' "$out/devices_gpus.txt" | sort)
echo "GPUs: $ngpu"

# --- 1. one process, then --devices all ---------------------------------
t0=$(date +%s.%N)
"$bin" run --device 0 --db "$one" "$exp" $sweep > "$out/devices_one.log" 2>&1 || fail "--device 0 run exit $?"
t1=$(date +%s.%N)
"$bin" run --devices all --db "$all" "$exp" $sweep > "$out/devices_all.log" 2>&1 || fail "--devices all run exit $?"
t2=$(date +%s.%N)
wall_one=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }") wall_all=$(awk "BEGIN { printf \"%.1f\", $t2 - $t1 }")
echo "wall: --device 0 ${wall_one} s, --devices all (${ngpu} GPUs) ${wall_all} s"
grep '^devices: ' "$out/devices_all.log" | tail -3
[ "$(q "$all" "SELECT count(*) FROM run")" = 1 ] || fail "--devices all made more than one run row"
[ "$(q "$all" "SELECT status FROM run")" = finished ] || fail "--devices run status $(q "$all" "SELECT status FROM run")"
run_uuids=$(q "$all" "SELECT json_extract(value, '\$.uuid') FROM run, json_each(run.devices)" | sort)
[ "$run_uuids" = "$uuids" ] || fail "run.devices lists $run_uuids, nvidia-smi -L $uuids"
row_uuids=$(q "$all" "SELECT DISTINCT gpu_uuid FROM result" | sort)
for u in $row_uuids; do echo "$uuids" | grep -qx "$u" || fail "a row names GPU $u, not in nvidia-smi -L"; done
[ "$(q "$all" "SELECT count(*) FROM result WHERE gpu_uuid IS NULL OR gpu_name IS NULL OR gpu_index IS NULL")" = 0 ] \
  || fail "rows without their GPU"
[ "$(q "$one" "SELECT count(*) FROM result WHERE gpu_uuid IS NULL")" = 0 ] || fail "one-process rows without their GPU"
pts="SELECT point_hash, kernel, json_extract(extra, '\$.seed') FROM result WHERE kernel <> 'gemm_bf16' ORDER BY 1, 2, 3"
[ "$(q "$one" "$pts")" = "$(q "$all" "$pts")" ] || fail "the two runs hold different points: $(diff <(q "$one" "$pts") <(q "$all" "$pts"))"
echo "points: $(q "$all" "SELECT count(*) FROM result") rows in the --devices run, $(q "$one" "SELECT count(*) FROM result") in the one-process run"
"$bin" query --db "$all" "SELECT gpu_index, gpu_name, gpu_uuid, count(*) AS rows, round(avg(sm_clock_start_mhz)) AS sm_mhz, sum(throttled) AS throttled FROM result GROUP BY gpu_index ORDER BY gpu_index"
# The same kernels on the same GPU kind: nothing slower, nothing missing.
mkdir -p "$out/cmp"
rm -f "$out/cmp/both.db"*
"$bin" merge "$out/cmp/both.db" "$one" "$all" > /dev/null || fail "merge for compare"
"$bin" compare --db "$out/cmp/both.db" --floor-pct 5 1 2 | tee "$out/devices_compare.txt" | tail -3
[ "${PIPESTATUS[0]}" = 0 ] || fail "compare --device 0 vs --devices all: SLOW, NEW FAIL or MISSING (see $out/devices_compare.txt)"

# --- 2. a worker's GPU faults at point 2 ---------------------------------
VSALAB_FAULT_AT=2 "$bin" run --devices all --db "$fault" "$exp" $sweep > "$out/devices_fault.log" 2>&1
rc=$?
echo "faulting --devices run exit $rc (expect 1)"
[ "$rc" = 1 ] || fail "exit $rc"
grep '^devices: ' "$out/devices_fault.log" | tail -4
"$bin" query --db "$fault" "SELECT id, status, substr(error, 1, 200) AS error FROM run"
"$bin" query --db "$fault" "SELECT kernel, Sq, gpu_index, passed, substr(note, 1, 90) AS note FROM result ORDER BY id"
[ "$(q "$fault" "SELECT status FROM run")" = failed ] || fail "the run is not failed"
[ "$(q "$fault" "SELECT count(*) FROM result WHERE kernel = 'config' AND note LIKE 'failed (worker died)%' AND json_extract(extra, '\$.error') LIKE '%cudaErrorIllegalAddress%' AND json_extract(extra, '\$.point.Sq') = 8192")" = 1 ] \
  || fail "point 2 (Sq 8192) is not logged lost with the illegal-address error"
# Every other point measured: its backwards passed.
lost_ok=$(q "$fault" "SELECT count(DISTINCT Sq) FROM result WHERE kernel NOT IN ('config', 'invert', 'gemm_bf16') AND passed = 1 AND Sq <> 8192")
want=$(q "$one" "SELECT count(DISTINCT Sq) FROM result WHERE kernel NOT IN ('invert', 'gemm_bf16') AND Sq <> 8192")
[ "$lost_ok" = "$want" ] || fail "only $lost_ok of the $want other points measured after the fault"
[ "$(q "$fault" "PRAGMA integrity_check")" = ok ] || fail "integrity_check"

# --- 3. two GPUs or more --------------------------------------
if [ "$ngpu" -ge 2 ]; then
  echo "speed-up: $(awk "BEGIN { printf \"%.2f\", $wall_one / $wall_all }")x on $ngpu GPUs (ideal: ${ngpu}x, less the longest point)"
  [ "$(q "$all" "SELECT count(DISTINCT gpu_uuid) FROM result WHERE kernel <> 'gemm_bf16'")" -ge 2 ] || fail "one GPU measured every point"
  # Each point of the --devices run against the one-process run (GPU 0).
  "$bin" query --db "$out/cmp/both.db" "SELECT b.gpu_index AS gpu, b.kernel, b.Sq, round(a.ms_median, 4) AS gpu0_ms,
      round(b.ms_median, 4) AS ms, round(b.ms_median / a.ms_median, 3) AS ratio, b.sm_clock_start_mhz AS sm_mhz, b.throttled
    FROM result a JOIN result b ON a.point_hash = b.point_hash AND a.kernel = b.kernel AND a.run_id = 1 AND b.run_id = 2
    WHERE b.ms_median IS NOT NULL AND b.kernel <> 'gemm_bf16' ORDER BY b.gpu_index, b.kernel, b.Sq" | tee "$out/devices_pergpu.txt"
  "$bin" query --db "$out/cmp/both.db" "SELECT b.gpu_index AS gpu, count(*) AS points, round(avg(b.ms_median / a.ms_median), 4) AS mean_ratio,
      round(min(b.ms_median / a.ms_median), 4) AS min_ratio, round(max(b.ms_median / a.ms_median), 4) AS max_ratio
    FROM result a JOIN result b ON a.point_hash = b.point_hash AND a.kernel = b.kernel AND a.run_id = 1 AND b.run_id = 2
    WHERE b.ms_median IS NOT NULL AND b.kernel NOT IN ('gemm_bf16', 'invert') GROUP BY b.gpu_index"
  # The fault lost one point only, and the other GPU went on.
  [ "$(q "$fault" "SELECT count(DISTINCT gpu_uuid) FROM result WHERE kernel NOT IN ('config', 'gemm_bf16')")" -ge 2 ] \
    || fail "after the fault, not every GPU measured points"
fi
echo "devices proof: $([ $status = 0 ] && echo ok || echo FAILED)"
exit $status
