#!/usr/bin/env bash
# args_test.sh — scripts/slurm-sweep.sh checks its arguments before it
# submits anything. No Slurm: a fake sbatch on PATH records its calls (ctest
# slurm_sweep_args; tests/slurm/slurm_test.sh runs a real Slurm).
#
#   tests/slurm/args_test.sh [build/vsalab]
#
# Each bad command line must exit 2 with its message and no sbatch call; a
# good one submits the array and the merge job that waits for it.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
V=${1:-$root/build/vsalab}
[ -x "$V" ] || { echo "args_test: no vsalab at $V" >&2; exit 1; }
V=$(cd "$(dirname "$V")" && pwd)/$(basename "$V")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
cat > "$tmp/bin/sbatch" <<'SH'
#!/bin/sh
echo "$*" >> "$SBATCH_LOG"
echo 4711
SH
chmod +x "$tmp/bin/sbatch"
export SBATCH_LOG=$tmp/sbatch.log PATH=$tmp/bin:$PATH
sweep=$root/scripts/slurm-sweep.sh
smoke=$root/experiments/smoke.lua
failed=0
fail() { echo "args_test: FAIL: $*" >&2; failed=1; }
calls() { [ -f "$SBATCH_LOG" ] && wc -l < "$SBATCH_LOG" || echo 0; }

# expect_usage TEXT ARGS...: exit 2, TEXT on stderr, sbatch never called.
expect_usage() {
  local text=$1 err rc
  shift
  rm -f "$SBATCH_LOG"
  err=$("$sweep" --vsalab "$V" --out "$tmp/out" "$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" = 2 ] || fail "slurm-sweep.sh $*: exit $rc, not 2 ($err)"
  [[ "$err" == *"$text"* ]] || fail "slurm-sweep.sh $*: says '$err', not '$text'"
  [ "$(calls)" = 0 ] || fail "slurm-sweep.sh $*: called sbatch"
}

expect_usage "unknown option --bogus" --bogus 1 "$smoke"
expect_usage "unknown option --bogus" --bogus
expect_usage "unknown option -x" -x "$smoke"
expect_usage "--seed needs a value" --seed
expect_usage "--out needs a value" --out --shards 2 "$smoke"
expect_usage "--shards needs a value" "--shards"
expect_usage "--sbatch expects an sbatch option such as --partition=gpu, got '$smoke'" --sbatch "$smoke"
expect_usage "--seed expects an integer in [0, 2^48), got 'abc'" --seed abc "$smoke"
expect_usage "--timing expects hot, cold, graph or sustained, got 'warm'" --timing warm "$smoke"
expect_usage "--shards expects a count" --shards 0 "$smoke"
expect_usage "--db is set by this script" --db x.db "$smoke"
expect_usage "no script $tmp/none.lua" "$tmp/none.lua"
expect_usage "usage: slurm-sweep.sh" --seed 5
# The script's own arguments, checked by vsalab run --check on this node.
expect_usage "sweep: no axis 'foo'" "$smoke" -a foo=1
expect_usage "argument 'Sq': expected a multiple of 64" "$root/experiments/seed_sweep.lua" -a Sq=100
expect_usage "argument 'kernels': no backward 'nope'" "$root/experiments/seed_sweep.lua" kernels=nope
# DIR and the working directory go into the batch scripts: nothing there
# may break them or run as a command.
expect_usage "--out expects a path of letters" --out "$tmp/my results" "$smoke"
expect_usage "--out expects a path of letters" --out "$tmp/x\"\$(touch $tmp/pwned)\"" "$smoke"
[ ! -e "$tmp/pwned" ] || fail "an --out with \$(...) ran a command"
mkdir -p "$tmp/a dir"
(cd "$tmp/a dir" && expect_usage "run it from a directory whose path" "$smoke"; exit "$failed") || failed=1

# A script's file name becomes the default job name, written into an
# #SBATCH line: a newline there ran the rest as a command in every task
# and ended the #SBATCH block (no --array, --gres, --output); a space split
# the job name.
for bad in $'n\ntouch pwned\n.lua' 'a b.lua'; do
  cp "$smoke" "$tmp/$bad"
  "$sweep" --vsalab "$V" --out "$tmp/named" --dry-run "$tmp/$bad" > "$tmp/named.txt" 2>&1 ||
    fail "a script named $(printf %q "$bad") exited $?: $(cat "$tmp/named.txt")"
  # Every line of each header is an #SBATCH directive or the shebang.
  awk '/^# \/.*\.sbatch$/ {hdr = 1; next} /^#!/ {next} hdr && /^#SBATCH/ {next} hdr {hdr = 0; if ($0 !~ /^# /) print "bad: " $0}' \
    "$tmp/named.txt" | grep -q . && fail "a script named $(printf %q "$bad") broke the #SBATCH header: $(cat "$tmp/named.txt")"
  grep -q -- '--job-name=vsalab-[A-Za-z0-9._+-]*$' "$tmp/named.txt" ||
    fail "a script named $(printf %q "$bad") gave the job name $(grep -- --job-name "$tmp/named.txt")"
done

# An --out that holds an earlier sweep's shard DBs: the merge job would
# merge them in too.
mkdir -p "$tmp/out"
: > "$tmp/out/shard-7.db"
expect_usage "holds shard DBs of an earlier sweep (shard-7.db)" "$smoke"
rm -f "$tmp/out/shard-7.db"

# A good command line: the array, then the merge job waiting for it.
rm -f "$SBATCH_LOG"
out=$("$sweep" --vsalab "$V" --out "$tmp/good" --gres none --seed 5 --timing cold \
  --context k=v "$smoke" -a density=[0.5] 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "a good command line exited $rc: $out"
[ "$(calls)" = 2 ] || fail "a good command line made $(calls) sbatch calls, not 2"
grep -q -- "--dependency=afterok:4711" "$SBATCH_LOG" || fail "no merge job after the array: $(cat "$SBATCH_LOG")"
grep -q -- "--seed 5 --timing cold --context k=v" "$tmp/good/shard.sbatch" || fail "run options not in shard.sbatch"
# A whole-node sweep (--devices all) is checked and submitted too.
rm -f "$SBATCH_LOG"
out=$("$sweep" --vsalab "$V" --out "$tmp/node" --gres gpu:8 --devices all "$smoke" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "a --devices all sweep exited $rc: $out"
[ "$(calls)" = 2 ] || fail "a --devices all sweep made $(calls) sbatch calls, not 2"
grep -q -- "--devices all" "$tmp/node/shard.sbatch" || fail "--devices not in shard.sbatch"
# --dry-run submits nothing.
rm -f "$SBATCH_LOG"
"$sweep" --vsalab "$V" --out "$tmp/dry" --dry-run "$smoke" >/dev/null || fail "--dry-run failed"
[ "$(calls)" = 0 ] || fail "--dry-run called sbatch"

[ "$failed" = 0 ] && echo "args_test: ok"
exit "$failed"
