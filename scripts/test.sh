#!/usr/bin/env bash
# test.sh — set up, build and run every test that needs no GPU: the C unit
# tests and the busted specs (run inside build/vsalab), through ctest.
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure --timeout 1500
