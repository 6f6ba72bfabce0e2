#!/usr/bin/env bash
# run_sh_test.sh — tests/gpu/run.sh's own logic on a machine without a GPU
# (ctest gpu_run_sh): a fake vsalab, nvidia-smi, cuobjdump and
# compute-sanitizer on PATH stand in for the GPU host. Checks the step
# list, --help, --dry-run of every step, usage errors (exit 2), the
# summary's lines per spec file and per step, and the exit status when a
# spec fails, crashes, hangs past CHECK_TIMEOUT or ends without its plan,
# when quick fails (the run stops), and when a step cannot run.
#   tests/gpu/run_sh_test.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runner=$here/run.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# --- the fakes --------------------------------------------------------------
mkdir -p "$tmp/bin" "$tmp/gpu"
cat > "$tmp/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case "$*" in
  -L) echo "GPU 0: Fake H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *noheader*) echo "Fake H200" ;;
  *) printf 'name, driver_version\nFake H200, 0\n' ;;
esac
EOF
printf '#!/bin/sh\nexit 0\n' > "$tmp/bin/cuobjdump"
# compute-sanitizer: runs the program it watches (after its options).
cat > "$tmp/bin/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift 2; done
exec "$@"
EOF
printf '#!/bin/sh\nexit 0\n' > "$tmp/gpu/tcgen05_ladder_emu"
# vsalab: TAP for spec files (FAKE_FAIL, FAKE_CRASH, FAKE_NOPLAN, FAKE_HANG
# name the spec file that misbehaves), backend lists, DB answers that make
# the plug-in and row checks pass.
cat > "$tmp/gpu/vsalab" <<'EOF'
#!/usr/bin/env bash
echo "vsalab $*" >> "$FAKE_CALLS"
[ -z "${VSALAB_CASES_BACKENDS:-}" ] ||
  echo "VSALAB_CASES_BACKENDS=$VSALAB_CASES_BACKENDS VSALAB_CASES_SKIP=${VSALAB_CASES_SKIP:-} VSALAB_CASES_ONLY=${VSALAB_CASES_ONLY:-} " >> "$FAKE_CALLS.env"
if [ "$1" = query ]; then
  sql=${*: -1}
  echo value
  case $sql in
    *integrity_check*) echo ok ;;
    *"status ||"*) echo "failed:1:1" ;;
    *"mode = 'graph'"*) echo 2 ;;
    *"passed IS NOT NULL"*) echo 5 ;;
    *"passed = 1"*) echo 3 ;;
    *) echo 0 ;;
  esac
  exit 0
fi
[ "$1" = run ] || exit 0
shift
while [ "${1#-}" != "$1" ]; do case $1 in --db|--timing) shift 2 ;; *) shift ;; esac; done
script=$1
shift
case $script in
  tests/run_busted.lua)
    spec=$(basename "${*: -1}")
    case $spec in
      "${FAKE_FAIL:-}") printf 'ok 1 - one\nnot ok 2 - two\n# Failure message: boom\n1..2\n'; exit 1 ;;
      "${FAKE_CRASH:-}") printf 'ok 1 - one\n'; exit 139 ;;
      "${FAKE_NOPLAN:-}") printf 'ok 1 - one\n'; exit 0 ;;
      "${FAKE_HANG:-}") sleep 30; exit 0 ;;
    esac
    printf 'ok 1 - %sone\nok 2 - two\nok 3 - # SKIP pending\n1..3\n' "${VSALAB_CASES_BACKENDS:+$VSALAB_CASES_BACKENDS }" ;;
  tests/gpu/list_backends.lua)
    case $1 in
      default) printf 'reference\nfakegpu\n' ;;
      dq-modes) printf 'fakegpu\nfakegpu-fp32\n' ;;
      emulated|emulated-all) [ "${VSALAB_SM100_EMU:-}" != 1 ] || echo fakeemu ;;
      all) printf 'reference\nfakegpu\nfakegpu-fp32\n' ;;
    esac ;;
  tests/gpu/sm90a_quick.lua) exit "${FAKE_QUICK_RC:-0}" ;;
  experiments/seed_sweep.lua) case "$*" in *plugin_symbol=*) exit 1 ;; esac ;;
esac
exit 0
EOF
chmod +x "$tmp/bin/"* "$tmp/gpu/"*
fake=$tmp/gpu/vsalab
export FAKE_CALLS=$tmp/calls.txt
export PEER_DIR=$tmp/no-peer
gpu_path=$tmp/bin:$PATH
nogpu_path=$PATH
unset OLD EMU_CASES_SKIP EMU_LAUNCHES_SCALE CHECK_TIMEOUT JOBS

# run_suite NAME [VAR=VALUE...] -- ARGS...: run.sh with the fakes, output in
# $tmp/NAME.txt, OUT=$tmp/NAME; sets rc.
run_suite() {
  local name=$1
  shift
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  rm -rf "${tmp:?}/$name"
  env PATH="$gpu_path" OUT="$tmp/$name" "${vars[@]}" "$runner" "$@" > "$tmp/$name.txt" 2>&1
  rc=$?
}
has() { grep -qE -- "$2" "$tmp/$1.txt" || fail "$1: no line matching '$2'"; }
hasnt() { ! grep -qE -- "$2" "$tmp/$1.txt" || fail "$1: a line matches '$2'"; }
want_rc() { [ "$rc" = "$2" ] || { fail "$1: exit $rc, expected $2"; tail -20 "$tmp/$1.txt"; }; }

# --- the step list, --help, --dry-run ---------------------------------------
"$runner" --list > "$tmp/list.txt" || fail "--list exit $?"
steps=$(awk 'NR > 1 { print ($1 == "*" || $1 == "h") ? $2 : $1 }' "$tmp/list.txt")
[ "$(echo "$steps" | wc -l)" -ge 20 ] || fail "--list names $(echo "$steps" | wc -l) steps"
for s in $steps; do
  grep -q "^step_${s//-/_}()" "$runner" || fail "step $s has no step_${s//-/_} function"
done
for s in quick specs sanitize sm100emu plugins peers; do
  grep -qE "^  \* $s " "$tmp/list.txt" || fail "--list does not mark $s as in all"
done
"$runner" --help > "$tmp/help.txt" || fail "--help exit $?"
grep -q "^usage: tests/gpu/run.sh" "$tmp/help.txt" || fail "--help has no usage line"
# A dry run of every step needs no GPU and prints each step's checks.
# shellcheck disable=SC2086 # one word a step
PATH=$nogpu_path OLD=/bin/true "$runner" --dry-run "$fake" $steps > "$tmp/dry.txt" 2>&1 || fail "--dry-run exit $?"
for s in $steps; do grep -qx "=== $s" "$tmp/dry.txt" || fail "--dry-run did not show step $s"; done
grep -q "cases.lua --skip=12 --launches-scale=0.1" "$tmp/dry.txt" \
  || fail "--dry-run: sm100emu does not show the emulated CASES subset"
grep -q "spec cases_spec.lua:<default> (side by side" "$tmp/dry.txt" \
  || fail "--dry-run: the CASES specs are not shown side by side"
[ ! -e "$tmp/calls.txt" ] || fail "--dry-run ran vsalab: $(cat "$tmp/calls.txt")"
grep -q "seed_sweep.lua -a Sq=\[16384,65536\] -a block=\[64\]" "$tmp/dry.txt" \
  || fail "--dry-run: the energy step does not run block 64 by default"
PATH=$nogpu_path ENERGY_BLOCK=128 "$runner" --dry-run "$fake" energy > "$tmp/dry128.txt" 2>&1 \
  || fail "--dry-run energy at ENERGY_BLOCK=128: exit $?"
[ "$(grep -c -- "-a block=\[128\]" "$tmp/dry128.txt")" = 5 ] \
  || fail "--dry-run: ENERGY_BLOCK=128 does not reach the energy step's five runs"

# --- usage errors and no GPU: exit 2, nothing run ---------------------------
run_suite unknown -- "$fake" quick nosuchstep
want_rc unknown 2
has unknown "no step or group 'nosuchstep'"
[ ! -e "$tmp/unknown/summary.txt" ] || fail "unknown step: a summary was written"
run_suite badopt -- --frobnicate
want_rc badopt 2
run_suite badjobs JOBS=x -- "$fake" quick
want_rc badjobs 2
has badjobs "JOBS must be a whole number"
run_suite badblock ENERGY_BLOCK=96 -- "$fake" energy
want_rc badblock 2
has badblock "ENERGY_BLOCK must be 64 or 128, got '96'"
rm -rf "$tmp/nogpu"
PATH=$nogpu_path OUT=$tmp/nogpu "$runner" "$fake" quick > "$tmp/nogpu.txt" 2>&1
rc=$?
want_rc nogpu 2
has nogpu "no NVIDIA GPU or driver found"
run_suite nobin -- "$tmp/none/vsalab" quick
want_rc nobin 2
# A mistyped step first is no binary: exit 2 naming it, in a dry run too
# (it printed every step of all and exited 0).
PATH=$nogpu_path "$runner" --dry-run quik > "$tmp/typo.txt" 2>&1
rc=$?
want_rc typo 2
has typo "no step or group 'quik'"
PATH=$nogpu_path "$runner" --dry-run "$tmp/none/vsalab" quick > "$tmp/drynobin.txt" 2>&1
rc=$?
want_rc drynobin 2
has drynobin "no vsalab binary at $tmp/none/vsalab"

# --- green: a line per spec file and per step, exit 0 -----------------------
run_suite green -- "$fake" quick specs
want_rc green 0
has green "^spec +gpu_spec.lua +passed +2 +failed +0 +[0-9]+ s +\(1 pending\)"
has green "^spec +cases_spec.lua:reference +passed +2 +failed +0"
has green "^spec +cases_spec.lua:fakegpu +passed +2 +failed +0"
has green "^spec +cases_spec.lua case 12 +passed +2 +failed +0"
has green "^step +quick +passed +3 +failed +0"
has green "^step +specs +passed +16 +failed +0"
has green "^total: 2 steps, 0 failed or not run"
hasnt green "plugin_spec"
grep -q "^ok 1 - fakegpu one" "$tmp/green/specs.log" || fail "green: specs.log lacks the cases output"
grep -q "VSALAB_CASES_BACKENDS=fakegpu VSALAB_CASES_SKIP=12 " "$tmp/calls.txt.env" \
  || fail "green: CASES did not run without case 12 side by side"
grep -q "VSALAB_CASES_BACKENDS=reference,fakegpu VSALAB_CASES_SKIP= VSALAB_CASES_ONLY=12 " "$tmp/calls.txt.env" \
  || fail "green: case 12 did not run apart"
# One at a time (JOBS=1) gives the same lines.
run_suite serial JOBS=1 -- "$fake" specs
want_rc serial 0
has serial "^step +specs +passed +16 +failed +0"

# --- a failing, a crashing, a planless spec: every file still runs ----------
run_suite red FAKE_FAIL=gpu_spec.lua FAKE_CRASH=bench_spec.lua FAKE_NOPLAN=sm90a_spec.lua -- "$fake" specs
want_rc red 1
has red "^spec +gpu_spec.lua +passed +1 +failed +1"
has red "boom"
has red "^spec +bench_spec.lua +passed +1 +failed +1 .*exit 139 after 1 tests"
has red "^spec +sm90a_spec.lua +passed +1 +failed +1 .*no TAP plan line"
has red "^spec +vsa_lists_spec.lua +passed +2 +failed +0"
has red "^step +specs +passed +13 +failed +3"
has red "^total: 1 steps, 1 failed or not run"

# --- a spec past CHECK_TIMEOUT fails, and the run goes on -------------------
run_suite hang FAKE_HANG=vsa_lists_spec.lua CHECK_TIMEOUT=2 -- "$fake" specs
want_rc hang 1
has hang "^spec +vsa_lists_spec.lua +passed +0 +failed +1 .*timed out after 2 s"
has hang "^spec +cases_spec.lua:fakegpu +passed +2 +failed +0"

# --- quick fails: the run stops there ---------------------------------------
run_suite quickfail FAKE_QUICK_RC=1 -- "$fake" quick specs
want_rc quickfail 1
has quickfail "^step +quick +passed +2 +failed +1"
has quickfail "^step +specs +passed +0 +failed +0 +0 s +\(not run: quick failed\)"
hasnt quickfail "^spec "

# --- all: every step, peers skipped without failing ------------------------
run_suite all -- "$fake"
want_rc all 0
for s in quick specs sanitize sm100emu plugins peers; do has all "^step +$s "; done
has all "^step +peers +passed +0 +failed +0 .*skipped: no Triton peer"
has all "^spec +plugin_spec.lua +passed +2"
has all "CASES but 12, launches x0.1, block 64: fakeemu"
has all "^total: 6 steps, 0 failed or not run"
grep -q "cases.lua --skip=12 --launches-scale=0.1 --blocks=64 fakeemu" "$tmp/calls.txt" \
  || fail "all: the emulated CASES subset did not run on the emulated backend"
grep -q "sanitize_calls.lua fakegpu fakegpu-fp32" "$tmp/calls.txt" \
  || fail "all: racecheck/synccheck did not run on the dq-modes kernels"

# --- a step asked for by name that cannot run fails -------------------------
run_suite peers -- "$fake" peers
want_rc peers 1
has peers "^step +peers +passed +0 +failed +1 .*skipped"
run_suite oldnew -- "$fake" old-vs-new
want_rc oldnew 1
# An older step name still runs its step.
run_suite alias -- "$fake" plugin
want_rc alias 0
has alias "^step +plugins "

if [ "$fails" -gt 0 ]; then echo "run_sh_test: $fails failed"; exit 1; fi
echo "run_sh_test: all passed"
