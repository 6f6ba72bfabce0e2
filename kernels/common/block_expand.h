/* block_expand.h — 128-token k2q lists as 64-token sub-block lists, for
 * the native backwards' 128-token path (host API internal to kernels/).
 *
 * The sm90a main kernels tile 64 q rows at a time; at block 128 the
 * launcher expands the lists once (one small launch, ~1 µs at 16k) and
 * runs the kernel whose CTA owns both 64-row halves of a kv block and
 * shares every q tile between them (v4, bsa_bwd_kv2_sm90a.cu). Entries
 * outside [0, nq) are dropped and counts clamped to the width, as every
 * main kernel treats them, so the result equals the 128-token semantics
 * of src/core/bsa.h.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include "bsa.h"

namespace vsa_bwd {

struct expanded_lists {
  int32_t *k2q_idx;  // [B·H, 2·nkv, width]: sub-block lists, -1 tails
  int32_t *k2q_num;  // [B·H, 2·nkv]
  int32_t *vbs;      // [2·nkv], each in [0, 64]
  int width;         // 2·min(width, nq)
};

/* Scratch bytes of the expanded lists of B·H heads of nkv kv blocks and
 * nq q blocks (128 tokens each; a multiple of 256). */
size_t block_expand_bytes(int64_t BH, int nkv, int nq);

/* Expand k2q_idx [B·H, nkv, width] / k2q_num [B·H, nkv] of 128-token
 * blocks (nq q blocks of 128) and vbs [nkv] (each clamped to [0, 128])
 * into `scratch` (block_expand_bytes), described by *out. */
cudaError_t launch_block_expand(const int32_t *k2q_idx, const int32_t *k2q_num, int width,
                                int64_t BH, int nkv, int nq, const int32_t *vbs, void *scratch,
                                expanded_lists *out, cudaStream_t stream);

/* vbs64[2J], vbs64[2J+1] = the 64-token halves of vbs128[J] (clamped to
 * [0, 128]), J < nkv: what the fixed-point preprocess reads at block 128
 * when the main kernel keeps 128-token lists. */
cudaError_t launch_vbs_split(const int32_t *vbs128, int nkv, int32_t *vbs64, cudaStream_t stream);

/* Tokens per block of s (0 reads as 64). */
inline int
block_of(const vsa_shape *s)
{
  return s->block ? s->block : 64;
}

/* The 64-token view of a 128-token problem s: *s64 (block 64, the same
 * tokens) and the expanded lists, written by one launch into `tail`
 * (block_expand_bytes of scratch). cudaErrorInvalidValue when a length is
 * not a multiple of 128. */
inline cudaError_t
as_64_token(const vsa_shape *s, const int32_t *k2q_idx, const int32_t *k2q_num, int width,
            const int32_t *vbs, void *tail, vsa_shape *s64, expanded_lists *out,
            cudaStream_t stream)
{
  if (s->Sq % 128 || s->Skv % 128 || s->Sq <= 0 || s->Skv <= 0 || width < 1)
    return cudaErrorInvalidValue;
  *s64 = *s;
  s64->block = 64;
  return launch_block_expand(k2q_idx, k2q_num, width, (int64_t)s->B * s->H, s->Skv / 128,
                             s->Sq / 128, vbs, tail, out, stream);
}

/* Extra scratch a 128-token problem needs past its 64-token view's. */
inline size_t
block128_extra_bytes(const vsa_shape *s)
{
  return block_of(s) == 128 ? block_expand_bytes((int64_t)s->B * s->H, s->Skv / 128, s->Sq / 128)
                            : 0;
}

}  // namespace vsa_bwd
