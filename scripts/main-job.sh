#!/usr/bin/env bash
# main-job.sh — set up, build and run the main job on this machine's GPU:
# experiments/wan720p.lua into results.db (or the --db given).
#   scripts/main-job.sh [--db PATH] [script args, e.g. heads=40 densities=0.25]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
db=results.db
if [ "${1:-}" = "--db" ]; then db=$2; shift 2; fi
exec build/vsalab run --db "$db" experiments/wan720p.lua "$@"
