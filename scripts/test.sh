#!/usr/bin/env bash
# test.sh — set up, build and run every test that needs no GPU: the C unit
# tests and the busted specs (run inside build/vsalab), through ctest.
#   scripts/test.sh
set -euo pipefail
case "${1:-}" in
  -h|--help)
    echo "usage: scripts/test.sh"
    echo "set up and build (scripts/setup.sh), then run every test that needs no GPU"
    echo "through ctest: the C unit tests and the busted specs (README.md, \"Tests\")"
    exit 0 ;;
  ?*) echo "test.sh: takes no arguments, got '$1' (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure --timeout 1500
