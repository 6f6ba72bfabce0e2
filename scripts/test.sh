#!/usr/bin/env bash
# test.sh — set up, build and run every test that needs no GPU: the C unit
# tests and the busted specs (run inside build/vsalab), through ctest.
# The compiler's output goes to build/test-build.log; the terminal gets a
# one-line build verdict and ctest's own lines and summary.
#   scripts/test.sh
set -euo pipefail
case "${1:-}" in
  -h|--help)
    echo "usage: scripts/test.sh"
    echo "set up and build (scripts/setup.sh; compiler output in build/test-build.log),"
    echo "then run every test that needs no GPU through ctest: the C unit tests and the"
    echo "busted specs (docs/tests.md)"
    exit 0 ;;
  ?*) echo "test.sh: takes no arguments, got '$1' (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
start=$SECONDS
VSALAB_BUILD_LOG="$PWD/build/test-build.log" scripts/setup.sh
cd build
rc=0
ctest --output-on-failure --timeout 1500 || rc=$?
echo "test.sh: $((SECONDS - start)) s in all (build and tests); ctest exit status $rc"
exit "$rc"
