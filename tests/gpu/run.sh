#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU test runner (NVIDIA H200 through the device
# tool, or any CUDA machine with a build of vsalab):
#   tests/gpu/run.sh [VSALAB_BINARY] [steps...]
# steps (default all but profile and blackwell): quick sm100emu specs
# sanitize invert seed_sweep wan720p modes compare fault devices plugin
# peers bsa peers_fault profile breakdown case12 vsa_lists blackwell
# plugin: the example CUDA plug-in (cases, graph capture, a sweep beside
# sm90a, a faulting plug-in). peers: seed_sweep peers=triton, sm90a and
# Triton on identical inputs in one run (needs .peer/ from
# tests/gpu/fetch_peer.sh, copied to the GPU host; PEERS_ARGS passes
# seed_sweep overrides). bsa: the main job and the seed sweep with
# peers=cudnn_bsa,triton (cuDNN frontend Block-Sparse Attention beside
# sm90a and Triton, every row checked), when .peers/ is installed
# (scripts/peers.sh); skipped, saying so, when it is not. peers_fault:
# tests/gpu/peers_fault_proof.sh (each installed peer crashing mid-run).
# sm100emu: the Blackwell backward's source on this GPU over the emulated
# tcgen05 layer (ladder rungs 1-2 with wgmma cross-checks, every kernel
# path against the reference, 20 bitwise launches, every CASES case).
# blackwell: the first-contact ladder for a B200/GB200/B300, stopping at
# the first failing rung: tensor memory round trip, one MMA of each shape,
# the full kernel on every CASES case, the seed sweep (never run here: no
# Blackwell GPU is available to this project).
# profile: Nsight Compute (--set full) on tests/gpu/profile.lua's launches
# (v3, v3 with the dQ reduce ablated, v4, v4 ablated), the details page
# and per-instruction stall samples (profile.source.csv).
# Logs go to $OUT (or ./gpu-out), one STEP.log per step (sass.txt for
# quick's SASS report) plus results.db, modes.db, compare.db, fault.db. WAN720P_ARGS passes axis overrides to the main
# job, e.g. WAN720P_ARGS="-a H=40 -a density=[0.1,0.25]".
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/vsalab}
shift || true
[ -x "$bin" ] || { echo "run.sh: no vsalab binary at $bin (build it, or pass its path first)" >&2; exit 2; }
# Every step needs an NVIDIA GPU: say so once instead of failing each step.
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "run.sh: no NVIDIA GPU or driver found (nvidia-smi -L failed): the GPU tests need one; scripts/test.sh runs the CPU tests" >&2
  exit 2
fi
steps=${*:-quick sm100emu specs sanitize invert seed_sweep wan720p modes compare fault devices plugin peers bsa peers_fault}
# The ladder binaries sit beside vsalab (pack.sh) or in build/tests.
tests_bin=$(dirname "$bin")
[ -x "$tests_bin/tcgen05_ladder_emu" ] || tests_bin=build/tests
# The emulated Blackwell backward joins the case runs and experiments.
export VSALAB_SM100_EMU=1
out=${OUT:-gpu-out}
mkdir -p "$out"
# The example plug-ins sit beside the binary (build/ or tests/gpu/pack.sh's folder).
export VSALAB_PLUGIN_DIR=${VSALAB_PLUGIN_DIR:-$(dirname "$bin")}
export PATH=$PATH:/usr/local/cuda/bin
# Lua modules packed beside the binary (tests/gpu/pack.sh) for hosts without them.
libs=$(dirname "$bin")/lua
if [ -d "$libs" ]; then
  export LUA_PATH="$libs/share/?.lua;$libs/share/?/init.lua;;"
  export LUA_CPATH="$libs/lib/?.so;;"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv | tee "$out/gpu.txt"
status=0
for step in $steps; do
  echo "=== $step"
  start=$(date +%s)
  case $step in
    specs) "$bin" run tests/run_busted.lua --tags=gpu -o utfTerminal tests/gpu 2>&1 | tee "$out/specs.log" ;;
    sanitize) # every tool's status counts, not only the last one's
      (bad=0
       for tool in memcheck racecheck synccheck; do
         compute-sanitizer --tool $tool --error-exitcode 3 "$bin" run tests/gpu/sanitize.lua > "$out/sanitize.$tool" 2>&1 || bad=1
         tail -4 "$out/sanitize.$tool"
       done
       exit $bad) | tee "$out/sanitize.log" ;;
    quick)
      # Per kernel: HGMMA shapes, local-memory traffic (spills), register
      # reallocation and TMA instructions; then the resource report.
      cuobjdump --dump-sass "$bin" 2>/dev/null | awk '/Function : /{fn=$3} {
          while (match($0, /HGMMA\.[0-9A-Za-z.]+|LDL|STL|USETMAXREG|UTMALDG|UBLKCP|UBLKRED/)) {
            n[fn " " substr($0, RSTART, RLENGTH)]++; $0 = substr($0, RSTART + RLENGTH) } }
          END { for (k in n) print n[k], k }' | grep -E "bwd|HGMMA" | sort -k2 | tee "$out/sass.txt"
      cuobjdump --dump-resource-usage "$bin" 2>/dev/null | grep -A1 -E "bwd_(ws_)?kernel" | tee -a "$out/sass.txt"
      # The default kernels must not touch local memory (the deterministic
      # v3 kernel's 24-register producer spills a few bytes: allowed).
      (spill=0
       if grep -E "sm90a_cu_[0-9a-f]+(10bwd_kernelILb[01]E|13bwd_ws_kernelILb0E).* (LDL|STL)" "$out/sass.txt"; then
         echo "FAIL: local-memory traffic (spills) in a main sm90a kernel"; spill=1
       fi
       "$bin" run tests/gpu/sm90a_quick.lua 2>&1 || exit 1
       exit $spill) | tee "$out/quick.log" ;;
    profile) # full sections of each main-kernel launch of profile.lua (v3, v3 with the
      # dQ reduce ablated, and v4 when built), then the details page and the
      # per-instruction stall samples (source page) as text
      ncu --clock-control none -k regex:"bwd_(ws_|kv2_)?kernel" --set full --import-source no \
        -f -o "$out/profile" "$bin" run tests/gpu/profile.lua 2>&1 | tail -20 | tee "$out/profile.log"
      ncu -i "$out/profile.ncu-rep" --page details >> "$out/profile.log" 2>&1
      ncu -i "$out/profile.ncu-rep" --page source --csv --print-source sass > "$out/profile.source.csv" 2>&1 || true ;;
    case12) "$bin" run tests/gpu/case12.lua 2>&1 | tee "$out/case12.log" ;;
    sm100emu)
      ("$tests_bin/tcgen05_ladder_emu" && "$bin" run tests/gpu/sm100a_emu.lua &&
       "$bin" run tests/gpu/cases.lua sm100a-emu) 2>&1 | tee "$out/sm100emu.log" ;;
    blackwell) # each rung runs only when the one before passed
      ("$tests_bin/tcgen05_ladder" &&
       VSALAB_SM100_EMU=0 "$bin" run tests/gpu/cases.lua sm100a &&
       VSALAB_SM100_EMU=0 "$bin" run --db "$out/blackwell.db" experiments/seed_sweep.lua) 2>&1 |
        tee "$out/blackwell.log" ;;
    vsa_lists) # problem.build time at Wan 720P H40, random vs VSA-like lists
      "$bin" run tests/gpu/vsa_build_time.lua 2>&1 | tee "$out/vsa_lists.log" ;;
    breakdown) # per-kernel times of one sm90a call a mode (fp32, fixed point) at 4k, 8k, 16k
      ncu --clock-control none --metrics gpu__time_duration.sum -k regex:"prep_kernel|row_exp_kernel|bwd_ws_kernel|dq_finish" \
        "$bin" run tests/gpu/breakdown.lua 2>&1 | tee "$out/breakdown.log" ;;
    seed_sweep) "$bin" run --db "$out/results.db" experiments/seed_sweep.lua 2>&1 | tee "$out/seed_sweep.log" ;;
    invert) "$bin" run --db "$out/results.db" experiments/invert_bench.lua 2>&1 | tee "$out/invert.log" ;;
    wan720p) t0=$SECONDS
         "$bin" run --db "$out/results.db" experiments/wan720p.lua ${WAN720P_ARGS:-} 2>&1 | tee "$out/wan720p.log"
         echo "wan720p: $((SECONDS - t0)) s wall (${WAN720P_ARGS:-default options})" | tee -a "$out/wan720p.log" ;;
    modes) # the four timing modes on one sweep, with clocks and the GEMM ceiling
      (bad=0
       for m in hot cold graph sustained; do
         "$bin" run --timing $m --db "$out/modes.db" experiments/seed_sweep.lua -a "Sq=[4096,32768]" reference=0 > "$out/modes.$m" 2>&1 || bad=1
         tail -8 "$out/modes.$m"
       done
       exit $bad) | tee "$out/modes.log"
      rc_modes=${PIPESTATUS[0]}
      "$bin" query --db "$out/modes.db" "SELECT run_id, kernel, Sq, mode, round(ms_median,4) AS ms, round(tflops,1) AS tflops, samples, rel_stddev, sm_clock_start_mhz, sm_clock_end_mhz, throttled, json_extract(extra, '$.capped_ms') AS capped_ms, json_extract(extra, '$.watts') AS watts FROM result ORDER BY kernel, Sq, run_id" | tee -a "$out/modes.log"
      (exit $rc_modes) ;;
    compare) tests/gpu/compare_proof.sh "$bin" 2>&1 | tee "$out/compare.log" ;;
    fault) tests/gpu/fault_proof.sh "$bin" 2>&1 | tee "$out/fault.log" ;;
    devices) tests/gpu/devices_proof.sh "$bin" 2>&1 | tee "$out/devices.log" ;;
    plugin) # the example CUDA plug-in: cases, graph capture, a sweep beside sm90a, a GPU fault
      (bad=0
       "$bin" run tests/run_busted.lua --tags=gpu -o utfTerminal tests/gpu/plugin_spec.lua || bad=1
       tests/gpu/plugin_proof.sh "$bin" || bad=1
       exit $bad) 2>&1 | tee "$out/plugin.log" ;;
    peers) # FastVideo's Triton backward as an external peer, same run and inputs as sm90a
      (rm -f "$out/peers.db"*
       # sm90a against Triton only: the emulated sm100a (a correctness test) stays out.
       env -u VSALAB_SM100_EMU "$bin" run --db "$out/peers.db" experiments/seed_sweep.lua peers=triton ${PEERS_ARGS:-} || exit 1
       "$bin" query --db "$out/peers.db" "SELECT kernel, Sq, point_hash, round(ms_median,4) AS ms, round(tflops,1) AS tflops, passed, samples, json_extract(extra, '$.peer.extra.inversion_ms') AS peer_inv_ms FROM result WHERE kernel IN ('sm90a', 'triton') ORDER BY Sq, kernel"
       n=$("$bin" query --db "$out/peers.db" --format csv "SELECT count(*) FROM result WHERE kernel = 'triton' AND passed = 1" | tail -1)
       echo "triton rows passing the oracle: $n"
       "$bin" compare --db "$out/peers.db" 1:sm90a 1:triton
       "$bin" report --db "$out/peers.db" -o "$out/peers.html" 1:sm90a 1:triton
       [ "$n" -gt 0 ]) 2>&1 | tee "$out/peers.log" ;;
    bsa) # cuDNN BSA beside sm90a and Triton: the main job and the seed sweep, one DB
      (if [ ! -d .peers ] || [ ! -d .peer/fastvideo_triton ]; then
         echo "bsa: skipped: .peers/ (scripts/peers.sh install) or .peer/ (tests/gpu/fetch_peer.sh) is missing"; exit 0
       fi
       rm -f "$out/bsa.db"*
       env -u VSALAB_SM100_EMU "$bin" run --db "$out/bsa.db" experiments/wan720p.lua peers=cudnn_bsa,triton ${BSA_ARGS:-} || exit 1
       env -u VSALAB_SM100_EMU "$bin" run --db "$out/bsa.db" experiments/seed_sweep.lua peers=cudnn_bsa,triton \
         kernels=sm90a,cudnn_bsa,triton ${BSA_ARGS:-} || exit 1
       "$bin" query --db "$out/bsa.db" "SELECT run_id, kernel, H, Sq, density, round(ms_median,4) AS ms, round(tflops,1) AS tflops, passed, worst_rel_l2, json_extract(extra, '$.peer.extra.main_kernel_ms') AS main_kernel_ms FROM result_summary WHERE kernel IN ('sm90a', 'cudnn_bsa', 'triton') ORDER BY run_id, H, Sq, density, kernel"
       n=$("$bin" query --db "$out/bsa.db" --format csv "SELECT count(*) FROM result WHERE kernel = 'cudnn_bsa' AND passed = 1" | tail -1)
       bad=$("$bin" query --db "$out/bsa.db" --format csv "SELECT count(*) FROM result WHERE kernel = 'cudnn_bsa' AND passed = 0" | tail -1)
       echo "cudnn_bsa rows passing the fp64 oracle: $n, failing: $bad"
       "$bin" compare --db "$out/bsa.db" 1:sm90a 1:cudnn_bsa
       "$bin" report --db "$out/bsa.db" -o "$out/bsa.html" 1:sm90a 1:cudnn_bsa 1:triton
       [ "$n" -gt 0 ] && [ "$bad" -eq 0 ]) 2>&1 | tee "$out/bsa.log" ;;
    peers_fault) tests/gpu/peers_fault_proof.sh "$bin" 2>&1 | tee "$out/peers_fault.log" ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || status=$rc
  echo "=== $step: exit $rc, $(( $(date +%s) - start )) s"
  # A failing first look stops the run: later steps would only repeat it.
  if [ "$step" = quick ] && [ "$rc" -ne 0 ]; then break; fi
done
exit $status
