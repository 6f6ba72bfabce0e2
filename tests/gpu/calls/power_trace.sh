#!/usr/bin/env bash
# power_trace.sh [BINARY] — power_trace.lua at 16k with nvidia-smi sampling
# SM clock, power and the active clock-event reasons every 20 ms.
set -uo pipefail
B=${1:-.gpu-bin/vsalab}
out=${OUT:-gpu-out}; mkdir -p "$out"
reasons=clocks_event_reasons.active # older drivers: clocks_throttle_reasons
nvidia-smi --query-gpu=$reasons --format=csv > /dev/null 2>&1 || reasons=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons \
  --format=csv,noheader -lms 20 > "$out/smi.csv" 2>&1 &
smi=$!
timeout 120 $B run tests/gpu/calls/power_trace.lua 16384 2000
kill $smi
# Summary: samples by clock and by reason.
awk -F', ' '{c[$2]++; r[$6]++} END {for (k in c) print "clock", k, c[k]; for (k in r) print "reason", k, r[k]}' "$out/smi.csv" | sort
