/* vsa_lists.h — VSA-like block lists on the host: correlated inputs on a
 * video latent, FastVideo's top-k selection from mean-pooled q·kᵀ, and the
 * pair-sharing statistic of a set of lists (src/core/vsa_lists.c).
 *
 * Token layout (VSA's, and vsalab.video_blocks'): the latent T×Hh×W is cut
 * into tT×tH×tW tiles whose volume is the block size (64: 4×4×4; 128:
 * 2×8×8, FastVideo's VSA-128 tiles); tile (it, ih, iw) is block
 * (it·nh + ih)·nw + iw; inside a block the tile's cells, clipped to the
 * latent, come first in (t, h, w) row-major order, then padding up to the
 * block size. So block j's valid tokens are its first vbs[j].
 * Tensors here are host arrays: x [BH, S, D] bf16 (uint16_t), S = block·blocks,
 * row-major; lists [BH, rows, width] i32 as in bsa.h.
 */
#ifndef VSA_VSA_LISTS_H
#define VSA_VSA_LISTS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int T, Hh, W;   /* latent extents (cells) */
  int tT, tH, tW; /* tile extents; tT·tH·tW = the block size */
} vsa_latent;

/* Threads the host loops use (one (b, h) slice at a time each): the online
 * CPUs, at most 64. Results never depend on the thread count. */
int vsa_lists_default_threads(void);

/* Correlated inputs: x holds white noise (e.g. cuRAND normals) and is
 * replaced in place, per (b, h) slice and channel d, by
 *   1. the noise at the latent's cells (padding tokens are ignored),
 *   2. filtered along w, then h, then t by a Gaussian of standard deviation
 *      σ = ell/2 cells, truncated at radius R = ceil(3σ): at cell c,
 *        y[c] = Σ_{|r|≤R, c+r inside} g[r]·x[c+r] / sqrt(Σ_{same r} g[r]²),
 *      g[r] = exp(−r²/(2σ²)), so each pass keeps unit-variance white noise
 *      at unit variance, edges included. The field's correlation between
 *      cells r apart along an axis is then exp(−(r/ell)²): ell is the 1/e
 *      correlation length. ell = 0 skips the filter (white noise).
 *   3. centred and scaled to mean 0, variance 1 over the latent's cells
 *      (fp64 sums; a channel of zero variance is left as it is),
 *   4. rounded to bf16 (nearest even); padding tokens become 0 (FastVideo
 *      pads tiles with zeros).
 * Arithmetic: f32 filter passes (taps in ascending r), fp64 statistics, a
 * fixed order: the same input gives the same bits for any thread count.
 * Errors: bad latent or tile, ell outside [0, 64], D < 1, host OOM. */
int vsa_smooth_latent(uint16_t *x, int BH, int D, const vsa_latent *lat,
                      double ell, int nthreads);

/* FastVideo's VSA selection (fastvideo-kernel ops.video_sparse_attn:
 * fused_block_mean, then scores, then fused_topk_mask), per (b, h):
 *   1. pooled means: each block's valid tokens (q blocks: q_vbs, kv blocks:
 *      kv_vbs) summed in fp32 (here: fp64, rounded once to fp32), divided
 *      by vbs in fp32, rounded to bf16;
 *   2. scores s[i][j] = bf16(bf16(Σ_d q̄[i][d]·k̄[j][d]) · f32(1/f32(√D)))
 *      (the dot in f32 in ascending d, rounded to bf16 as torch.matmul of
 *      bf16 tensors; torch's division of a CUDA tensor by a scalar
 *      multiplies by the fp32 reciprocal);
 *   3. each q block i keeps its topk kv blocks of largest score, ties to
 *      the lower kv index (fused_topk_mask's rule).
 * A block with vbs = 0: FastVideo's mean is 0/0 = NaN and NaN scores never
 * pass fused_topk_mask's comparisons, so an empty kv block is never kept
 * (rows keep min(topk, kv blocks with vbs > 0)) and an empty q block keeps
 * none (num = 0). FastVideo's own tilings never make such blocks.
 * Rows list their blocks in ascending kv order (the order of FastVideo's
 * mask), padded with -1 to width.
 * q [BH, block·nq, D], k [BH, block·nkv, D] bf16; q_vbs [nq], kv_vbs [nkv]
 * in [0, block]; idx [BH, nq, width], num [BH, nq]. Errors: an unsupported
 * block size, shapes, topk outside [0, min(nkv, width)], a vbs outside
 * [0, block], a non-finite pooled value (named by tensor, (b·H + h) slice
 * and block), host OOM. */
int vsa_build_vsa_topk(const uint16_t *q, const uint16_t *k, int BH, int block, int nq,
                       int nkv, int D, const int32_t *q_vbs,
                       const int32_t *kv_vbs, int topk, int width,
                       int32_t *idx, int32_t *num, int nthreads);

/* Pair sharing of q2k lists idx [BH, nq, width] / num [BH, nq]: kv block j's
 * partner is j xor 1 (2m with 2m+1: neighbours along w in the tile grid; an
 * odd last block has none). For each (b, h) and each kv block j with a
 * partner that some q block selects, f_j = |k2q(j) ∩ k2q(partner)| /
 * |k2q(j)|; *sharing is the mean of f_j over all such (b, h, j), *counted
 * their number (0: *sharing = NaN). For uniform random lists of topk out of
 * nkv, E f_j = (topk − 1)/(nkv − 1) ≈ the density. Errors: an index out of
 * [0, nkv), a repeated index or a count outside [0, width], named by
 * (slice, q block). */
int vsa_list_sharing(const int32_t *idx, const int32_t *num, int BH, int nq,
                     int width, int nkv, double *sharing, int64_t *counted);

#ifdef __cplusplus
}
#endif

#endif
