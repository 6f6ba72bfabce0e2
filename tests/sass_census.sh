#!/usr/bin/env bash
# sass_census.sh — the SASS census of the sm100a backward (CI, no GPU):
#   tests/sass_census.sh CUOBJDUMP LIBRARY [OUT]
# For every Blackwell image (sm_100a, sm_100f, sm_103a) of every main
# kernel (bwd_kernel<false> fp32 dQ, <true> fixed point) in LIBRARY, counts
# the instructions the design rests on and fails when one is missing or
# local memory appears:
#   UTCHMMA  tcgen05.mma (SS and TS)     UTCBAR     tcgen05.commit
#   LDTM     tcgen05.ld                   STTM       tcgen05.st
#   USETMAXREG  setmaxnreg                UBLKRED    the dQ bulk reduce
#   UTMALDG  TMA tensor loads             LDL / STL  spills: must be 0
# The table goes to stdout and to OUT (default sass_census.txt); the same
# numbers are in kernels/NOTES.md.
set -euo pipefail
cuobjdump=$1 lib=$2 out=${3:-sass_census.txt}
"$cuobjdump" -sass "$lib" | awk '
  /arch = / { arch = $3 }
  /Function : / { fn = $3; sub(/.*bwd_kernelILb/, "", fn); sub(/E.*/, "", fn)
                  fn = arch " " (fn == "1" ? "fixed" : "fp32"); seen[fn] = 1 }
  { line = $0
    while (match(line, /UTCHMMA|UTCBAR|LDTM|STTM|USETMAXREG|UBLKRED|UTMALDG|LDL|STL/)) {
      n[fn "," substr(line, RSTART, RLENGTH)]++; line = substr(line, RSTART + RLENGTH) } }
  END {
    split("UTCHMMA UTCBAR LDTM STTM USETMAXREG UBLKRED UTMALDG LDL STL", ins, " ")
    printf "%-20s", "image kernel"; for (i = 1; i <= 9; i++) printf " %10s", ins[i]; printf "\n"
    bad = 0; count = 0
    for (fn in seen) {
      count++
      printf "%-20s", fn
      for (i = 1; i <= 9; i++) {
        c = n[fn "," ins[i]] + 0; printf " %10d", c
        if (i <= 7 && c == 0) { bad = 1; missing = missing " " fn ":" ins[i] }
        if (i > 7 && c > 0) { bad = 1; missing = missing " " fn ":" ins[i] }
      }
      printf "\n"
    }
    if (count < 6) { print "FAIL: expected 6 kernel images (3 archs x 2), found " count; exit 1 }
    if (bad) { print "FAIL: missing instructions or local memory:" missing; exit 1 }
    print "sass census: every image has every instruction, no local memory"
  }' | tee "$out"
test "${PIPESTATUS[1]}" -eq 0
