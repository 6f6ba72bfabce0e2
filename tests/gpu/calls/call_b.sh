#!/usr/bin/env bash
# One device call: the sm100a emulation under racecheck/synccheck, its Wan
# 720P spot checks (H=4), the --devices proof on one GPU, VSA-like list
# build times, the plug-in proof and seed_sweep peers=triton. Logs in one
# archive ($OUT/logs.tgz).
set -uo pipefail
B=.gpu-bin/vsalab; O=/tmp/o; mkdir -p $O
export VSALAB_SM100_EMU=1
for t in racecheck synccheck; do
  timeout 200 compute-sanitizer --tool $t --print-limit 4 $B run tests/gpu/sanitize_one.lua sm100a-emu sm100a-emu-fp32 > $O/$t.txt 2>&1
  echo "$t rc $?: $(grep -E 'SUMMARY' $O/$t.txt | tr '\n' ' ')"
done
timeout 150 $B run --db $O/wan.db experiments/wan720p.lua -a H=4 > $O/wan.log 2>&1; echo "wan H4 rc $?"
$B query --db $O/wan.db "SELECT kernel, density, passed, round(ms_median,3) ms, round(tflops,1) t FROM result ORDER BY density, kernel"
OUT=$O timeout 200 tests/gpu/run.sh $B devices vsa_lists > $O/steps1.log 2>&1; echo "devices+vsa_lists rc $?"
tail -4 $O/devices.log; tail -6 $O/vsa_lists.log
PEERS_ARGS="-a Sq=[4096,16384]" OUT=$O timeout 220 tests/gpu/run.sh $B plugin peers > $O/steps2.log 2>&1; echo "plugin+peers rc $?"
tail -8 $O/plugin.log; tail -16 $O/peers.log
tar czf $OUT/logs.tgz -C /tmp o
