#!/usr/bin/env bash
# test.sh — set up, build and run every test that needs no GPU: the C unit
# tests and the busted specs (run inside build/vsalab), through ctest.
# The compiler's output goes to build/test-build.log; the terminal gets a
# one-line build verdict and ctest's own lines and summary.
#   scripts/test.sh [--busy]
# --busy runs the tests with every core busy (tests/load.sh; CI does): no
# test may depend on the host's speed.
set -euo pipefail
busy=()
case "${1:-}" in
  -h|--help)
    echo "usage: scripts/test.sh [--busy]"
    echo "set up and build (scripts/setup.sh; compiler output in build/test-build.log),"
    echo "then run every test that needs no GPU through ctest: the C unit tests and the"
    echo "busted specs (docs/tests.md). --busy: with one busy loop a core (tests/load.sh)"
    exit 0 ;;
  --busy) busy=(../tests/load.sh) ;;
  ?*) echo "test.sh: takes no arguments but --busy, got '$1' (see --help)" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "test.sh: one argument at most, got $# (see --help)" >&2; exit 2; }
cd "$(dirname "$0")/.."
start=$SECONDS
VSALAB_BUILD_LOG="$PWD/build/test-build.log" scripts/setup.sh
cd build
rc=0
"${busy[@]}" ctest --output-on-failure --timeout 3000 || rc=$?
echo "test.sh: $((SECONDS - start)) s in all (build and tests); ctest exit status $rc"
exit "$rc"
