/* bsa.h — block-sparse attention (VSA) on the host: metadata, inversion,
 * the fp32 reference forward/backward, the fp64 oracle and comparisons.
 *
 * Conventions shared by every function here and by kernels/kernels.h:
 *   block size `block` tokens for q and kv blocks alike, one of
 *   vsa_block_table (64, the default, or 128); nq = Sq/block q blocks,
 *   nkv = Skv/block kv blocks;
 *   q, o, dO: [B, H, Sq, D]; k, v: [B, H, Skv, D], row-major contiguous
 *     ("BHSD", the default), or with vsa_shape.layout = VSA_BSHD [B, Sq, H, D]
 *     and [B, Skv, H, D] (FastVideo's and cuDNN's order); dq, dk, dv follow
 *     the layout of q, k, v; lse, Delta and every list stay [B, H, ...];
 *   q2k_idx [B, H, nq, width] i32, q2k_num [B, H, nq] i32: q block i attends
 *     kv blocks q2k_idx[b,h,i,0:q2k_num[b,h,i]]; entries past the count are
 *     never read;
 *   k2q_idx [B, H, nkv, nq] i32, k2q_num [B, H, nkv] i32: the inverse lists,
 *     each in ascending q order, padded with -1;
 *   vbs ("variable_block_sizes") [nkv] i32 in [0, block]: key token t of kv
 *     block j is valid iff t mod block < vbs[j] (shared by all b, h);
 *   lse [B, H, Sq] f32 in Triton's base-2 "M format":
 *     lse = max_c(s·sm_scale·log2 e) + log2(Σ_c exp2(s·sm_scale·log2 e − max))
 *     over the valid keys c of the row; a row with no valid key has o = 0 and
 *     lse = VSA_LSE_EMPTY.
 * Backward (from FlashAttention-2's derivation, base 2 as in Triton's VSA):
 *   P = exp2(s·sm_scale·log2 e − lse) on valid keys, 0 elsewhere;
 *   Delta = rowsum(dO∘o); dP = dO vᵀ; dS = P∘(dP − Delta);
 *   dv = Pᵀ dO; dk = sm_scale·dSᵀ q; dq = sm_scale·dS k.
 */
#ifndef VSA_BSA_H
#define VSA_BSA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "tensor.h" /* vsa_dtype */

/* The default block size, and the only one the native kernels take today. */
#define VSA_BLOCK 64
/* The largest supported block size (sizes buffers that hold one block). */
#define VSA_BLOCK_MAX 128

/* The supported block sizes, ascending, each with its default video tile
 * (t, h, w) of volume `block` (src/core/block_size.c): the one list. The
 * Lua side reads it through vsalab.block_sizes(); adding 256 is one more
 * entry there (and VSA_BLOCK_MAX). The first entry is the default. */
typedef struct {
  int block;
  int tile[3];
} vsa_block_size_info;
extern const vsa_block_size_info vsa_block_table[];
extern const int vsa_n_block_sizes;
/* 1 when block is in vsa_block_table, else 0. */
int vsa_block_supported(int block);
/* block's entry, or NULL when it is not supported. */
const vsa_block_size_info *vsa_block_info(int block);
/* "64, 128": the supported sizes for error messages (static storage). */
const char *vsa_block_sizes_text(void);
/* 0 when block is supported; else -1 with "<what>: block size <b> is not
 * supported (supported: 64, 128)" recorded by vsa_fail. */
int vsa_block_check(int block, const char *what);
#define VSA_LOG2E 1.4426950408889634
/* lse of a row with no valid key: finite, and large enough that
 * exp2(s·c − lse) underflows to 0 in a backward that forgets to mask. */
#define VSA_LSE_EMPTY 1e30f

/* First validation failure found in block lists (0 = none). */
typedef enum {
  VSA_LIST_OK = 0,
  VSA_LIST_INDEX_RANGE = 1,  /* an index < 0 or >= the other side's count */
  VSA_LIST_COUNT_RANGE = 2,  /* a count < 0 or > the list width */
  VSA_LIST_REPEATED = 3      /* one index twice in one row */
} vsa_list_code;

typedef struct {
  int32_t code;  /* vsa_list_code */
  int32_t b, h, row; /* where: batch, head, row (q block for q2k lists) */
  int32_t value;     /* the offending index or count */
} vsa_list_error;

/* Format a list error as "q2k_idx: index 99 out of range [0, 8) at (b=0, h=1,
 * q block=3)"; `what` names the list argument, `row_name` the row kind. */
void vsa_list_error_format(const vsa_list_error *e, const char *what,
                           const char *row_name, int range, char *buf,
                           int buflen);

/* ---------------------------------------------------------------------------
 * Metadata builders (host)
 */

/* Random top-k lists. For each (b, h, q block) draw `count` distinct kv
 * blocks uniformly, in random order, padding the rest of the row with -1.
 * count = topk, or with ragged != 0 uniform in [0, topk] (0 included).
 * Deterministic in seed (splitmix64 per row, documented in builders.c).
 * idx [B,H,nq,width] (width >= topk), num [B,H,nq]. */
int vsa_build_random_topk(int B, int H, int nq, int nkv, int topk, int width,
                          int ragged, uint64_t seed, int32_t *idx,
                          int32_t *num);

/* variable_block_sizes for a video latent T×Hh×W cut into tT×tH×tW tiles
 * (tile volume must be a supported block size; it is the block size): one
 * block per tile in (t, h, w) row-major order,
 * each block's size the tile's volume clipped to the latent. Returns the
 * block count in *nblocks; vbs may be NULL to query the count only. */
int vsa_build_video_blocks(int T, int Hh, int W, int tT, int tH, int tW,
                           int32_t *vbs, int *nblocks);

/* ---------------------------------------------------------------------------
 * Inversion q2k -> k2q (host). Deterministic: each kv row lists its q blocks
 * in ascending order. Validates every row; returns -1 with *err filled and a
 * message recorded on the first failure (rows are scanned in (b, h, row)
 * order). Also used the other way round (k2q -> q2k) by swapping nq/nkv.
 */
int vsa_invert_cpu(const int32_t *q2k_idx, const int32_t *q2k_num, int BH,
                   int nq, int width, int nkv, int32_t *k2q_idx,
                   int32_t *k2q_num, vsa_list_error *err);

/* ---------------------------------------------------------------------------
 * Token layouts of q, k, v, o, dO, dq, dk, dv. Both are row-major and
 * contiguous; they differ in where a head's tokens lie: BHSD keeps one
 * head's S tokens together (token stride D), BSHD interleaves the heads
 * (token stride H·D). A kernel reaches token t of head bh = b·H + h at
 * vsa_head_offset(...) + t·vsa_token_stride(...), with no copy.
 */
typedef enum { VSA_BHSD = 0, VSA_BSHD = 1 } vsa_layout;

#if defined(__CUDACC__)
#define VSA_HOST_DEVICE __host__ __device__
#else
#define VSA_HOST_DEVICE
#endif

/* Elements between token t and token t+1 of one head. */
static inline VSA_HOST_DEVICE int64_t
vsa_token_stride(int layout, int H, int D)
{
  return layout == VSA_BSHD ? (int64_t)H * D : (int64_t)D;
}

/* Element offset of token 0 of head bh (= b·H + h) in a tensor of S tokens
 * a head (Sq for q, o, dO, dq; Skv for k, v, dk, dv). */
static inline VSA_HOST_DEVICE int64_t
vsa_head_offset(int layout, int H, int S, int D, int64_t bh)
{
  return layout == VSA_BSHD ? ((bh / H) * S * H + bh % H) * (int64_t)D
                            : bh * S * (int64_t)D;
}

/* The number of layouts: the enum's values are 0 .. vsa_n_layouts - 1. */
enum { vsa_n_layouts = 2 };
/* "bhsd" or "bshd" (NULL for any other value). */
const char *vsa_layout_name(int layout);
/* The layout named by name ("bhsd", "bshd"), or -1. */
int vsa_layout_parse(const char *name);

/* ---------------------------------------------------------------------------
 * Reference forward/backward on the host: fp32 arithmetic from bf16 inputs
 * (uint16_t), block-sparse loops, written to be read. Outputs are f32.
 */
typedef struct {
  int B, H, Sq, Skv, D;
  float sm_scale;
  int block; /* tokens per block: one of vsa_block_table (0 reads as 64 in
              * the native launchers, which take 64 and 128) */
  int layout; /* vsa_layout of q, k, v, o, dO and the gradients (0: BHSD) */
} vsa_shape;

int vsa_forward_ref_cpu(const vsa_shape *s, const uint16_t *q,
                        const uint16_t *k, const uint16_t *v,
                        const int32_t *q2k_idx, const int32_t *q2k_num,
                        int q2k_width, const int32_t *vbs, float *o,
                        float *lse);

/* Needs both list directions (q2k for dq, k2q for dk/dv); delta is scratch
 * [B,H,Sq] f32 and receives Delta. */
int vsa_backward_ref_cpu(const vsa_shape *s, const uint16_t *dO,
                         const uint16_t *q, const uint16_t *k,
                         const uint16_t *v, const uint16_t *o,
                         const float *lse, const int32_t *k2q_idx,
                         const int32_t *k2q_num, int k2q_width,
                         const int32_t *q2k_idx, const int32_t *q2k_num,
                         int q2k_width, const int32_t *vbs, float *dq,
                         float *dk, float *dv, float *delta);

/* ---------------------------------------------------------------------------
 * fp64 oracle (host): brute-force attention from a dense per-(b, h) block
 * mask built from q2k lists, for tests. All arrays are double except lists.
 * With o_in/lse_in NULL the oracle computes its own forward (o_out, lse_out
 * receive it when not NULL) and uses it in the backward; otherwise it uses
 * the given o and lse (the backward's contract given the forward's outputs).
 * Subsets: q_blocks/kv_blocks list which blocks to produce (dq rows of those
 * q blocks, dk/dv rows of those kv blocks); n = -1 means all. Rows not
 * produced are left untouched. bh_list selects (b*H + h) slices likewise.
 */
typedef struct {
  int B, H, Sq, Skv, D;
  int block;                         /* tokens per block (vsa_block_table) */
  double sm_scale;
  const double *q, *k, *v, *dO;      /* [B,H,S,D], or [B,S,H,D] (layout) */
  const double *o_in, *lse_in;       /* optional, as q and [B,H,Sq] */
  const int32_t *q2k_idx, *q2k_num;  /* [B,H,nq,width], [B,H,nq] */
  int q2k_width;
  const int32_t *vbs;                /* [nkv] */
  const int32_t *bh_list; int n_bh;
  const int32_t *q_blocks; int n_q_blocks;
  const int32_t *kv_blocks; int n_kv_blocks;
  int layout;                        /* vsa_layout of q, k, v, dO, o and
                                      * of dq, dk, dv, o_out (0: BHSD) */
} vsa_oracle_args;

int vsa_oracle(const vsa_oracle_args *a, double *o_out, double *lse_out,
               double *dq, double *dk, double *dv);

/* ---------------------------------------------------------------------------
 * Comparison. rel_l2 = ‖x − ref‖ / ‖ref‖ (or ‖x‖ when ref is all zero: then
 * 0 means equal), max_abs = max |x − ref|, norm_ratio = ‖x‖ / ‖ref‖; values
 * accumulated in fp64; NaN/Inf counted on each side separately.
 */
typedef struct {
  double diff2, ref2, x2, max_abs;
  int64_t nonfinite_x, nonfinite_ref, n;
} vsa_compare_sums;

/* Host twin of vsa_compare (kernels.h): adds the sums of x against ref (n
 * elements each; bf16, f32 or f64 either side) into *s, which the caller
 * zeroes first. diff2, ref2, x2 and max_abs cover the pairs where both
 * values are finite; n grows by n. */
void vsa_compare_cpu(const void *x, vsa_dtype xt, const void *ref,
                     vsa_dtype rt, int64_t n, vsa_compare_sums *s);

#ifdef __cplusplus
}
#endif

#endif
