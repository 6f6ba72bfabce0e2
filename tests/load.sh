#!/usr/bin/env bash
# load.sh — run a command with every core of the machine busy: one busy
# loop per core (nproc), at the command's own priority, stopped when it
# ends; the command's exit status is load.sh's. No test may depend on the
# host's speed, so the suite must pass so (.ci/run runs ctest this way).
#
#   tests/load.sh COMMAND [ARGS...]      e.g. (cd build && ../tests/load.sh ctest)
#   LOAD_JOBS=N tests/load.sh ...         N loops instead of nproc
set -uo pipefail
case "${1:-}" in
  ""|-h|--help)
    echo "usage: tests/load.sh COMMAND [ARGS...]  (LOAD_JOBS=N loops; default: nproc)"
    [ -n "${1:-}" ] && exit 0 || exit 2 ;;
esac
jobs=${LOAD_JOBS:-$(nproc)}
[[ "$jobs" =~ ^[0-9]+$ ]] || { echo "load.sh: LOAD_JOBS must be a count, got '$jobs'" >&2; exit 2; }
pids=()
stop() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; }
trap stop EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < jobs; i++)); do
  ( trap - INT TERM; while :; do :; done ) &
  pids+=($!)
done
echo "load.sh: $jobs busy loop(s) on $(nproc) core(s) while: $*" >&2
"$@"
