/* test_umma_desc.c — kernels/sm100/umma_desc.h against the PTX ISA's
 * tcgen05 descriptor tables (hand-encoded values), and the decode of every
 * operand layout the sm100a backward builds against the TMA's 128-byte
 * swizzle (element (r, c) of a 64-column region at r·128 + ((c/8) ^ (r%8))·16
 * + (c%8)·2). No GPU, no dependency: runs in CI. tests/c/test_umma_cutlass.cu
 * checks the same encoders against CUTLASS. */
#include <stdio.h>

#include "../../kernels/sm100/umma_desc.h"

static int failures;
#define EXPECT_EQ(got, want, what)                                                       \
  do {                                                                                   \
    unsigned long long g_ = (unsigned long long)(got), w_ = (unsigned long long)(want); \
    if (g_ != w_) {                                                                      \
      printf("FAIL %s: got 0x%llx, want 0x%llx\n", what, g_, w_);                      \
      failures++;                                                                        \
    }                                                                                    \
  } while (0)

/* Byte offset of element (r, c) in a 64-column, 128B-swizzled region. */
static unsigned
tma_offset(unsigned r, unsigned c)
{
  return r * 128 + (((c / 8) ^ (r % 8)) << 4) + (c % 8) * 2;
}

int
main(void)
{
  /* Instruction descriptors (PTX ISA "Instruction descriptor", kind::f16):
   * D f32 = 1 @4, A bf16 = 1 @7, B bf16 = 1 @10, A/B MN-major @15/@16,
   * N>>3 @17, M>>4 @24. */
  EXPECT_EQ(vsa_umma_idesc_bf16(64, 128, 0, 0), 0x04200490u, "idesc M64 N128 K/K");
  EXPECT_EQ(vsa_umma_idesc_bf16(64, 256, 0, 1), 0x04410490u, "idesc M64 N256 K/MN");
  EXPECT_EQ(vsa_umma_idesc_bf16(128, 128, 1, 1), 0x08218490u, "idesc M128 N128 MN/MN");
  EXPECT_EQ(vsa_umma_idesc_bf16(128, 64, 0, 0), 0x08100490u, "idesc S, dP: M128 N64 K/K");
  EXPECT_EQ(vsa_umma_idesc_bf16(128, 64, 1, 1), 0x08118490u, "idesc dV^T, dK^T: M128 N64 MN/MN");
  EXPECT_EQ(vsa_umma_idesc_bf16(128, 128, 0, 1), 0x08210490u, "idesc dQ: M128 N128 K/MN");
  EXPECT_EQ(vsa_umma_idesc_bf16(128, 128, 0, 0), 0x08200490u, "idesc block 128 S, dP: M128 N128 K/K");
  vsa_umma_idesc_fields f = vsa_umma_idesc_decode(vsa_umma_idesc_bf16(128, 64, 1, 0));
  EXPECT_EQ(f.m, 128, "idesc decode m");
  EXPECT_EQ(f.n, 64, "idesc decode n");
  EXPECT_EQ(f.a_mn * 2 + f.b_mn, 2, "idesc decode majors");
  EXPECT_EQ(f.d_format * 100 + f.a_format * 10 + f.b_format, 111, "idesc decode formats");
  EXPECT_EQ(f.other, 0, "idesc decode: no stray bits");

  /* Shared-memory descriptor (PTX ISA "Matrix Descriptors"): start>>4 @0,
   * LBO>>4 @16, SBO>>4 @32, 0b001 @46, base offset @49, LBO mode @52,
   * swizzle @61 (2 = 128B). */
  EXPECT_EQ(vsa_umma_smem_desc(0x1400, 16, 1024, VSA_UMMA_SWIZZLE_128B),
            0x4000404000010140ull, "smem desc 0x1400, 16, 1024, 128B");
  EXPECT_EQ(vsa_umma_smem_desc(0x3FFF0, 0x3FFF0, 0x3FFF0, VSA_UMMA_SWIZZLE_NONE),
            0x00007FFF3FFF3FFFull, "smem desc field limits");
  EXPECT_EQ(vsa_umma_smem_desc(0, 0, 0, VSA_UMMA_SWIZZLE_32B), 0xC000400000000000ull,
            "smem desc 32B swizzle");
  vsa_umma_smem_fields s = vsa_umma_smem_decode(vsa_umma_smem_desc(0x28C00, 16384, 1024,
                                                                   VSA_UMMA_SWIZZLE_128B));
  EXPECT_EQ(s.start, 0x28C00, "decode start");
  EXPECT_EQ(s.lbo, 16384, "decode lbo");
  EXPECT_EQ(s.sbo, 1024, "decode sbo");
  EXPECT_EQ(s.version * 10 + s.swizzle, 12, "decode version, swizzle");

  /* The sm100a kernel's operands (kernels/sm100/bsa_bwd_sm100a.cu), at a
   * 1024-aligned base B, against the TMA layout they are loaded in:
   *  - a Q/dO pair: [d half h: 16 KB][128 rows], rows 64-127 the second q
   *    block; K-major (S, dP): k step kk of 16 d at B + (kk/4)·16K +
   *    (kk%4)·32; MN-major (dV^T, dK^T; M = d): LBO 16 KB, k step of 16
   *    rows = 2 KB;
   *  - K (or V): [d half: 8 KB][64 rows]; K-major (S): k step at
   *    (kk/4)·8K + (kk%4)·32; MN-major (dQ; N = d): LBO 8 KB;
   *  - P or dS: [128 q rows][64 kv], MN-major (N = kv), k step 2 KB. */
  const unsigned B = 0x9400;
  int bad = 0;
  for (unsigned kk = 0; kk < 8; kk++) {
    vsa_umma_smem_fields q = vsa_umma_smem_decode(
        vsa_umma_smem_desc(B + (kk / 4) * 16384 + (kk % 4) * 32, 16, 1024, VSA_UMMA_SWIZZLE_128B));
    vsa_umma_smem_fields k = vsa_umma_smem_decode(
        vsa_umma_smem_desc(B + (kk / 4) * 8192 + (kk % 4) * 32, 16, 1024, VSA_UMMA_SWIZZLE_128B));
    vsa_umma_smem_fields qt = vsa_umma_smem_decode(
        vsa_umma_smem_desc(B + kk * 2048, 16384, 1024, VSA_UMMA_SWIZZLE_128B));
    vsa_umma_smem_fields pt = vsa_umma_smem_decode(
        vsa_umma_smem_desc(B + kk * 2048, 16384, 1024, VSA_UMMA_SWIZZLE_128B));
    for (unsigned m = 0; m < 128; m++)
      for (unsigned e = 0; e < 16; e++) {
        const unsigned d = kk * 16 + e; /* global K index */
        /* S: A = Q pair K-major, element (q row m, d) */
        bad += vsa_umma_element_addr(&q, 0, m, e) != B + (d / 64) * 16384 + tma_offset(m, d % 64);
        /* dV^T: A = dO pair MN-major, element (d = m, q row = d) */
        bad += vsa_umma_element_addr(&qt, 1, m, e) != B + (m / 64) * 16384 + tma_offset(d, m % 64);
        if (m < 64) {
          /* S: B = K K-major, element (kv row m, d) */
          bad += vsa_umma_element_addr(&k, 0, m, e) != B + (d / 64) * 8192 + tma_offset(m, d % 64);
          /* dV^T: B = P MN-major, element (kv = m, q row = d) */
          bad += vsa_umma_element_addr(&pt, 1, m, e) != B + tma_offset(d, m);
        }
      }
  }
  for (unsigned kk = 0; kk < 4; kk++) { /* dQ: B = K MN-major (N = d), k = kv rows */
    vsa_umma_smem_fields kt = vsa_umma_smem_decode(
        vsa_umma_smem_desc(B + kk * 2048, 8192, 1024, VSA_UMMA_SWIZZLE_128B));
    for (unsigned n = 0; n < 128; n++)
      for (unsigned e = 0; e < 16; e++)
        bad += vsa_umma_element_addr(&kt, 1, n, e) != B + (n / 64) * 8192 + tma_offset(kk * 16 + e, n % 64);
  }
  EXPECT_EQ(bad, 0, "kernel operand layouts decode to the TMA layout");

  /* The block-128 kernel's operands (kernels/sm100/bsa_bwd_b128_sm100a.cu):
   * every tile (Q, dO, K, V, P, dS) is 128 rows x 128 columns, [column
   * half: 16 KB][128 rows], each half loaded as two 64-row TMA boxes 8 KB
   * apart (the same bytes: row r at r·128). K-major (S, dP: A and B; dQ: A
   * = dS, K = kv): k step kk at (kk/4)·16K + (kk%4)·32. MN-major (dV^T,
   * dK^T: A = dO/Q with M = d, B = P/dS with N = kv; dQ: B = K with N = d):
   * LBO 16 KB, k step of 16 rows = 2 KB. */
  bad = 0;
  for (unsigned kk = 0; kk < 8; kk++) {
    vsa_umma_smem_fields km = vsa_umma_smem_decode(
        vsa_umma_smem_desc(B + (kk / 4) * 16384 + (kk % 4) * 32, 16, 1024, VSA_UMMA_SWIZZLE_128B));
    vsa_umma_smem_fields mn = vsa_umma_smem_decode(
        vsa_umma_smem_desc(B + kk * 2048, 16384, 1024, VSA_UMMA_SWIZZLE_128B));
    for (unsigned m = 0; m < 128; m++)
      for (unsigned e = 0; e < 16; e++) {
        const unsigned kx = kk * 16 + e; /* global K index */
        /* K-major: element (row m, column kx) of the tile */
        bad += vsa_umma_element_addr(&km, 0, m, e) != B + (kx / 64) * 16384 + tma_offset(m, kx % 64);
        /* MN-major: element (column m, row kx) of the tile */
        bad += vsa_umma_element_addr(&mn, 1, m, e) != B + (m / 64) * 16384 + tma_offset(kx, m % 64);
      }
  }
  EXPECT_EQ(bad, 0, "block-128 operand layouts decode to the TMA layout");
  /* What the decode refuses rather than misreads. */
  vsa_umma_smem_fields h = s;
  h.version = 0; /* a Hopper-format descriptor */
  EXPECT_EQ(vsa_umma_element_addr(&h, 0, 0, 0), 0xFFFFFFFFu, "version 0 refused");
  h = s;
  h.base_offset = 1;
  EXPECT_EQ(vsa_umma_element_addr(&h, 0, 0, 0), 0xFFFFFFFFu, "base offset refused");
  if (failures == 0) printf("umma descriptors: all checks passed\n");
  return failures ? 1 : 0;
}
