/* umma_desc.h — encoders (and decoders) for the two descriptors every
 * Blackwell tcgen05.mma takes: the 64-bit shared-memory matrix descriptor
 * and the 32-bit instruction descriptor of kind::f16. Plain C, usable from
 * host code (tests/c/test_umma_desc.c checks them against the PTX ISA
 * tables, tests/c/test_umma_cutlass.cu against CUTLASS/CuTe's encoders) and
 * from device code (the sm_100a backward and its emulation).
 *
 * Source: PTX ISA 8.7+, "Matrix Descriptors" and "Instruction descriptor"
 * of the tcgen05 chapter (the same fields as CUTLASS's
 * cute/arch/mma_sm100_desc.hpp: UMMA::SmemDescriptor, UMMA::InstrDescriptor).
 *
 * Shared-memory matrix descriptor (64 bit):
 *   bits  0-13  start address >> 4 (shared::cta byte address)
 *   bits 16-29  leading byte offset (LBO) >> 4
 *   bits 32-45  stride byte offset (SBO) >> 4
 *   bits 46-48  fixed 0b001 (the descriptor version; Hopper's wgmma
 *               descriptor has 0 here and its swizzle in bits 62-63)
 *   bits 49-51  matrix base offset (0: atoms 1024-byte aligned)
 *   bit  52     LBO mode (0: relative byte offset)
 *   bits 61-63  swizzle: 0 none, 1 128B with 32B atom base, 2 128B, 4 64B, 6 32B
 * For the canonical layouts (the same ones wgmma reads):
 *   K-major, 128B swizzle: rows of 128 B (64 bf16 of K), 8-row atoms of
 *     1024 B; SBO = stride between 8-row groups along M/N; LBO unused for
 *     K extents within one atom (one MMA reads K = 16 elements = 32 B);
 *     a K step of 16 elements inside the atom adds 32 B to the start.
 *   MN-major, 128B swizzle: rows of 128 B (64 bf16 of M/N) per K index,
 *     8-row atoms; LBO = stride between 64-element M/N atoms, SBO =
 *     stride between 8-row groups along K; a K step of 16 = 2 groups.
 *
 * Instruction descriptor, kind::f16 (32 bit):
 *   bits  4-5   D format (0 f16, 1 f32)
 *   bits  7-9   A format (0 f16, 1 bf16)
 *   bits 10-12  B format (0 f16, 1 bf16)
 *   bit  13/14  negate A / B
 *   bit  15/16  A / B major-ness (0 K-major, 1 MN-major, "transpose")
 *   bits 17-22  N >> 3
 *   bits 24-28  M >> 4
 *   (dense, no saturation, no shift: the other bits 0)
 */
#ifndef VSA_UMMA_DESC_H
#define VSA_UMMA_DESC_H

#include <stdint.h>

#if defined(__CUDACC__)
#define VSA_UMMA_FN static __host__ __device__ __forceinline__
#else
#define VSA_UMMA_FN static inline
#endif

typedef enum {
  VSA_UMMA_SWIZZLE_NONE = 0,
  VSA_UMMA_SWIZZLE_128B_BASE32B = 1,
  VSA_UMMA_SWIZZLE_128B = 2,
  VSA_UMMA_SWIZZLE_64B = 4,
  VSA_UMMA_SWIZZLE_32B = 6
} vsa_umma_swizzle;

/* Shared-memory descriptor of an operand starting at shared address addr
 * (bytes; 16-byte aligned), with byte offsets lbo and sbo (multiples of 16,
 * < 2^18) and swizzle sw; base offset 0 and relative LBO mode. */
VSA_UMMA_FN uint64_t
vsa_umma_smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo, vsa_umma_swizzle sw)
{
  return (uint64_t)((addr >> 4) & 0x3FFFu) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 46) | ((uint64_t)sw << 61);
}

/* The descriptor's fields, decoded (bytes where the field is an address or
 * an offset). */
typedef struct {
  uint32_t start, lbo, sbo; /* bytes */
  uint32_t version, base_offset, lbo_mode, swizzle;
} vsa_umma_smem_fields;

VSA_UMMA_FN vsa_umma_smem_fields
vsa_umma_smem_decode(uint64_t d)
{
  vsa_umma_smem_fields f;
  f.start = (uint32_t)(d & 0x3FFFu) << 4;
  f.lbo = (uint32_t)((d >> 16) & 0x3FFFu) << 4;
  f.sbo = (uint32_t)((d >> 32) & 0x3FFFu) << 4;
  f.version = (uint32_t)((d >> 46) & 7u);
  f.base_offset = (uint32_t)((d >> 49) & 7u);
  f.lbo_mode = (uint32_t)((d >> 52) & 1u);
  f.swizzle = (uint32_t)((d >> 61) & 7u);
  return f;
}

/* Instruction descriptor of a dense kind::f16 MMA with bf16 A and B, fp32
 * D, M x N (M in {64, 128}, N a multiple of 8 (M = 64) or 16 (M = 128) in
 * [8, 256]), A / B MN-major when a_mn / b_mn. */
VSA_UMMA_FN uint32_t
vsa_umma_idesc_bf16(uint32_t M, uint32_t N, int a_mn, int b_mn)
{
  return (1u << 4) | (1u << 7) | (1u << 10) | ((uint32_t)(a_mn != 0) << 15) |
         ((uint32_t)(b_mn != 0) << 16) | (((N >> 3) & 0x3Fu) << 17) | (((M >> 4) & 0x1Fu) << 24);
}

typedef struct {
  uint32_t d_format, a_format, b_format, a_negate, b_negate, a_mn, b_mn, n, m;
  uint32_t other; /* every bit outside the fields above (0 when dense) */
} vsa_umma_idesc_fields;

VSA_UMMA_FN vsa_umma_idesc_fields
vsa_umma_idesc_decode(uint32_t d)
{
  vsa_umma_idesc_fields f;
  f.d_format = (d >> 4) & 3u;
  f.a_format = (d >> 7) & 7u;
  f.b_format = (d >> 10) & 7u;
  f.a_negate = (d >> 13) & 1u;
  f.b_negate = (d >> 14) & 1u;
  f.a_mn = (d >> 15) & 1u;
  f.b_mn = (d >> 16) & 1u;
  f.n = ((d >> 17) & 0x3Fu) << 3;
  f.m = ((d >> 24) & 0x1Fu) << 4;
  f.other = d & ~((3u << 4) | (7u << 7) | (7u << 10) | (3u << 13) | (3u << 15) |
                  (0x3Fu << 17) | (0x1Fu << 24));
  return f;
}

/* Byte address of bf16 element (mn, k) of an operand whose descriptor has
 * the given fields, for the swizzled canonical layouts (32B/64B/128B) and
 * the no-swizzle one, K-major (mn_major 0) or MN-major (1), k < 16 (one
 * MMA's K extent for 16-bit types); the swizzle XORs
 * address bits [4, 4+b) with bits [7, 7+b) (b = 1, 2, 3 for 32B, 64B, 128B),
 * on the absolute shared address as the hardware does. Returns 0xFFFFFFFF
 * for a descriptor this function does not model (a base offset, LBO mode 1,
 * the 32B-atom-base 128B swizzle, version != 1). */
VSA_UMMA_FN uint32_t
vsa_umma_element_addr(const vsa_umma_smem_fields *f, int mn_major, uint32_t mn, uint32_t k)
{
  if (f->version != 1 || f->base_offset != 0 || f->lbo_mode != 0) return 0xFFFFFFFFu;
  uint32_t width, bits; /* swizzle width in bytes, XOR bits */
  switch (f->swizzle) {
  case VSA_UMMA_SWIZZLE_NONE: width = 16; bits = 0; break;
  case VSA_UMMA_SWIZZLE_32B: width = 32; bits = 1; break;
  case VSA_UMMA_SWIZZLE_64B: width = 64; bits = 2; break;
  case VSA_UMMA_SWIZZLE_128B: width = 128; bits = 3; break;
  default: return 0xFFFFFFFFu;
  }
  const uint32_t per_row = width / 2; /* bf16 elements per swizzle row */
  uint32_t a;
  if (bits == 0) {
    /* Interleaved core matrices of 8 rows x 16 B (CuTe's INTERLEAVE
     * layouts). K-major: rows along M/N, SBO between 8-row M/N groups, LBO
     * between 8-element K groups. MN-major: rows along K, SBO between
     * 8-element M/N groups, LBO between 8-row K groups. */
    if (!mn_major)
      a = f->start + (mn / 8) * f->sbo + (k / 8) * f->lbo + (mn % 8) * 16 + (k % 8) * 2;
    else
      a = f->start + (mn / 8) * f->sbo + (k / 8) * f->lbo + (k % 8) * 16 + (mn % 8) * 2;
    return a;
  }
  if (!mn_major)
    a = f->start + (mn / 8) * f->sbo + (mn % 8) * width + k * 2;
  else
    a = f->start + (mn / per_row) * f->lbo + (k / 8) * f->sbo + (k % 8) * width +
        (mn % per_row) * 2;
  return a ^ (((a >> 7) & ((1u << bits) - 1u)) << 4);
}

#undef VSA_UMMA_FN
#endif
