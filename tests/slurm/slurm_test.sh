#!/usr/bin/env bash
# slurm_test.sh — scripts/slurm-sweep.sh against a REAL single-node Slurm
# (Debian's slurmctld, slurmd, slurm-client and munge), brought up and torn
# down here. Needs root (CI runs as root); installs the packages if missing.
#
#   tests/slurm/slurm_test.sh [build/vsalab]
#
# 1. Bring-up: munged as the munge user, a minimal slurm.conf (linuxproc,
#    task/none, cons_tres, kill_invalid_depend) in a temp dir on free ports,
#    two fake GPUs as GRES (character devices, so --gres=gpu:1 sets
#    CUDA_VISIBLE_DEVICES), slurmctld and slurmd started by hand.
# 2. A CPU sweep (tests/slurm/sweep.lua: the smoke experiment) as a 4-task
#    array plus the merge job: the merged DB must hold exactly the rows of a
#    single-process run of the same sweep (point hashes, kernels, seeds),
#    four shard runs of one sweep id, each with CUDA_VISIBLE_DEVICES set.
# 3. The same with shard 1 failing on purpose: the merge job must end
#    CANCELLED, no merged DB, and all four shard DBs intact (the failed one
#    with its rows, status failed).
# 4. A one-shard sweep cancelled (scancel) while it runs: its run ends
#    interrupted and its DB, every row kept, is still copied out.
# 5. Teardown by PID (never by name), temp dir removed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
V=$(cd "$(dirname "${1:-$root/build/vsalab}")" && pwd)/$(basename "${1:-$root/build/vsalab}")
[ -x "$V" ] || { echo "slurm_test: no vsalab at $V" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "slurm_test: needs root (it starts munged, slurmctld, slurmd)" >&2; exit 1; }
t0=$(date +%s%N)
since() { local ms=$((($(date +%s%N) - t0) / 1000000)); printf '%d.%d s' $((ms / 1000)) $((ms % 1000 / 100)); }
say() { echo "slurm_test: $*"; }

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
   || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=900 update -qq
  apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
fi

S=$(mktemp -d /tmp/vsalab-slurm.XXXXXX)
chmod 755 "$S"
started_munge=""
teardown() {
  set +e
  for f in "$S/slurmd.pid" "$S/slurmctld.pid" ${started_munge:+"$S/munged.pid"}; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null
    # Nothing may reap here: a zombie counts as gone.
    for _ in $(seq 50); do
      st=$(ps -o stat= -p "$pid" 2>/dev/null | tr -d ' ')
      [ -z "$st" ] || [ "${st#Z}" != "$st" ] && break
      sleep 0.1
    done
  done
  rm -rf "$S"
}
trap teardown EXIT

# --- bring-up -------------------------------------------------------------
H=$(hostname -s)
MEM=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
mkdir -p "$S/state" "$S/spool" "$S/fakegpu" "$S/out"
if [ ! -s /etc/munge/munge.key ]; then
  mungekey -c -k /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 600 /etc/munge/munge.key
fi
install -d -o munge -g munge /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  # Our own munged, its pid file in $S so teardown stops only it.
  chown munge "$S"
  runuser -u munge -- /usr/sbin/munged --pid-file="$S/munged.pid"
  started_munge=1
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
mknod "$S/fakegpu/nvidia0" c 195 0
mknod "$S/fakegpu/nvidia1" c 195 1
# Free-ish ports, so a Slurm already on this host is left alone.
port=$((20000 + RANDOM % 20000))
cat > "$S/slurm.conf" <<EOF
ClusterName=vsalabci
SlurmctldHost=$H
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
DependencyParameters=kill_invalid_depend
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
ReturnToService=2
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
GresTypes=gpu
NodeName=$H CPUs=$(nproc) RealMemory=$MEM Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
echo "NodeName=$H Name=gpu File=$S/fakegpu/nvidia[0-1]" > "$S/gres.conf"
export SLURM_CONF=$S/slurm.conf
slurmctld
slurmd
# The limits below only stop a test that failed: generous, as CI's host is
# a loaded 2-core machine.
for i in $(seq 480); do
  [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
  [ "$i" = 480 ] && { say "Slurm did not come up in 120 s"; tail -20 "$S/slurmctld.log" "$S/slurmd.log"; exit 1; }
  sleep 0.25
done
say "Slurm up on $H:$port ($(since))"

# --- helpers --------------------------------------------------------------
wait_jobs() { # ids...
  local ids; ids=$(IFS=,; echo "$*")
  for i in $(seq 2400); do
    [ -z "$(squeue -h -j "$ids" 2>/dev/null)" ] && return 0
    sleep 0.25
  done
  say "jobs $ids still queued after 600 s"; squeue; return 1
}
job_state() { scontrol show job "$1" | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2; }
q() { "$V" query --db "$1" --format csv "$2" | tail -n +2; }
fail() { say "FAIL: $*"; for f in "$S"/out*/logs/*; do echo "--- $f"; tail -15 "$f"; done; exit 1; }
args=(-a 'density=[0.125,0.25,0.375,0.5,0.625,0.75,0.875,1.0]')
rows_sql="SELECT point_hash, kernel, json_extract(extra, '\$.seed') FROM result ORDER BY 1, 2, 3"

# --- the reference: one process -----------------------------------------
(cd "$S" && "$V" run --db "$S/single.db" --seed 7 "$root/tests/slurm/sweep.lua" "${args[@]}" >/dev/null 2>&1) \
  || fail "the single-process run failed"
single=$(q "$S/single.db" "$rows_sql")
[ "$(echo "$single" | wc -l)" -ge 8 ] || fail "the single-process run logged too few rows: $single"

# --- 4 shards + merge -----------------------------------------------------
sub=$(cd "$S" && "$root/scripts/slurm-sweep.sh" --vsalab "$V" --out "$S/out" --shards 4 --seed 7 \
  "$root/tests/slurm/sweep.lua" "${args[@]}")
echo "$sub" | sed 's/^/  /'
jid=$(echo "$sub" | sed -n 's/^array job \([0-9]*\):.*/\1/p')
mid=$(echo "$sub" | sed -n 's/^merge job \([0-9]*\):.*/\1/p')
[ -n "$jid" ] && [ -n "$mid" ] || fail "no job ids printed"
echo "$sub" | grep -q "merged DB: $S/out/merged.db" || fail "the merged DB's path is not printed"
wait_jobs "$jid" "$mid"
[ "$(job_state "$mid")" = COMPLETED ] || fail "merge job $mid: $(job_state "$mid")"
[ -f "$S/out/merged.db" ] || fail "no merged DB"
merged=$(q "$S/out/merged.db" "$rows_sql")
[ "$merged" = "$single" ] || fail "the merged rows differ from the single-process run:
$(diff <(echo "$single") <(echo "$merged"))"
runs=$(q "$S/out/merged.db" "SELECT shard_index, shard_count, sweep_id, cuda_visible_devices, source_db FROM run ORDER BY shard_index")
[ "$(echo "$runs" | wc -l)" = 4 ] || fail "expected 4 shard runs: $runs"
[ "$(echo "$runs" | cut -d, -f3 | sort -u)" = "slurm-$jid" ] || fail "shards do not share the sweep id slurm-$jid: $runs"
[ "$(echo "$runs" | cut -d, -f1,2 | tr '\n' ' ')" = "0,4 1,4 2,4 3,4 " ] || fail "shards are not 0..3 of 4: $runs"
echo "$runs" | cut -d, -f4 | grep -qvx '[01]' && fail "CUDA_VISIBLE_DEVICES not set per task to a GPU: $runs"
[ "$(q "$S/out/merged.db" "SELECT count(DISTINCT source_db) FROM run")" = 4 ] || fail "provenance: $runs"
# runs shows the sweep as one logical run; merging again adds nothing.
[ "$("$V" runs --db "$S/out/merged.db" --format csv | tail -n +2 | wc -l)" = 1 ] || fail "runs lists the shards apart"
cp "$S/out/merged.db" "$S/again.db"
"$V" merge "$S/again.db" "$S"/out/shard-*.db >/dev/null
[ "$(q "$S/again.db" "SELECT count(*) FROM result")" = "$(echo "$merged" | wc -l)" ] || fail "re-merging added rows"
say "4 shards + merge: $(echo "$merged" | wc -l) rows = the single-process run, sweep slurm-$jid ($(since))"

# --- a failing shard: the merge is cancelled, shard DBs intact ------------
sub=$(cd "$S" && VSALAB_TEST_FAIL_SHARD=1 "$root/scripts/slurm-sweep.sh" --vsalab "$V" --out "$S/out2" \
  --shards 4 --seed 7 "$root/tests/slurm/sweep.lua" "${args[@]}")
jid=$(echo "$sub" | sed -n 's/^array job \([0-9]*\):.*/\1/p')
mid=$(echo "$sub" | sed -n 's/^merge job \([0-9]*\):.*/\1/p')
wait_jobs "$jid" "$mid"
[ "$(job_state "$mid")" = CANCELLED ] || fail "merge job $mid after a failed shard: $(job_state "$mid")"
[ ! -e "$S/out2/merged.db" ] || fail "a merged DB despite the failed shard"
n=0
for i in 0 1 2 3; do
  f="$S/out2/shard-$i.db"
  [ -f "$f" ] || fail "shard DB $i missing"
  [ "$(q "$f" "PRAGMA integrity_check")" = ok ] || fail "shard DB $i damaged"
  st=$(q "$f" "SELECT status FROM run")
  if [ "$i" = 1 ]; then [ "$st" = failed ] || fail "shard 1 status $st, expected failed"
  else [ "$st" = finished ] || fail "shard $i status $st"; fi
  n=$((n + $(q "$f" "SELECT count(*) FROM result")))
done
[ "$n" = "$(echo "$single" | wc -l)" ] || fail "the shard DBs hold $n rows, expected every row measured ($(echo "$single" | wc -l))"
say "failed shard: merge job CANCELLED, 4 shard DBs intact with all $n rows ($(since))"

# --- scancel of a running shard: its rows are copied out, run interrupted -
sub=$(cd "$S" && VSALAB_TEST_HOLD=1 "$root/scripts/slurm-sweep.sh" --vsalab "$V" --out "$S/out3" \
  --shards 1 --seed 7 "$root/tests/slurm/sweep.lua" "${args[@]}")
jid=$(echo "$sub" | sed -n 's/^array job \([0-9]*\):.*/\1/p')
mid=$(echo "$sub" | sed -n 's/^merge job \([0-9]*\):.*/\1/p')
for i in $(seq 1200); do
  grep -qs '^holding' "$S/out3/logs/shard-${jid}_0.out" && break
  [ "$i" = 1200 ] && fail "the held shard did not reach its hold in 300 s"
  sleep 0.25
done
scancel "$jid"
wait_jobs "$jid" "$mid"
f="$S/out3/shard-0.db"
[ -f "$f" ] || fail "the cancelled shard's DB was not copied out"
[ "$(q "$f" "SELECT status FROM run")" = interrupted ] || fail "cancelled shard: run status $(q "$f" "SELECT status FROM run")"
[ "$(q "$f" "SELECT count(*) FROM result")" = "$(echo "$single" | wc -l)" ] || fail "cancelled shard: rows lost"
[ "$(job_state "$mid")" = CANCELLED ] || fail "merge job after scancel: $(job_state "$mid")"
say "scancel: the shard's run is interrupted and its DB copied out with every row ($(since))"
say "ok"
