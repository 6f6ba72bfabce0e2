#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU test suite, on any CUDA machine with a build of
# vsalab (the H200 first of all):
#   tests/gpu/run.sh [--dry-run] [VSALAB_BINARY] [STEP|GROUP ...]   (default: all)
#   tests/gpu/run.sh --list | --help
# Each step is a list of checks; each busted spec file runs in its own
# process (TAP). At the end: one line per spec file and per step (passed,
# failed, seconds), exit 1 when anything failed, 2 on a usage error or
# without a GPU. `all` is the suite that must stay green and within six
# minutes on one H200; the other steps measure or go deeper (--list).
# Logs: $OUT (default gpu-out/), STEP.log a step, summary.txt, the DBs.
set -uo pipefail
start_dir=$PWD
cd "$(dirname "$0")/../.." || exit 2

# ---------------------------------------------------------------------------
# The steps: name | group (all, harness, or none) | what it runs.
steps_table='quick|all|SASS census of the main kernels (HGMMA, spills, setmaxnreg, TMA); every sm90a version against the reference on small shapes; fixed-point launches bitwise. A failure stops the run
specs|all|every tests/gpu/*_spec.lua but plugin_spec, each in its own process, side by side but bench_spec; cases_spec once per default backend (list_backends.lua default); then case 12 alone (tens of GB)
sanitize|all|compute-sanitizer on one small call: memcheck on every backend (emulated ones too), racecheck and synccheck on the dq-modes kernels
sm100emu|all|the Blackwell backward over the emulated tcgen05 layer: ladder rungs 1-2, every kernel path against the reference at blocks 64 and 128, 20 launches bitwise, every CASES case but 12 with a tenth of the launches (EMU_CASES_SKIP, EMU_LAUNCHES_SCALE)
plugins|all|the example CUDA plug-in: plugin_spec (cases, graph capture), a sweep beside sm90a in hot and graph timing, a faulting plug-in
peers|all|every installed peer (FastVideo Triton; cuDNN BSA and FA4 from .peers/) beside the default kernels on identical inputs, 4k and 16k (PEERS_ARGS; skipped in all when .peer is absent)
bsa|-|cuDNN BSA (and FA4 where it runs) beside sm90a and Triton: wan720p and seed_sweep with peers=, every row checked (BSA_ARGS; needs .peers/ from scripts/peers.sh)
peer-tables|-|the same-call tables: sm90a and sm90a-fp32 beside cuDNN BSA, FA4 and Triton at 4k-131k and Wan 720P H40 10%/25%, blocks 64 and 128, and cuDNN dense at density 1 (peer_tables.sh; TIMING=sustained for the sustained table)
peers-fault|-|each installed peer crashing mid-run: earlier rows kept, the run closed (peers_fault_proof.sh)
sm100emu-full|-|sm100emu with every CASES case (12 included) at full launch counts, the three sanitizers on every emulated backend, seed_sweep and Wan 720P H4 spot checks of the emulation
sanitize-full|-|the three compute-sanitizer tools on every backend (variants and emulated ones included)
case12|-|CASES case 12 (64-bit offsets, 2^31 elements a tensor) alone, every default backend
layout|-|the token layouts: layout_spec with sm100a-emu and its bshd problem past 2^31 elements (VSALAB_LAYOUT_LARGE=1), then every CASES case in bshd for every default backend at both block sizes
compare|harness|vsalab compare end to end: the same sweep twice is SAME, a run slowed by VSALAB_SLOWDOWN_US is SLOW (check_compare_verdicts.sh)
fault|harness|a sticky CUDA fault at point 2 ends the run failed with its rows kept and the DB intact (check_fault_recovery.sh)
devices|harness|--devices all against --device 0, and a faulting worker losing one point only (check_devices_run.sh)
invert|-|experiments/invert_bench.lua into results.db
seed-sweep|-|experiments/seed_sweep.lua (4k-131k, every kernel) into results.db; every checked row must pass
wan720p|-|experiments/wan720p.lua, the main job (WAN720P_ARGS passes -a overrides), its wall time; every checked row must pass
modes|-|hot, cold, graph and sustained timing of one sweep (4k, 32k) with clocks, watts and the GEMM ceiling
bench-table|-|same-run table 4k-65k: the dq-modes kernels and Triton when installed, TFLOPS, ratios, clocks, dq rel L2
sustained|-|3 s of back-to-back calls (--timing sustained) at 4k, 16k, 65k: TFLOPS at the power cap, watts, pJ per FLOP
energy|-|hot and sustained rows at 16k, 65k and Wan 720P H40 25% (ENERGY_BLOCK, default 64), the dQ reduce ablated, cuDNN dense when torch is present: pJ per FLOP
power-trace|-|2000 back-to-back calls of each dq-modes kernel at 16k, medians per 100 calls, nvidia-smi sampling clocks and limits every 20 ms
process-spread|-|one 16k point in 8 separate processes: how much a time moves by process (clocks, capped time)
old-vs-new|-|this build against OLD=BINARY, alternated on the same shapes so clock drift falls on both (skipped without OLD)
breakdown|-|Nsight Compute: per-kernel times of one call of each dq-modes kernel at 4k, 8k, 16k, blocks 64 and 128
profile|-|Nsight Compute --set full on ncu_profile.lua launches (v3, v4, dQ reduce ablated); details page and stall samples
qchunk-table|-|the q_chunk tuning table at the L2-bound shapes (qchunk_table.lua)
vsa-lists|-|problem.build wall time at Wan 720P H40, random against VSA-like lists (vsa_build_time.lua)
blackwell|-|first contact on a B200/GB200/B300, stopping at the first failing rung: tcgen05 ladder, CASES, block 128, seed sweep'
step_names=$(cut -d'|' -f1 <<< "$steps_table")
group_steps() { awk -F'|' -v g="$1" '$2 == g { print $1 }' <<< "$steps_table"; }
is_step() { grep -qx -- "$1" <<< "$step_names"; }
is_group() { [ "$1" = all ] || [ "$1" = harness ]; }
# Older names of steps.
canonical() { case $1 in plugin) echo plugins ;; seed_sweep) echo seed-sweep ;; vsa_lists) echo vsa-lists ;; peers_fault) echo peers-fault ;; *) echo "$1" ;; esac; }

# The emulated CASES that `all` runs (sm100emu): every case but 12, whose
# 2^31-element tensors the emulation (one MMA at a time) takes longest
# over, with cases 8 and 10 at a tenth of their launches (5 and 200, still
# compared bitwise in the fixed-point mode). sm100emu-full runs them all.
EMU_CASES_SKIP=${EMU_CASES_SKIP:-12}
EMU_LAUNCHES_SCALE=${EMU_LAUNCHES_SCALE:-0.1}
# ... at block 64: the emulated CASES at both sizes took 151 s of all's
# budget on an H200 (2026-12-04, 03536c1); the 128-token kernel is
# checked in all by sm100a_emu_b128.lua (five shapes, both dQ modes, the
# fp64 oracle, 20 launches bitwise) and by every case in sm100emu-full.
EMU_CASES_BLOCKS=${EMU_CASES_BLOCKS:-64}
# The block size of the energy step's rows (64 or 128).
ENERGY_BLOCK=${ENERGY_BLOCK:-64}
# The budget of `all` on one H200 (seconds): the summary says when a run exceeds it.
ALL_BUDGET_S=360

usage() {
  cat <<EOF
usage: tests/gpu/run.sh [--dry-run] [VSALAB_BINARY] [STEP|GROUP ...]
       tests/gpu/run.sh --list | --help
VSALAB_BINARY defaults to build/vsalab; STEP defaults to all.
  --dry-run, -n  print each check's command instead of running it (no GPU needed)
  --list         the steps, one line each, and their group
Groups: all (the suite: green and within $((ALL_BUDGET_S / 60)) minutes on one H200), harness.
Environment: OUT (logs, default gpu-out), CHECK_TIMEOUT (seconds a check may
take, default 300; a check past it fails), JOBS (processes side by side in
a step's correctness batch, default min(8, cores); 1: one at a time),
EMU_CASES_SKIP, EMU_LAUNCHES_SCALE and EMU_CASES_BLOCKS (the emulated CASES
in all: every case but $EMU_CASES_SKIP, launches x$EMU_LAUNCHES_SCALE, at
block $EMU_CASES_BLOCKS), ENERGY_BLOCK (the energy step's block size, 64 or
128; default $ENERGY_BLOCK), BSA_ARGS, WAN720P_ARGS,
PEERS_ARGS, OLD (the binary old-vs-new times against), PEER_DIR (where the
Triton peer's files are, default .peer/fastvideo_triton).
Exit status: 0 every check passed, 1 a check failed (or a step asked for by
name could not run), 2 a usage error or no GPU.
EOF
  echo
  list_steps
}

list_steps() {
  echo "steps (in 'all' marked *, in 'harness' marked h):"
  while IFS='|' read -r name group what; do
    local mark=" "
    [ "$group" = all ] && mark="*"
    [ "$group" = harness ] && mark="h"
    printf '  %s %-15s %s\n' "$mark" "$name" "$what"
  done <<< "$steps_table"
}

# ---------------------------------------------------------------------------
# Arguments.
dry=0
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --list) list_steps; exit 0 ;;
    -n|--dry-run) dry=1; shift ;;
    --) shift; break ;;
    -*) echo "run.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
    *) break ;;
  esac
done
bin=build/vsalab
given_bin=
if [ $# -gt 0 ] && ! is_step "$(canonical "$1")" && ! is_group "$1"; then
  bin=$1
  given_bin=$1
  shift
fi
# A path given relative to where run.sh was started.
absolute() { if [[ $1 != /* ]] && [ -e "$start_dir/$1" ]; then echo "$start_dir/$1"; else echo "$1"; fi; }
bin=$(absolute "$bin")
# A first word that is no step, group or file: a mistyped step ('quik'),
# which was taken for the binary (a dry run then printed every step of all
# and exited 0; a real run said there was no binary).
if [ -n "$given_bin" ] && [ ! -e "$bin" ]; then
  if [[ $given_bin != */* ]]; then
    echo "run.sh: no step or group '$given_bin', and no vsalab binary of that name (tests/gpu/run.sh --list names the steps)" >&2
  else
    echo "run.sh: no vsalab binary at $given_bin (build it, or pass its path first)" >&2
  fi
  exit 2
fi
[ -z "${OLD:-}" ] || OLD=$(absolute "$OLD")
selected=()
explicit=" "
for name in "${@:-all}"; do
  if is_group "$name"; then
    while read -r s; do selected+=("$s"); done < <(group_steps "$name")
  else
    s=$(canonical "$name")
    if ! is_step "$s"; then
      echo "run.sh: no step or group '$name' (tests/gpu/run.sh --list names them)" >&2
      exit 2
    fi
    selected+=("$s")
    explicit="$explicit$s "
  fi
done
# Each step once, in the order asked.
steps=()
for s in "${selected[@]}"; do
  case " ${steps[*]:-} " in *" $s "*) ;; *) steps+=("$s") ;; esac
done

if [ "$dry" = 0 ]; then
  [ -x "$bin" ] || { echo "run.sh: no vsalab binary at $bin (build it, or pass its path first)" >&2; exit 2; }
  # Every step needs an NVIDIA GPU: say so once instead of failing each check.
  if ! nvidia-smi -L > /dev/null 2>&1; then
    echo "run.sh: no NVIDIA GPU or driver found (nvidia-smi -L failed): the GPU tests need one; scripts/test.sh runs the CPU tests" >&2
    exit 2
  fi
fi

# ---------------------------------------------------------------------------
# Environment of every step.
# The ladder binaries sit beside vsalab (pack.sh) or in build/tests.
tests_bin=$(dirname "$bin")
[ -x "$tests_bin/tcgen05_ladder_emu" ] || tests_bin=build/tests
# The emulated sm100a joins only the steps that ask for it (VSALAB_SM100_EMU=1 there).
unset VSALAB_SM100_EMU
# OUT is taken relative to where run.sh was started; its default, gpu-out,
# to the repository. The check scripts write there too.
if [ -n "${OUT:-}" ] && [[ $OUT != /* ]]; then out=$start_dir/$OUT; else out=${OUT:-$PWD/gpu-out}; fi
export OUT=$out
check_timeout=${CHECK_TIMEOUT:-300}
# Processes run side by side in a step's correctness batch (JOBS=1: one at a time).
cores=$(nproc 2>/dev/null || echo 4)
jobs=${JOBS:-$((cores < 8 ? cores : 8))}
peer_dir=${PEER_DIR:-.peer/fastvideo_triton}
for v in check_timeout jobs; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: ${v^^} must be a whole number > 0, got '${!v}'" >&2; exit 2; }
done
case $ENERGY_BLOCK in 64|128) ;; *) echo "run.sh: ENERGY_BLOCK must be 64 or 128, got '$ENERGY_BLOCK'" >&2; exit 2 ;; esac
# The example plug-ins sit beside the binary (build/ or tests/gpu/pack.sh's folder).
export VSALAB_PLUGIN_DIR=${VSALAB_PLUGIN_DIR:-$(dirname "$bin")}
export PATH=$PATH:/usr/local/cuda/bin
# Lua modules packed beside the binary (tests/gpu/pack.sh) for hosts without them.
libs=$(dirname "$bin")/lua
if [ -d "$libs" ]; then
  export LUA_PATH="$libs/share/?.lua;$libs/share/?/init.lua;;"
  export LUA_CPATH="$libs/lib/?.so;;"
fi

# ---------------------------------------------------------------------------
# Checks: each adds to its step's passed or failed count.
step='' log=/dev/null step_pass=0 step_fail=0 step_skip='' limit=''
summary=$out/summary.txt

# record KIND NAME PASSED FAILED SECONDS NOTE: one line of the summary.
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$summary"; }

# The last lines of a failed check's output, on the console.
show_tail() { tail -n "${2:-15}" "$1" | sed 's/^/      | /'; }

# run_cmd FILE CMD...: CMD's output into FILE, within the time limit (a
# shell function runs as is); stdin closed. Returns CMD's status.
run_cmd() {
  local file=$1
  shift
  if [ "$(type -t "$1")" = function ]; then
    "$@" > "$file" 2>&1 < /dev/null
  else
    timeout -k 10 "${limit:-$check_timeout}" "$@" > "$file" 2>&1 < /dev/null
  fi
}

# The limit of the long steps' checks: CHECK_TIMEOUT, at least 600 s.
long_limit() { echo $((check_timeout > 600 ? check_timeout : 600)); }

why_failed() { # why_failed STATUS: words for a check's exit status
  case $1 in
    124|137) echo "timed out after ${limit:-$check_timeout} s" ;;
    *) echo "exit $1" ;;
  esac
}

# report_check LABEL STATUS SECONDS OUTPUT CMD: count and print one check.
report_check() {
  local label=$1 rc=$2 secs=$3 file=$4 cmd=$5
  { echo "--- $label: $cmd"; cat "$file"; echo "--- exit $rc"; } >> "$log"
  if [ "$rc" -eq 0 ]; then
    step_pass=$((step_pass + 1))
    printf '  ok    %s (%d s)\n' "$label" "$secs"
  else
    step_fail=$((step_fail + 1))
    printf '  FAIL  %s: %s (%d s)\n' "$label" "$(why_failed "$rc")" "$secs"
    show_tail "$file"
  fi
}

# check LABEL CMD...: one check; passes when CMD exits 0.
check() {
  local label=$1
  shift
  if [ "$dry" = 1 ]; then printf '  %s:\n      %s\n' "$label" "$*"; return 0; fi
  local t0=$SECONDS rc
  run_cmd "$out/.check.out" "$@"
  rc=$?
  report_check "$label" "$rc" $((SECONDS - t0)) "$out/.check.out" "$*"
  return "$rc"
}

# spec_cmd FILE [VAR=VALUE...]: the command that runs one busted spec file
# in its own process, TAP output, into the array spec_argv.
spec_cmd() {
  local file=$1
  shift
  spec_argv=("$bin" run tests/run_busted.lua --tags=gpu -o TAP "$file")
  [ $# -eq 0 ] || spec_argv=(env "$@" "${spec_argv[@]}")
}

# report_spec LABEL STATUS SECONDS OUTPUT CMD: count a spec file's tests in
# the step and give it a summary line. A process that dies, times out or
# never prints the plan line counts as a failure even when every test it
# printed passed.
report_spec() {
  local label=$1 rc=$2 secs=$3 file=$4 cmd=$5 pass fail pending note=""
  { echo "--- spec $label: $cmd"; cat "$file"; echo "--- exit $rc"; } >> "$log"
  pass=$(grep -cE '^ok [0-9]+ ' "$file")
  pending=$(grep -cE '^ok [0-9]+ - # SKIP' "$file")
  pass=$((pass - pending))
  fail=$(grep -cE '^not ok [0-9]+' "$file")
  if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
    fail=1
    note="$(why_failed "$rc") after $pass tests"
  elif ! grep -qE '^1\.\.[0-9]+$' "$file"; then
    fail=$((fail + 1))
    note="no TAP plan line: the run ended early"
  elif [ "$rc" -ne 0 ]; then
    note=$(why_failed "$rc")
  fi
  [ "$pending" -eq 0 ] || note="${note:+$note; }$pending pending"
  step_pass=$((step_pass + pass))
  step_fail=$((step_fail + fail))
  record spec "$label" "$pass" "$fail" "$secs" "$note"
  if [ "$fail" -eq 0 ]; then
    printf '  ok    spec %s: %d passed (%d s)\n' "$label" "$pass" "$secs"
  else
    printf '  FAIL  spec %s: %d passed, %d failed%s (%d s)\n' "$label" "$pass" "$fail" \
      "${note:+, $note}" "$secs"
    grep -E -A3 '^not ok ' "$file" | head -40 | sed 's/^/      | /'
    [ "$rc" -eq 0 ] || show_tail "$file" 8
  fi
}

# spec FILE [LABEL [VAR=VALUE...]]: one spec file, now.
spec() {
  local file=$1 label=${2:-$(basename "$1")}
  shift $(($# < 2 ? $# : 2))
  spec_cmd "$file" "$@"
  if [ "$dry" = 1 ]; then printf '  spec %s:\n      %s\n' "$label" "${spec_argv[*]}"; return 0; fi
  local t0=$SECONDS rc
  run_cmd "$out/.check.out" "${spec_argv[@]}"
  rc=$?
  report_spec "$label" "$rc" $((SECONDS - t0)) "$out/.check.out" "${spec_argv[*]}"
}

# Checks and spec files that may run side by side (correctness only, never
# a timing): queued by queue_check / queue_spec, run by run_queue with up
# to JOBS processes at once, reported in the order queued. Most of their
# time is host time (the fp64 oracle, launches, compares), which several
# processes share out over the host's cores.
q_kind=() q_label=() q_cmd=()
queue_check() {
  q_kind+=(check) q_label+=("$1")
  shift
  q_cmd+=("$(printf '%q ' "$@")")
}
queue_spec() { # queue_spec FILE [LABEL [VAR=VALUE...]]
  local file=$1 label=${2:-$(basename "$1")}
  shift $(($# < 2 ? $# : 2))
  spec_cmd "$file" "$@"
  q_kind+=(spec) q_label+=("$label") q_cmd+=("$(printf '%q ' "${spec_argv[@]}")")
}
run_queue() {
  local i n=${#q_kind[@]}
  if [ "$dry" = 1 ]; then
    for ((i = 0; i < n; i++)); do
      printf '  %s %s (side by side, up to %s at once):\n      %s\n' "${q_kind[i]}" "${q_label[i]}" "$jobs" "${q_cmd[i]}"
    done
  else
    for ((i = 0; i < n; i++)); do
      while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
      (
        t0=$SECONDS
        eval "run_cmd \"\$out/.job$i.out\" ${q_cmd[i]}"
        echo "$? $((SECONDS - t0))" > "$out/.job$i.rc"
      ) &
    done
    wait
    local rc secs
    for ((i = 0; i < n; i++)); do
      read -r rc secs < "$out/.job$i.rc" || { rc=1; secs=0; }
      "report_${q_kind[i]}" "${q_label[i]}" "$rc" "$secs" "$out/.job$i.out" "${q_cmd[i]}"
      rm -f "$out/.job$i.out" "$out/.job$i.rc"
    done
  fi
  q_kind=() q_label=() q_cmd=()
}

# skip WHY: the step cannot run here. In a group that is no failure; a step
# asked for by name that cannot run fails.
skip() {
  step_skip=$1
  printf '  skipped: %s\n' "$1"
  case $explicit in *" $step "*) step_fail=$((step_fail + 1)) ;; esac
}

# show CMD...: output on the console and in the log, not a check (tables).
show() {
  if [ "$dry" = 1 ]; then printf '  show:\n      %s\n' "$*"; return 0; fi
  "$@" 2>&1 < /dev/null | tee -a "$log"
}

# backends SELECTOR [VAR=VALUE...]: names from tests/gpu/list_backends.lua,
# one a line (a placeholder in a dry run).
backends() {
  local sel=$1
  shift
  if [ "$dry" = 1 ]; then echo "<$sel>"; return; fi
  env "$@" "$bin" run tests/gpu/list_backends.lua "$sel" 2>> "$log" < /dev/null
}

# rows_pass DB: every checked row of DB passed its spot check (and there are rows).
rows_pass() {
  local db=$1 n bad
  n=$("$bin" query --db "$db" --format csv "SELECT count(*) FROM result WHERE passed IS NOT NULL" | tail -1)
  bad=$("$bin" query --db "$db" --format csv "SELECT count(*) FROM result WHERE passed = 0" | tail -1)
  echo "checked rows: $n, failing: $bad"
  [ "$bad" = 0 ] && [ "${n:-0}" -gt 0 ] 2>/dev/null
}

# has_rows DB KERNEL: DB holds rows of KERNEL that passed their check.
has_rows() {
  local n
  n=$("$bin" query --db "$1" --format csv "SELECT count(*) FROM result WHERE kernel = '$2' AND passed = 1" | tail -1)
  echo "$2 rows passing their check: $n"
  [ "${n:-0}" -gt 0 ] 2>/dev/null
}

peers_installed() {
  [ -f "$peer_dir/block_sparse_attn_triton.py" ] && python3 -c "import torch, triton" > /dev/null 2>&1
}

joined() { paste -sd, -; }

# ---------------------------------------------------------------------------
# The steps.

step_quick() {
  # Per kernel: HGMMA shapes, local-memory traffic (spills), register
  # reallocation and TMA instructions; then the resource report.
  check "SASS census of the main kernels (sass.txt)" sass_census
  # The default kernels must not touch local memory (the deterministic v3
  # kernel's 24-register producer spills a few bytes: allowed).
  check "no local memory (spills) in the main sm90a kernels" no_spills
  check "every sm90a version against the reference, fixed-point launches bitwise" \
    "$bin" run tests/gpu/sm90a_quick.lua
}
sass_census() {
  command -v cuobjdump > /dev/null || { echo "cuobjdump not found (CUDA toolkit's bin on PATH?)"; return 1; }
  cuobjdump --dump-sass "$bin" 2>/dev/null | awk '/Function : /{fn=$3} {
      while (match($0, /HGMMA\.[0-9A-Za-z.]+|LDL|STL|USETMAXREG|UTMALDG|UBLKCP|UBLKRED/)) {
        n[fn " " substr($0, RSTART, RLENGTH)]++; $0 = substr($0, RSTART + RLENGTH) } }
      END { for (k in n) print n[k], k }' | grep -E "bwd|HGMMA" | sort -k2 > "$out/sass.txt"
  cuobjdump --dump-resource-usage "$bin" 2>/dev/null | grep -A1 -E "bwd_(ws_)?kernel" >> "$out/sass.txt"
  echo "$(wc -l < "$out/sass.txt") lines in $out/sass.txt"
}
no_spills() {
  ! grep -E "sm90a_cu_[0-9a-f]+(10bwd_kernelILb[01]E|13bwd_ws_kernelILb0E).* (LDL|STL)" "$out/sass.txt"
}

step_specs() {
  local f b defaults
  defaults=$(backends default)
  # Side by side: the correctness specs, and CASES one process a backend
  # (each its own line and time) without case 12.
  for f in tests/gpu/*_spec.lua; do
    case $f in */cases_spec.lua|*/plugin_spec.lua|*/bench_spec.lua) continue ;; esac
    queue_spec "$f"
  done
  for b in $defaults; do
    queue_spec tests/gpu/cases_spec.lua "cases_spec.lua:$b" VSALAB_CASES_BACKENDS="$b" VSALAB_CASES_SKIP=12
  done
  run_queue
  # Case 12 (2^31-element tensors: 56 GiB for the reference) alone, one
  # backend after the other: beside the rest it ran out of memory on an
  # 80 GB H100. At block 64 here (its offsets are the same token counts at
  # 128); both sizes in the case12 step.
  spec tests/gpu/cases_spec.lua "cases_spec.lua case 12" \
    VSALAB_CASES_BACKENDS="$(joined <<< "$defaults")" VSALAB_CASES_ONLY=12 VSALAB_CASES_BLOCKS=64
  # Alone: the bench's specs time on the GPU.
  spec tests/gpu/bench_spec.lua
}

step_sanitize() {
  local modes
  modes=$(backends dq-modes | paste -sd' ')
  [ -n "$modes" ] || { fail_check "dq-modes kernels" "none available (list_backends.lua dq-modes)"; return; }
  queue_check "memcheck, every backend" env VSALAB_SM100_EMU=1 compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$bin" run tests/gpu/sanitize_calls.lua
  local tool
  for tool in racecheck synccheck; do
    # shellcheck disable=SC2086 # one word a backend
    queue_check "$tool, $modes" compute-sanitizer --tool $tool --error-exitcode 3 \
      "$bin" run tests/gpu/sanitize_calls.lua $modes
  done
  run_queue
}

step_sanitize_full() {
  local tool limit
  limit=$(long_limit)
  for tool in memcheck racecheck synccheck; do
    queue_check "$tool, every backend" env VSALAB_SM100_EMU=1 compute-sanitizer --tool $tool \
      --error-exitcode 3 "$bin" run tests/gpu/sanitize_calls.lua
  done
  run_queue
}

# emulated_names: the emulated backends (no variants) into $emu; none fails a check.
emulated_names() {
  emu=$(backends emulated VSALAB_SM100_EMU=1 | paste -sd' ')
  [ -n "$emu" ] || { fail_check "emulated backends" "none available (list_backends.lua emulated, VSALAB_SM100_EMU=1)"; return 1; }
}

# Queued: the ladder's emulated rungs, and sm100a_emu.lua (every kernel path).
sm100emu_common() {
  queue_check "tcgen05 ladder rungs 1-2, emulated" "$tests_bin/tcgen05_ladder_emu"
  queue_check "every kernel path against the reference, 20 launches bitwise (sm100a_emu.lua)" \
    env VSALAB_SM100_EMU=1 "$bin" run tests/gpu/sm100a_emu.lua
  queue_check "the 128-token kernel against the reference and the oracle, 20 launches bitwise (sm100a_emu_b128.lua)" \
    env VSALAB_SM100_EMU=1 "$bin" run tests/gpu/sm100a_emu_b128.lua
}

step_sm100emu() {
  local emu b
  emulated_names || return
  sm100emu_common
  for b in $emu; do
    queue_check "CASES but $EMU_CASES_SKIP, launches x$EMU_LAUNCHES_SCALE, block $EMU_CASES_BLOCKS: $b" \
      env VSALAB_SM100_EMU=1 "$bin" run tests/gpu/cases.lua --skip="$EMU_CASES_SKIP" \
      --launches-scale="$EMU_LAUNCHES_SCALE" --blocks="$EMU_CASES_BLOCKS" "$b"
  done
  run_queue
}

step_sm100emu_full() {
  local emu all_emu b tool limit
  limit=$(long_limit)
  emulated_names || return
  all_emu=$(backends emulated-all VSALAB_SM100_EMU=1 | paste -sd' ')
  sm100emu_common
  for b in $emu; do
    queue_check "every CASES case but 12: $b" env VSALAB_SM100_EMU=1 "$bin" run tests/gpu/cases.lua --skip=12 "$b"
  done
  for tool in memcheck racecheck synccheck; do
    # shellcheck disable=SC2086 # one word a backend
    queue_check "$tool, $all_emu" env VSALAB_SM100_EMU=1 compute-sanitizer --tool $tool --error-exitcode 3 \
      "$bin" run tests/gpu/sanitize_calls.lua $all_emu
  done
  run_queue
  for b in $emu; do
    check "case 12 (64-bit offsets): $b" env VSALAB_SM100_EMU=1 "$bin" run tests/gpu/cases.lua --only=12 "$b"
  done
  local kernels
  kernels=$(tr ' ' ',' <<< "$all_emu")
  rm -f "$out/emu.db"*
  check "seed_sweep spot checks at 4k, 16k, 65k" env VSALAB_SM100_EMU=1 "$bin" run --db "$out/emu.db" \
    experiments/seed_sweep.lua -a "Sq=[4096,16384,65536]" kernels="$kernels"
  check "Wan 720P H4 spot checks at 10%, 25%" env VSALAB_SM100_EMU=1 "$bin" run --db "$out/emu.db" \
    experiments/wan720p.lua -a H=4 -a "density=[0.1,0.25]" kernels="$kernels"
  check "every emulated row passed its spot check" rows_pass "$out/emu.db"
}

step_plugins() {
  queue_spec tests/gpu/plugin_spec.lua
  # Rows must pass and graph-timed rows exist; no time is judged here.
  queue_check "the example CUDA plug-in beside sm90a (hot, graph); a faulting plug-in" \
    tests/gpu/check_plugin_sweep.sh "$bin"
  run_queue
}

step_peers() { # FastVideo's Triton backward as an external peer, same run and inputs as the default kernels
  peers_installed || { skip "no Triton peer ($peer_dir from tests/gpu/fetch_peer.sh, python3 with torch and triton)"; return; }
  local db=$out/peers.db
  rm -f "$db"*
  # Every installed peer: Triton, and cuDNN BSA and FA4 when .peers/ holds
  # them (scripts/peers.sh). Two lengths by default, to stay within all's
  # budget; PEERS_ARGS overrides (e.g. -a Sq=[4096,16384,65536,131072]).
  local list=triton
  [ -d .peers/cudnn ] && list=triton,cudnn_bsa,fa4
  # shellcheck disable=SC2086 # PEERS_ARGS: words
  check "seed_sweep peers=$list" "$bin" run --db "$db" experiments/seed_sweep.lua peers=$list \
    ${PEERS_ARGS:--a Sq=[4096,16384]}
  check "every checked row passed its spot check" rows_pass "$db"
  check "Triton rows measured" has_rows "$db" triton
  show "$bin" query --db "$db" "SELECT kernel, Sq, round(ms_median,4) AS ms, round(tflops,1) AS tflops, passed, samples, json_extract(extra, '$.peer.extra.inversion_ms') AS peer_inv_ms FROM result WHERE kernel NOT IN ('invert', 'gemm_bf16', 'config') ORDER BY Sq, kernel"
  show "$bin" compare --db "$db" 1:sm90a 1:triton
  check "report 1:sm90a 1:triton (peers.html)" "$bin" report --db "$db" -o "$out/peers.html" 1:sm90a 1:triton
}

bsa_installed() { [ -d .peers/cudnn ] && peers_installed; }

step_bsa() { # the strongest peers beside sm90a and Triton on identical inputs, one DB
  bsa_installed || { skip "no .peers/ (scripts/peers.sh install) or no Triton peer ($peer_dir)"; return; }
  local db=$out/bsa.db
  rm -f "$db"*
  # shellcheck disable=SC2086 # BSA_ARGS: words
  check "wan720p peers=cudnn_bsa,fa4,triton" "$bin" run --db "$db" experiments/wan720p.lua peers=cudnn_bsa,fa4,triton ${BSA_ARGS:-}
  # shellcheck disable=SC2086
  check "seed_sweep peers=cudnn_bsa,fa4,triton" "$bin" run --db "$db" experiments/seed_sweep.lua \
    peers=cudnn_bsa,fa4,triton kernels=sm90a,sm90a-fp32,cudnn_bsa,fa4,triton ${BSA_ARGS:-}
  check "every checked row passed its spot check" rows_pass "$db"
  check "cuDNN BSA rows measured" has_rows "$db" cudnn_bsa
  show "$bin" query --db "$db" "SELECT run_id, kernel, block, H, Sq, density, round(ms_median,4) AS ms, round(tflops,1) AS tflops, passed, worst_rel_l2, json_extract(extra, '$.peer.extra.main_kernel_ms') AS main_kernel_ms, substr(note, 1, 60) AS note FROM result_summary WHERE kernel NOT IN ('invert', 'gemm_bf16', 'config') ORDER BY run_id, block, H, Sq, density, kernel"
}

step_peer_tables() {
  bsa_installed || { skip "no .peers/ (scripts/peers.sh install) or no Triton peer ($peer_dir)"; return; }
  check "same-call tables (TIMING=${TIMING:-hot})" env TABLES_DB="$out/tables.db" tests/gpu/peer_tables.sh "$bin" seed wan dense
  check "every checked row passed its spot check" rows_pass "$out/tables.db"
  show env TABLES_DB="$out/tables.db" tests/gpu/peer_tables.sh "$bin" table
}

step_peers_fault() { check "each installed peer crashing mid-run" tests/gpu/peers_fault_proof.sh "$bin"; }

step_case12() {
  local b
  while read -r b; do
    [ -n "$b" ] && check "case 12: $b" "$bin" run tests/gpu/cases.lua --only=12 "$b"
  done < <(backends default)
}

step_layout() {
  local b
  # Alone: the 2^31-element bshd problem takes tens of GB.
  spec tests/gpu/layout_spec.lua "layout_spec.lua (sm100a-emu, past 2^31)" VSALAB_SM100_EMU=1 VSALAB_LAYOUT_LARGE=1
  while read -r b; do
    [ -n "$b" ] && check "CASES in bshd: $b" "$bin" run tests/gpu/cases.lua --layouts=bshd "$b"
  done < <(backends default)
}

step_compare() { check "same sweep SAME, slowed run SLOW" tests/gpu/check_compare_verdicts.sh "$bin"; }
step_fault() { check "a fault mid-sweep: run failed, rows kept, DB intact" tests/gpu/check_fault_recovery.sh "$bin"; }
step_devices() { check "--devices all against --device 0; a faulting worker" tests/gpu/check_devices_run.sh "$bin"; }

step_invert() { check "invert_bench" "$bin" run --db "$out/results.db" experiments/invert_bench.lua; }

step_seed_sweep() {
  local limit
  limit=$(long_limit)
  rm -f "$out/seed_sweep.db"*
  check "seed_sweep" "$bin" run --db "$out/seed_sweep.db" experiments/seed_sweep.lua
  check "every row passed its spot check" rows_pass "$out/seed_sweep.db"
}

step_wan720p() {
  local limit
  limit=$(long_limit)
  rm -f "$out/wan720p.db"*
  # shellcheck disable=SC2086 # WAN720P_ARGS: words
  check "wan720p (${WAN720P_ARGS:-default options})" "$bin" run --db "$out/wan720p.db" experiments/wan720p.lua ${WAN720P_ARGS:-}
  check "every row passed its spot check" rows_pass "$out/wan720p.db"
}

step_modes() {
  local m db=$out/modes.db
  rm -f "$db"*
  for m in hot cold graph sustained; do
    check "--timing $m" "$bin" run --timing $m --db "$db" experiments/seed_sweep.lua -a "Sq=[4096,32768]" reference=0
  done
  check "every row passed its spot check" rows_pass "$db"
  show "$bin" query --db "$db" "SELECT kernel, Sq, mode, round(ms_median,4) AS ms, round(tflops,1) AS tflops, samples, rel_stddev, sm_clock_start_mhz AS mhz0, sm_clock_end_mhz AS mhz1, throttled, json_extract(extra, '$.capped_ms') AS capped_ms, json_extract(extra, '$.watts') AS watts FROM result ORDER BY kernel, Sq, run_id"
}

# The kernels a timing table holds: the dq-modes kernels, and Triton when installed.
timing_kernels() {
  local k
  k=$(backends dq-modes | joined)
  if peers_installed; then echo "kernels=$k,triton peers=triton"; else echo "kernels=$k"; fi
}
# The same table for every timing step: TFLOPS, the ratio to the first
# dq-modes kernel (this GPU's default) and to Triton at the same point.
timing_table() {
  local db=$1 first
  first=$(backends dq-modes | head -1)
  show "$bin" query --db "$db" "SELECT r.run_id AS run, r.kernel, r.H, r.Sq, r.density AS d, r.mode,
    round(r.ms_median * 1000, 1) AS us, round(r.tflops, 1) AS tflops,
    round(r.tflops / d.tflops, 3) AS vs_default, round(r.tflops / t.tflops, 2) AS vs_triton,
    r.passed AS ok, r.samples AS n, r.sm_clock_start_mhz AS mhz0, r.sm_clock_end_mhz AS mhz1, r.throttled AS thr,
    json_extract(r.extra, '$.watts') AS watts, round(json_extract(r.extra, '$.watts') / r.tflops, 3) AS pj_per_flop,
    (SELECT round(e.rel_l2, 5) FROM result_error e WHERE e.result_id = r.id AND e.output = 'dq') AS dq_rel_l2
    FROM result r
    LEFT JOIN result d ON d.run_id = r.run_id AND d.point_hash = r.point_hash AND d.kernel = '$first'
    LEFT JOIN result t ON t.run_id = r.run_id AND t.point_hash = r.point_hash AND t.kernel = 'triton'
    WHERE r.kernel NOT IN ('invert', 'gemm_bf16', 'config')
    ORDER BY r.H, r.density, r.Sq, r.mode, r.run_id, r.kernel"
}

step_bench_table() {
  local db=$out/bench.db k
  k=$(timing_kernels)
  rm -f "$db"*
  # shellcheck disable=SC2086 # kernels= and peers= words
  check "seed_sweep 4k-65k: $k" "$bin" run --db "$db" experiments/seed_sweep.lua \
    -a "Sq=[4096,8192,16384,32768,65536]" $k
  check "every row passed its spot check" rows_pass "$db"
  timing_table "$db"
}

step_sustained() {
  local db=$out/sustained.db k
  k=$(timing_kernels)
  rm -f "$db"*
  # shellcheck disable=SC2086
  check "--timing sustained 4k, 16k, 65k: $k" "$bin" run --timing sustained --db "$db" \
    experiments/seed_sweep.lua -a "Sq=[4096,16384,65536]" $k
  check "every row passed its spot check" rows_pass "$db"
  timing_table "$db"
}

step_energy() {
  local db=$out/energy.db k t modes limit blk=$ENERGY_BLOCK
  limit=$(long_limit)
  k=$(timing_kernels)
  modes=$(backends dq-modes | joined)
  rm -f "$db"* "$out/ablated.db"*
  for t in hot sustained; do
    # shellcheck disable=SC2086
    check "--timing $t seed_sweep 16k, 65k, block $blk" "$bin" run --timing $t --db "$db" \
      experiments/seed_sweep.lua -a "Sq=[16384,65536]" -a "block=[$blk]" $k
    # shellcheck disable=SC2086
    check "--timing $t Wan 720P H40 25%, block $blk" "$bin" run --timing $t --db "$db" \
      experiments/wan720p.lua -a H=40 -a density=0.25 -a "block=[$blk]" $k
  done
  check "every row passed its spot check" rows_pass "$db"
  # The dQ reduce ablated in both modes (dq wrong, its rows fail their check
  # by design): what the reduce costs in time and watts.
  check "$modes with the dQ reduce ablated, sustained, block $blk" env VSALAB_ABLATE=no_dq_reduce "$bin" run \
    --timing sustained --db "$out/ablated.db" experiments/seed_sweep.lua -a "Sq=[16384,65536]" \
    -a "block=[$blk]" kernels="$modes"
  timing_table "$db"
  timing_table "$out/ablated.db"
  if python3 -c "import torch" > /dev/null 2>&1; then
    check "cuDNN dense backward, sustained (dense_energy.py)" python3 tests/gpu/dense_energy.py 16384 65536
    show tail -3 "$out/.check.out"
  fi
}

step_power_trace() {
  local modes reasons smi
  modes=$(backends dq-modes | paste -sd' ')
  reasons=clocks_event_reasons.active # older drivers: clocks_throttle_reasons
  nvidia-smi --query-gpu=$reasons --format=csv > /dev/null 2>&1 || reasons=clocks_throttle_reasons.active
  if [ "$dry" = 1 ]; then
    echo "  nvidia-smi sampling every 20 ms into $out/smi.csv"
  else
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons \
      --format=csv,noheader -lms 20 > "$out/smi.csv" 2>&1 &
    smi=$!
  fi
  # shellcheck disable=SC2086 # one word a backend
  check "2000 calls a kernel at 16k, twice: $modes" "$bin" run tests/gpu/power_trace.lua 16384 2000 $modes
  [ "$dry" = 1 ] || kill "$smi" 2>/dev/null
  show cat "$out/.check.out"
  # Samples by SM clock and by active limit.
  # shellcheck disable=SC2016 # awk's own $ fields
  show awk -F', ' '{c[$2]++; r[$6]++} END {for (k in c) print "clock", k, c[k]; for (k in r) print "reason", k, r[k]}' "$out/smi.csv"
}

step_process_spread() {
  local db=$out/spread.db k i
  k=$(backends dq-modes | joined)
  rm -f "$db"*
  for i in 1 2 3 4 5 6 7 8; do
    check "process $i: 16k, kernels=$k" "$bin" run --db "$db" experiments/seed_sweep.lua -a Sq=16384 reference=0 kernels="$k"
  done
  show "$bin" query --db "$db" "SELECT run_id AS r, kernel, round(ms_median*1000,1) AS med_us, round(ms_min*1000,1) AS min_us,
    round(ms_max*1000,1) AS max_us, samples AS n, sm_clock_start_mhz AS mhz0, sm_clock_end_mhz AS mhz1, throttled AS thr,
    json_extract(extra, '$.capped_ms') AS capped_ms, json_extract(extra, '$.cap_retries') AS retries
    FROM result WHERE kernel NOT IN ('invert', 'gemm_bf16') ORDER BY kernel, run_id"
}

step_old_vs_new() {
  [ -n "${OLD:-}" ] || { skip "OLD names no binary to time against (OLD=path/to/old/vsalab)"; return; }
  [ "$dry" = 1 ] || [ -x "$OLD" ] || { fail_check "OLD" "no binary at $OLD"; return; }
  local new_db=$out/new.db old_db=$out/old.db r s k_new k_old
  rm -f "$new_db"* "$old_db"*
  k_new=$(backends dq-modes | joined)
  # The old binary names its own kernels (run by it, the lister sees its registry).
  if [ "$dry" = 1 ]; then k_old="<dq-modes of OLD>"; else
    k_old=$("$OLD" run tests/gpu/list_backends.lua dq-modes 2>> "$log" < /dev/null | joined); fi
  # 4k and 8k three times in turn, 16k-65k once: each binary alone in
  # the process, back to back, so clock drift falls on both.
  for r in 1 2 3; do
    check "round $r new 4k, 8k" "$bin" run --db "$new_db" experiments/seed_sweep.lua -a "Sq=[4096,8192]" kernels="$k_new"
    check "round $r old 4k, 8k" "$OLD" run --db "$old_db" experiments/seed_sweep.lua -a "Sq=[4096,8192]" kernels="$k_old"
  done
  for s in 16384 32768 65536; do
    check "new $s" "$bin" run --db "$new_db" experiments/seed_sweep.lua -a Sq=$s kernels="$k_new"
    check "old $s" "$OLD" run --db "$old_db" experiments/seed_sweep.lua -a Sq=$s kernels="$k_old"
  done
  check "every new row passed its spot check" rows_pass "$new_db"
  local q="SELECT run_id AS r, kernel, Sq, round(ms_median*1000,1) AS us, round(tflops,1) AS tflops, passed AS ok,
    sm_clock_start_mhz AS mhz0, sm_clock_end_mhz AS mhz1,
    (SELECT round(rel_l2,5) FROM result_error e WHERE e.result_id = result.id AND e.output = 'dq') AS dq_rel_l2
    FROM result WHERE kernel NOT IN ('invert', 'gemm_bf16') ORDER BY Sq, kernel, run_id"
  echo "  new ($bin):"
  show "$bin" query --db "$new_db" "$q"
  echo "  old ($OLD):"
  show "$bin" query --db "$old_db" "$q"
}

step_breakdown() {
  local modes block
  modes=$(backends dq-modes | paste -sd' ')
  for block in 64 128; do
    # shellcheck disable=SC2086 # one word a backend
    check "per-kernel times at block $block: $modes" ncu --clock-control none --metrics gpu__time_duration.sum \
      -k regex:"prep_kernel|row_exp_kernel|bwd_(ws_|kv2_|b128_)?kernel|dq_finish" \
      "$bin" run tests/gpu/ncu_breakdown.lua --block=$block $modes
    # One line a kernel: its name and duration.
    # shellcheck disable=SC2016 # awk's own $ fields
    show awk '/^  *[A-Za-z_].*\(/ { n = $1 } /^ *(S=|backend)/ { print } /gpu__time_duration/ { print "   ", n, $(NF-1), $NF }' "$out/.check.out"
  done
}

step_profile() {
  check "ncu --set full" ncu --clock-control none -k regex:"bwd_(ws_|kv2_)?kernel" --set full --import-source no \
    -f -o "$out/profile" "$bin" run tests/gpu/ncu_profile.lua
  check "details page (profile.details.txt)" sh -c "ncu -i '$out/profile.ncu-rep' --page details > '$out/profile.details.txt'"
  check "stall samples (profile.source.csv)" sh -c "ncu -i '$out/profile.ncu-rep' --page source --csv --print-source sass > '$out/profile.source.csv'"
}

step_qchunk_table() { check "q_chunk table" "$bin" run tests/gpu/qchunk_table.lua && show cat "$out/.check.out"; }

step_vsa_lists() { check "problem.build at Wan 720P H40" "$bin" run tests/gpu/vsa_build_time.lua && show cat "$out/.check.out"; }

step_blackwell() { # each rung only when the one before passed
  local b names
  check "tcgen05 ladder rungs 1-2" "$tests_bin/tcgen05_ladder" || return
  names=$(backends default VSALAB_SM100_EMU=0 | paste -sd' ')
  # shellcheck disable=SC2086 # one word a backend
  check "every CASES case: $names" env VSALAB_SM100_EMU=0 "$bin" run tests/gpu/cases.lua $names || return
  # block 128 (bsa_bwd_b128_sm100a.cu): every path against the reference and the oracle
  check "block 128 against the reference and the oracle" "$bin" run tests/gpu/sm100a_emu_b128.lua hw || return
  rm -f "$out/blackwell.db"*
  check "seed sweep" env VSALAB_SM100_EMU=0 "$bin" run --db "$out/blackwell.db" experiments/seed_sweep.lua &&
    check "every row passed its spot check" rows_pass "$out/blackwell.db"
}

# ---------------------------------------------------------------------------
# The run.
if [ "$dry" = 1 ]; then
  echo "dry run: $bin, steps: ${steps[*]} (OUT=$out, CHECK_TIMEOUT=$check_timeout s)"
else
  mkdir -p "$out"
  : > "$summary"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu \
    --format=csv > "$out/gpu.txt" 2>&1
  cat "$out/gpu.txt"
fi
t_all=$SECONDS
stopped=
for step in "${steps[@]}"; do
  if [ -n "$stopped" ]; then
    [ "$dry" = 1 ] || record step "$step" 0 0 0 "not run: $stopped"
    continue
  fi
  echo "=== $step"
  log=$out/$step.log step_pass=0 step_fail=0 step_skip=''
  [ "$dry" = 1 ] || : > "$log"
  t0=$SECONDS
  "step_${step//-/_}"
  [ "$dry" = 1 ] && continue
  note=
  [ -z "$step_skip" ] || note="skipped: $step_skip"
  record step "$step" "$step_pass" "$step_fail" $((SECONDS - t0)) "$note"
  echo "=== $step: $step_pass passed, $step_fail failed, $((SECONDS - t0)) s"
  # A failing first look stops the run: later steps would only repeat it.
  if [ "$step" = quick ] && [ "$step_fail" -gt 0 ]; then stopped="quick failed"; fi
done
[ "$dry" = 1 ] && exit 0
rm -f "$out/.check.out"

# The summary: a line per spec file and per step, then the total.
# The binary's own revision (what was tested), not the tree's.
commit=$("$bin" --version 2>/dev/null | sed -n 's/.*(\([0-9a-f]*\)).*/\1/p' | cut -c1-7)
[ -n "$commit" ] || commit=$(git rev-parse --short HEAD 2>/dev/null || echo "unknown revision")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo
echo "=== summary ($(date -u +%Y-%m-%d), $commit, ${gpu:-unknown GPU}; logs in $out)"
failed=0
while IFS=$'\t' read -r kind name pass fail secs note; do
  printf '%-4s %-34s passed %4s  failed %3s  %5s s%s\n' "$kind" "$name" "$pass" "$fail" "$secs" "${note:+  ($note)}"
  if [ "$kind" = step ] && { [ "$fail" -gt 0 ] || [ "${note#not run}" != "$note" ]; }; then failed=$((failed + 1)); fi
done < "$summary"
total=$((SECONDS - t_all))
echo "total: ${#steps[@]} steps, $failed failed or not run, $total s"
all_steps=$(group_steps all | paste -sd' ')
if [ "${steps[*]}" = "$all_steps" ] && [ "$total" -gt "$ALL_BUDGET_S" ]; then
  echo "note: 'all' took $total s, over its budget of $ALL_BUDGET_S s"
fi
[ "$failed" -eq 0 ]
