#!/usr/bin/env bash
# peer_tables.sh — the same-call tables of docs/peers.md and kernels/NOTES.md:
# vsalab's sm90a (fixed-point dQ, the default, and sm90a-fp32; at block 128
# both run v5) beside cuDNN
# BSA, FA4 and FastVideo's Triton on identical inputs, and cuDNN's dense
# backward at density 1 on the same shapes, every row checked against the
# fp64 oracle. Needs the peers (scripts/peers.sh install, tests/gpu/fetch_peer.sh).
#   tests/gpu/peer_tables.sh [VSALAB_BINARY] PART...
# PART:
#   seed    B1 H8 D128 4k-131k, 25%, blocks 64 and 128 (seed_sweep.lua)
#   wan     Wan 720P H40 10% and 25%, blocks 64 and 128 (wan720p.lua)
#   dense   cuDNN dense at density 1: B1 H8 4k-131k and B1 H40 75,648 tokens
#           (Wan 720P's token count, full 128-token blocks)
#   table   print the tables (markdown) from the DB
# TIMING=hot (burst, the default) or sustained (3 s of back-to-back calls a
# row); SEED_SQ overrides the seed lengths (e.g. [4096,16384]). The rows go to
# TABLES_DB (default $OUT/tables.db, or gpu-out/tables.db); runs append, so
# parts can be measured at different times and printed together. The peers'
# files go to /dev/shm when it has 32 GB free (VSALAB_PEER_TMP overrides).
set -uo pipefail
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
fail() { echo "peer_tables.sh: $*" >&2; exit 2; }
# Paths given relative to the caller's directory, resolved before the cd.
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
bin=
if [ $# -gt 0 ] && [ -x "$1" ] && [ -f "$1" ]; then bin=$(abs "$1"); shift; fi
[ $# -gt 0 ] || usage
out=$(abs "${OUT:-gpu-out}")
db=$(abs "${TABLES_DB:-$out/tables.db}")
cd "$(dirname "$0")/../.." || exit 2
bin=${bin:-$PWD/build/vsalab}
timing=${TIMING:-hot}
case $timing in hot|sustained) ;; *) fail "TIMING must be hot or sustained, not '$timing'" ;; esac
# Every part and SEED_SQ checked before anything runs (a sweep takes minutes).
for part in "$@"; do
  case $part in seed|wan|dense|table) ;; *) fail "unknown part '$part' (seed, wan, dense, table)" ;; esac
done
[[ ${SEED_SQ:-[128]} =~ ^\[[0-9]+(,[0-9]+)*\]$ ]] || fail "SEED_SQ must be a list of token counts such as [4096,16384], not '$SEED_SQ'"
# The seed and dense parts run block 128: every length a whole number of blocks.
for n in $(echo "${SEED_SQ:-[128]}" | tr -d '[]' | tr ',' ' '); do
  [ $((10#$n % 128)) -eq 0 ] && [ "$((10#$n))" -gt 0 ] || fail "SEED_SQ: $n is not a positive multiple of 128 (the block sizes are 64 and 128)"
done
case " $* " in *" seed "*|*" wan "*|*" dense "*) mkdir -p "$(dirname "$db")" ;; esac
# The peers' inputs go through .npy files, 5 GB a point at Wan 720P H40:
# in memory (/dev/shm) where it has room, unless VSALAB_PEER_TMP says.
if [ -z "${VSALAB_PEER_TMP:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] &&
   [ "$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')" -gt $((32 * 1024 * 1024)) ] 2>/dev/null; then
  export VSALAB_PEER_TMP=/dev/shm
fi
[ -f "$db" ] || case " $* " in *" seed "*|*" wan "*|*" dense "*) ;; *) fail "no tables DB at $db (run a part first)" ;; esac
# sm90a-v5 is not listed: sm90a runs v5 at block 128, so its rows would time
# the same kernel twice.
kernels=sm90a,sm90a-fp32,cudnn_bsa,fa4,triton
# The exit status: the largest of the commands' (2, a usage error, stays 2).
status=0
keep() { [ "$1" -gt "$status" ] && status=$1; return 0; }
run() { echo "+ $*"; "$bin" run --db "$db" --timing "$timing" "$@"; keep $?; }
# The measuring parts in the order given, then the table (`table seed` prints
# what seed measured).
parts=()
for part in "$@"; do [ "$part" = table ] || parts+=("$part"); done
case " $* " in *" table "*) parts+=(table) ;; esac
for part in "${parts[@]}"; do
  case $part in
    seed) run experiments/seed_sweep.lua -a "Sq=${SEED_SQ:-[4096,8192,16384,32768,65536,131072]}" \
            -a "block=[64,128]" kernels=$kernels peers=cudnn_bsa,fa4,triton ;;
    wan) run experiments/wan720p.lua -a "H=[40]" -a "density=[0.1,0.25]" -a "block=[64,128]" \
            kernels=$kernels peers=cudnn_bsa,fa4,triton ;;
    dense) run experiments/seed_sweep.lua -a "Sq=${SEED_SQ:-[4096,8192,16384,32768,65536,131072]}" \
             -a "density=[1]" -a "block=[128]" kernels=cudnn_dense peers=cudnn_dense
           run experiments/seed_sweep.lua -a "Sq=[75648]" -a "H=[40]" -a "density=[1]" -a "block=[128]" \
             kernels=cudnn_dense peers=cudnn_dense ;;
    table)
      # One line per (timing, block, shape): TFLOPS on selected blocks of
      # each backend, the dense ceiling at the same token count and heads,
      # and sm90a over cuDNN BSA. A row whose check failed has no TFLOPS.
      "$bin" query --db "$db" --format markdown "
        WITH r AS (SELECT mode, layout, block, H, Sq, density, kernel, tflops, passed, experiment
                   FROM result WHERE kernel NOT IN ('invert', 'gemm_bf16', 'config')),
        d AS (SELECT mode, H, Sq, max(tflops) AS dense FROM r WHERE kernel = 'cudnn_dense' AND passed = 1
              GROUP BY mode, H, Sq)
        SELECT r.mode, r.layout, r.block, r.H, CASE WHEN r.experiment = 'wan720p' THEN 'Wan 720P' ELSE r.Sq END AS shape,
          r.density,
          round(max(CASE WHEN kernel = 'sm90a' THEN tflops END), 1) AS sm90a,
          round(max(CASE WHEN kernel = 'sm90a-fp32' THEN tflops END), 1) AS sm90a_fp32,
          round(max(CASE WHEN kernel = 'cudnn_bsa' THEN tflops END), 1) AS cudnn_bsa,
          round(max(CASE WHEN kernel = 'fa4' THEN tflops END), 1) AS fa4,
          round(max(CASE WHEN kernel = 'triton' THEN tflops END), 1) AS triton,
          round((SELECT dense FROM d WHERE d.mode = r.mode AND d.H = r.H
                 AND d.Sq = CASE WHEN r.experiment = 'wan720p' THEN 75648 ELSE r.Sq END), 1) AS cudnn_dense,
          round(max(CASE WHEN kernel = 'sm90a' THEN tflops END) / max(CASE WHEN kernel = 'cudnn_bsa' THEN tflops END), 3)
            AS sm90a_over_cudnn,
          sum(passed = 0) AS failed
        FROM r WHERE kernel <> 'cudnn_dense'
        GROUP BY r.mode, r.layout, r.block, r.H, r.Sq, r.density, r.experiment
        ORDER BY r.mode, r.layout, r.block, r.experiment DESC, r.Sq, r.density"; keep $?
      "$bin" query --db "$db" --format markdown "SELECT mode, H, Sq, round(tflops, 1) AS cudnn_dense, passed,
        round(worst_rel_l2, 5) AS worst_rel_l2 FROM result_summary WHERE kernel = 'cudnn_dense' ORDER BY mode, H, Sq"; keep $?
      "$bin" query --db "$db" --format markdown "SELECT kernel, count(*) AS rows, sum(passed = 1) AS passed,
        sum(passed = 0) AS failed, sum(passed IS NULL) AS unchecked_or_skipped, round(max(worst_rel_l2), 5) AS worst_rel_l2
        FROM result_summary WHERE kernel NOT IN ('invert', 'gemm_bf16', 'config') GROUP BY kernel"; keep $? ;;
  esac
done
exit $status
