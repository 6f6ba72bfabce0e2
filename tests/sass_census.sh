#!/usr/bin/env bash
# sass_census.sh — the SASS census of the sm100a backward (CI, no GPU):
#   tests/sass_census.sh CUOBJDUMP LIBRARY [OUT]
# For every Blackwell image (sm_100a, sm_100f, sm_103a) of every main
# kernel in LIBRARY — b64 (bsa_bwd_sm100a.cu) and b128
# (bsa_bwd_b128_sm100a.cu), each as fp32 dQ and fixed point — counts the
# instructions the design rests on and fails when one is missing or local
# memory appears:
#   SS / TS  tcgen05.mma with A from shared / tensor memory (UTCHMMA; the
#            TS form names tmem[...] first)
#   UTCBAR   tcgen05.commit               LDTM / STTM  tcgen05.ld / st
#   USETMAXREG  setmaxnreg                UBLKRED      the dQ bulk reduce
#   UTMALDG  TMA tensor loads             LDL / STL    spills: must be 0
# and the MMA shapes: the kind::f16 instruction descriptors the image loads
# as UMOV immediates (bf16 A/B, fp32 D: low bits 0x490; umma_desc.h), which
# must be exactly the kernel's set:
#   b64   0x8100490 M128 N64 K-major (S, dP), 0x8118490 M128 N64 MN-major
#         (dV^T, dK^T), 0x8210490 M128 N128 A K-, B MN-major (dQ, TS)
#   b128  0x8200490 M128 N128 K-major (S, dP), 0x8218490 M128 N128
#         MN-major (dV^T, dK^T), 0x8210490 (dQ, SS); 40 SS MMAs, no TS, no
#         tcgen05.st (dS is read from shared memory)
# The table goes to stdout and to OUT (default sass_census.txt); the same
# numbers are in kernels/NOTES.md.
set -euo pipefail
cuobjdump=$1 lib=$2 out=${3:-sass_census.txt}
"$cuobjdump" -sass "$lib" | awk '
  /arch = / { arch = $3 }
  /Function : / { k = ($3 ~ /bwd_b128_kernel/) ? "b128" : "b64"
                  fn = $3; sub(/.*_kernelILb/, "", fn); sub(/E.*/, "", fn)
                  fn = arch " " k " " (fn == "1" ? "fixed" : "fp32"); seen[fn] = k }
  /UTCHMMA/ { n[fn "," ($0 ~ /UTCHMMA tmem/ ? "TS" : "SS")]++ }
  /UMOV UR[0-9]+, 0x[0-9a-f]*490 / { match($0, /0x[0-9a-f]*490 /)
                                      id = substr($0, RSTART, RLENGTH - 1)
                                      if (!((fn, id) in ids)) { ids[fn, id] = 1; idl[fn] = idl[fn] " " id } }
  { line = $0
    while (match(line, /UTCBAR|LDTM|STTM|USETMAXREG|UBLKRED|UTMALDG|LDL|STL/)) {
      n[fn "," substr(line, RSTART, RLENGTH)]++; line = substr(line, RSTART + RLENGTH) } }
  function sorted(s,   a, m, i, j, t, r) {
    m = split(s, a, " ")
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    r = ""; for (i = 1; i <= m; i++) r = r (i > 1 ? "," : "") a[i]
    return r }
  END {
    split("SS TS UTCBAR LDTM STTM USETMAXREG UBLKRED UTMALDG LDL STL", ins, " ")
    want["b64"] = "0x8100490,0x8118490,0x8210490"
    want["b128"] = "0x8200490,0x8210490,0x8218490"
    printf "%-22s", "image kernel"; for (i = 1; i <= 10; i++) printf " %10s", ins[i]
    printf "  idesc\n"
    bad = 0; count = 0
    for (fn in seen) {
      count++; k = seen[fn]
      printf "%-22s", fn
      for (i = 1; i <= 10; i++) {
        c = n[fn "," ins[i]] + 0; printf " %10d", c
        # b64: every instruction present (TS: the dQ MMA); b128: exactly 40
        # SS MMAs, none TS, no tcgen05.st. Both: no local memory.
        zero = ins[i] == "LDL" || ins[i] == "STL" || (k == "b128" && (ins[i] == "TS" || ins[i] == "STTM"))
        if (zero ? c > 0 : c == 0) { bad = 1; missing = missing " " fn ":" ins[i] }
        if (k == "b128" && ins[i] == "SS" && c != 40) { bad = 1; missing = missing " " fn ":SS!=40" }
      }
      got = sorted(idl[fn]); printf "  %s\n", got
      if (got != want[k]) { bad = 1; missing = missing " " fn ":idesc(" got ")" }
    }
    if (count < 12) { print "FAIL: expected 12 kernel images (3 archs x 2 kernels x 2 modes), found " count; exit 1 }
    if (bad) { print "FAIL: missing or unexpected instructions, shapes or local memory:" missing; exit 1 }
    print "sass census: every image has its instructions and MMA shapes, no local memory"
  }' | tee "$out"
test "${PIPESTATUS[1]}" -eq 0
