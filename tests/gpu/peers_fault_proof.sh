#!/usr/bin/env bash
# peers_fault_proof.sh — each installed peer (triton, cudnn_bsa, fa4) that
# crashes mid-run (VSALAB_PEER_CRASH_AT=2: its second call kills itself with
# SIGKILL after its library ran on the GPU) must leave the rows before it,
# fail only that point (its row says the peer was killed), let the run go on
# to the next point and close it (status 'finished', exit 0: a failed point is
# a failed row, as when a kernel fails its check; docs/cli.md, "When a point
# fails"), the DB intact.
#   tests/gpu/peers_fault_proof.sh [VSALAB_BINARY] [PEER...]
# A peer that is not installed (.peer/ or .peers/ missing) is reported and
# left out; the proof fails when none could run.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/vsalab}
shift || true
peers=${*:-triton cudnn_bsa fa4}
out=${OUT:-gpu-out}
mkdir -p "$out"
status=0 ran=0
for peer in $peers; do
  # fa4 takes 128-token blocks only: its points need the block axis.
  block=64
  [ "$peer" = fa4 ] && block=128
  db=$out/peer-fault-$peer.db calls=$out/peer-fault-$peer.calls
  rm -f "$db"* "$calls"
  VSALAB_PEER_CRASH_AT=2 VSALAB_PEER_CALLS=$calls env -u VSALAB_SM100_EMU "$bin" run --db "$db" \
    experiments/seed_sweep.lua -a "Sq=[4096,8192,16384]" -a "block=[$block]" kernels="$peer" peers="$peer" \
    > "$out/peer-fault-$peer.log" 2>&1
  rc=$?
  if [ "$rc" -eq 2 ]; then
    echo "$peer: not run (exit 2): $(tail -1 "$out/peer-fault-$peer.log")"
    continue
  fi
  ran=$((ran + 1))
  echo "$peer: crashing run exit $rc (expect 0); its last lines:"
  tail -3 "$out/peer-fault-$peer.log"
  "$bin" query --db "$db" "SELECT id, kernel, Sq, passed, substr(note, 1, 100) AS note FROM result WHERE kernel = '$peer' ORDER BY id"
  "$bin" query --db "$db" "PRAGMA integrity_check" | grep -q "^ok" || { echo "FAIL $peer: integrity_check"; status=1; }
  got=$("$bin" query --db "$db" --format csv "SELECT (SELECT status FROM run WHERE id = 1) || ':' ||
    (SELECT count(*) FROM result WHERE kernel = '$peer' AND Sq = 4096 AND passed = 1) || ':' ||
    (SELECT count(*) FROM result WHERE kernel = '$peer' AND Sq = 8192 AND passed = 0 AND (note LIKE '%killed by signal 9%' OR note LIKE '%status 137%')) || ':' ||
    (SELECT count(*) FROM result WHERE kernel = '$peer' AND Sq = 16384 AND passed = 1)" | tail -1 | tr -d '"')
  echo "$peer: status:point1 passed:point2 killed:point3 passed = $got"
  case $got in
    running:*) echo "FAIL $peer: the run was left running"; status=1 ;;
    finished:1:1:1) ;;
    *) echo "FAIL $peer: expected the point before the crash passed, the crash recorded, the point after it passed"; status=1 ;;
  esac
  [ "$rc" -eq 0 ] || { echo "FAIL $peer: exit $rc, expected 0 (the run finishes; the crash is its point's failed row)"; status=1; }
done
[ "$ran" -gt 0 ] || { echo "FAIL: no peer installed (tests/gpu/fetch_peer.sh, scripts/peers.sh install)"; status=1; }
exit $status
