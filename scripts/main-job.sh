#!/usr/bin/env bash
# main-job.sh — set up, build and run the main job on this machine's GPU:
# experiments/wan720p.lua into results.db (or the --db given).
#   scripts/main-job.sh [vsalab run options] [script args]
# Script args are the experiment's: axis overrides and key=value options,
# e.g.  -a H=40 -a density=[0.1,0.25]   kernels=all   reference=timed
# (docs/experiments.md). By default the native kernel of this GPU is
# timed and spot-checked against the fp64 oracle at 12 points (6 at each
# block size).
set -euo pipefail
case "${1:-}" in
  -h|--help)
    echo "usage: scripts/main-job.sh [--db PATH] [--seed N] [--timing MODE] [--device N]"
    echo "                           [--devices all|0,1] [--context K=V] [--point-timeout S]"
    echo "                           [--resume RUN] [--check] [script args...]"
    echo "check for a GPU (nvidia-smi -L; not with --check), set up and build"
    echo "(scripts/setup.sh), then run experiments/wan720p.lua on this machine's GPU"
    echo "into results.db (or PATH); the options are vsalab run's, script"
    echo "args the experiment's: -a axis overrides and key=value options"
    echo "(docs/experiments.md)"
    exit 0 ;;
esac
# vsalab run's options (--db, --seed, --timing, ...) come first and go
# before the script; read them before the build so a missing value stops
# at once (exit 2), not after minutes of building or as bash's "unbound
# variable".
opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --db|--seed|--timing|--device|--devices|--context|--point-timeout|--resume)
      if [ $# -lt 2 ]; then echo "main-job.sh: $1 needs a value (see --help)" >&2; exit 2; fi
      opts+=("$1" "$2"); shift 2 ;;
    --check) opts+=("$1"); shift ;;
    --*) echo "main-job.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
# The main job times GPU kernels: with no GPU here, say so now, before
# minutes of setup and building (--check plans the points without one).
if [[ " ${opts[*]} " != *" --check "* ]]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "main-job.sh: no NVIDIA driver here (nvidia-smi not found): the main job runs on a GPU." >&2
    echo "  Run it on a GPU host; on this machine, build/vsalab run experiments/smoke.lua runs the same flow on the CPU." >&2
    exit 2
  fi
  if ! gpus=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU [0-9]' <<<"$gpus"; then
    echo "main-job.sh: nvidia-smi finds no GPU here (${gpus:-no output}): the main job runs on a GPU." >&2
    echo "  Run it on a GPU host; on this machine, build/vsalab run experiments/smoke.lua runs the same flow on the CPU." >&2
    exit 2
  fi
fi
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/vsalab run "${opts[@]}" experiments/wan720p.lua "$@"
