#!/usr/bin/env bash
# main-job.sh — set up, build and run the main job on this machine's GPU:
# experiments/wan720p.lua into results.db (or the --db given).
#   scripts/main-job.sh [--db PATH] [script args]
# Script args are the experiment's: axis overrides and key=value options,
# e.g.  -a H=40 -a density=[0.1,0.25]   kernels=all   reference=timed
# (README.md, "Experiments"). By default the native kernel of this GPU is
# timed and spot-checked against the fp64 oracle at 6 points.
set -euo pipefail
case "${1:-}" in
  -h|--help)
    echo "usage: scripts/main-job.sh [--db PATH] [script args...]"
    echo "set up and build (scripts/setup.sh), then run experiments/wan720p.lua on this"
    echo "machine's GPU into results.db (or PATH); script args are the experiment's:"
    echo "-a axis overrides and key=value options (README.md, \"Experiments\")"
    exit 0 ;;
esac
cd "$(dirname "$0")/.."
scripts/setup.sh
db=results.db
if [ "${1:-}" = "--db" ]; then db=$2; shift 2; fi
exec build/vsalab run --db "$db" experiments/wan720p.lua "$@"
