/* bwd_prep.h — what the native backwards (sm_90a, sm_100a) share around
 * their main kernels: the preprocess (Delta, zeroed dQ accumulator and
 * counters, the longest-list-first work order), the dQ postprocess, the
 * q-chunk and head-group arithmetic, and the TMA tensor maps of the
 * bf16 inputs. Host-side C++ API internal to kernels/; the public
 * launchers are in kernels.h.
 *
 * "Rows": row bh·S + t is token t of head bh (= b·H + h) of a tensor of S
 * tokens a head. Internal arrays (lse, Delta, the dQ accumulator, the
 * exponents) are indexed by row directly; the user tensors q, k, v, o, dO,
 * dq, dk, dv are in vsa_shape.layout (src/core/bsa.h): BHSD puts row r at
 * element r·D, BSHD at ((b·S + t)·H + h)·D (row_offset). BHSD addresses
 * are exactly those of before the layout existed.
 *
 * The dQ accumulator is fp32 [B·H·Sq, 128] rows. "Swizzled" rows store
 * 16-byte chunk c of row r at chunk c ^ dq_row_swizzle(r), the order the
 * sm90a kernels stage dQ in shared memory without bank conflicts; the
 * postprocess reads them back in order.
 */
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "bsa.h" // vsa_layout

namespace vsa_bwd {

constexpr int BLK = 64;  // tokens per block
constexpr int D = 128;   // head dim of the native kernels

/* Element offset of row `row` (= bh·S + t) of a user tensor of S tokens a
 * head in `layout`. BSHD divides in 32 bits (a 64-bit division would cost
 * the postprocess more than its memory traffic): every launcher keeps
 * B·H·S below 2^31, so row, bh and S all fit. */
__host__ __device__ __forceinline__ int64_t
row_offset(int layout, int H, int64_t S, int64_t row)
{
  if (layout != VSA_BSHD) return row * D;
  const uint32_t r = (uint32_t)row, s = (uint32_t)S, h = (uint32_t)H;
  const uint32_t bh = r / s, t = r - bh * s, b = bh / h;
  return (((int64_t)b * s + t) * h + (bh - b * h)) * D;
}

/* Where token 0 of head bh lies in a tile_map map: coordinate h (the
 * head in BSHD, 0 in BHSD) and row (b·S in BSHD, bh·S in BHSD); token t
 * is then at (column, h, row + t). Both fit in int (B·H·S < 2^31), and
 * so does bh: the division is 32-bit (the producer computes this once a
 * CTA or item). */
struct head_coord {
  int h, row;
};
__host__ __device__ __forceinline__ head_coord
tma_head(int layout, int H, int64_t S, int64_t bh)
{
  head_coord c;
  if (layout == VSA_BSHD) {
    const uint32_t b = (uint32_t)bh / (uint32_t)H;
    c.h = (int)((uint32_t)bh - b * (uint32_t)H);
    c.row = (int)(b * (uint32_t)S);
  } else {
    c.h = 0;
    c.row = (int)(bh * S);
  }
  return c;
}

/* Element offset of token t of head bh of a user tensor of S tokens a head
 * (vsa_head_offset + t·vsa_token_stride; BHSD: (bh·S + t)·D as before).
 * Kept 64-bit: with the 32-bit division ptxas spilled the sm90a v4
 * fixed-point kernel's epilogue (44 bytes); callers compute it once, outside
 * loops that hold accumulators (inside the sm100a epilogue loop it spilled
 * too). */
__host__ __device__ __forceinline__ int64_t
token_offset(int layout, int H, int64_t S, int64_t bh, int64_t t)
{
  return layout == VSA_BSHD ? (((bh / H) * S + t) * H + bh % H) * D : (bh * S + t) * D;
}

#ifdef __CUDACC__
#include <cuda_bf16.h>
/* The sm100a dK/dV epilogue's store: bf16(a[x]·sc) to out[x·ld], x < 64,
 * ld = D (H = 0: BHSD, the compile-time stride of before, immediate
 * offsets) or H·D (BSHD: a walking pointer; 64 addresses of a runtime
 * stride made ptxas spill). */
__device__ __forceinline__ void
store_column(__nv_bfloat16 *out, int H, const float *a, float sc)
{
  if (H == 0) {
#pragma unroll
    for (int x = 0; x < 64; x++) out[(int64_t)x * D] = __float2bfloat16_rn(a[x] * sc);
  } else {
    const int64_t ld = (int64_t)H * D;
#pragma unroll
    for (int x = 0; x < 64; x++, out += ld) *out = __float2bfloat16_rn(a[x] * sc);
  }
}
#endif

/* Elements between consecutive tokens of one head. */
__host__ __device__ __forceinline__ int
token_stride(int layout, int H)
{
  return layout == VSA_BSHD ? H * D : D;
}

/* The chunk swizzle of a "swizzled" dQ row: a permutation of 0..7 by row.
 * A warp's 8-byte stores of a wgmma fragment are served 16 lanes (rows
 * r..r+3 of one 8-row group, two chunks each) per pass; giving those rows
 * the values 0, 2, 4, 6 (and rows r+4..r+7 the values 1, 3, 5, 7) puts a
 * pass's 8 chunks in 8 different bank groups. The plain row & 7 put two
 * of them in each group (2-way conflicts; Nsight Compute, v3.1). */
__host__ __device__ __forceinline__ int
dq_row_swizzle(int64_t row)
{
  return (int)(((row & 3) << 1) | ((row >> 2) & 1));
}

/* Scratch the preprocess zeroes and the work order it builds; with row_exp
 * set, also the fixed-point exponents of the deterministic dQ mode. */
struct prep_params {
  const uint16_t *dO, *o;  // bf16, rows in `layout` (row_offset with Sq)
  int layout, H;           // vsa_layout of dO, o, k, v; heads a batch
  float *delta;            // [rows] out: Σ_d dO·o (fp32)
  float *dq_accum;         // [rows, D] out: zeroed
  int64_t rows;
  int *zero_a, *zero_b;  // counters to zero (n_a, n_b ints; NULL when 0)
  int64_t n_a, n_b;
  // Work order (order NULL: none): group g of `group_items` (b, h, kv
  // block) items, g < groups, sorted by k2q count, largest first, into
  // order (item = (b·H + h)·nkv + kv block). pair_nkv > 0: items are pairs
  // of kv blocks (2p, 2p+1) of heads of pair_nkv blocks, item = (b·H +
  // h)·⌈pair_nkv/2⌉ + p, sorted by the pair's summed counts.
  const int32_t *k2q_num;
  int k2q_width, groups, group_items, pair_nkv;
  int32_t *order;
  // Deterministic dQ (row_exp non-NULL): dQ partials are added as int32
  // round(x · 2^row_exp[row]). Per (b, h), kv_stats gets max|K| and
  // max‖V_row‖² over the valid kv rows (row < vbs[block]), as partial
  // maxima in stat_slots slots (kv_stat_slots); per q row,
  //   B_r = 2·max|K|·(‖dO_r‖·max‖V‖ + |Delta_r|)
  // bounds every partial sum of |dQ_r,d| before sm_scale (|dQ_r,d| ≤
  // max|K|·Σ_j|dS_rj|, Σ_j P_rj ≤ 1, |dP_rj| ≤ ‖dO_r‖·‖V_j‖ by
  // Cauchy-Schwarz; the 2 covers bf16 rounding of P and dS), and
  // row_exp = 30 − ⌈log2 B_r⌉ keeps any order of additions below 2^30 in
  // magnitude: no overflow, and the sum is exact.
  const uint16_t *k, *v;   // bf16, B·H·Skv rows in `layout`
  const int32_t *vbs;      // [Skv / 64]
  int64_t Sq, Skv;         // tokens a head (Sq: always set, for `layout`)
  float *kv_stats;         // [B·H, stat_slots, 2] scratch: max|K|, max‖V_row‖²
  int stat_slots;
  int64_t stat_blocks;     // B·H·stat_slots statistics blocks (0: fp32 mode)
  float *row_dnorm;        // [rows] out: ‖dO_r‖
  int *row_exp;            // [rows] out
};

/* Slots of partial K/V statistics a head: one per statistics block, enough
 * blocks (about four a multiprocessor of an H200) to keep the loads in
 * flight, at most 64 (a reader folds a head's slots with one warp),
 * at most one a kv block. */
inline int
kv_stat_slots(int64_t BH, int64_t nkv)
{
  if (BH < 1) return 1;
  int64_t s = (528 + BH - 1) / BH;
  s = s > 64 ? 64 : s;
  s = s > nkv ? nkv : s;
  return s < 1 ? 1 : (int)s;
}

/* Scratch bytes of the statistics slots (kv_stats). */
inline size_t
kv_stats_bytes(int64_t BH, int64_t nkv)
{
  return (size_t)BH * kv_stat_slots(BH, nkv) * 2 * sizeof(float);
}

/* Turn on the deterministic (fixed-point) mode's part of the preprocess:
 * the K/V statistics (kv_stats, kv_stats_bytes of scratch, blocks of the
 * preprocess's own launch), ‖dO_r‖ (row_dnorm, [rows]) and the row
 * exponents (row_exp, [rows], a second launch), from k, v (B·H·Skv
 * bf16 rows in p.layout) and vbs. Call after p.rows is set. */
inline void
prep_fixed_point(prep_params &p, const uint16_t *k, const uint16_t *v, const int32_t *vbs,
                 int64_t Sq, int64_t Skv, float *kv_stats, float *row_dnorm, int *row_exp)
{
  p.k = k;
  p.v = v;
  p.vbs = vbs;
  p.Sq = Sq;
  p.Skv = Skv;
  p.kv_stats = kv_stats;
  p.stat_slots = kv_stat_slots(p.rows / Sq, Skv / BLK);
  p.stat_blocks = (p.rows / Sq) * p.stat_slots; // the preprocess's statistics blocks
  p.row_dnorm = row_dnorm;
  p.row_exp = row_exp;
}


/* The preprocess: Delta, the zeroed accumulator and counters, the work
 * order; with the fixed-point mode (prep_fixed_point) also the K/V
 * statistics and ‖dO_r‖ in the same launch, then the row exponents in a
 * second one (the first launch's blocks never wait for each other). */
cudaError_t launch_prep(const prep_params &p, cudaStream_t stream);

/* How a main kernel leaves dQ in the accumulator. */
enum dq_layout {
  DQ_ROWS,            // fp32 rows in order (atomics)
  DQ_ROWS_SWIZZLED,   // fp32 rows, chunk c of row r at c ^ dq_row_swizzle(r) (sm90a bulk)
  DQ_ROWS_SWIZZLED_FIXED, // the same, int32 fixed point with row_exp (sm90a deterministic)
  DQ_QUARTERS,        // per 64-row q block: [column quarter][row][8 chunks at
                      // c ^ (row & 7)], fp32 (sm100a: 4 KB per warp and quarter)
  DQ_QUARTERS_FIXED   // the same, int32 fixed point with row_exp
};

/* dq (bf16, rows of Sq tokens a head in token layout tok_layout, H heads
 * a batch) = accumulator · scale, read in `layout`; row_exp: the
 * fixed-point exponents (the *_FIXED layouts), NULL otherwise. */
cudaError_t launch_dq_finish(const float *dq_accum, uint16_t *dq, float scale, int64_t rows,
                             dq_layout layout, const int *row_exp, int tok_layout, int H,
                             int64_t Sq, cudaStream_t stream);

/* Chunks of nq q blocks for q_chunk blocks each (q_chunk <= 0: one). */
int chunk_count(int64_t nq, int q_chunk);

/* Heads whose kv blocks are scheduled together: as many (b, h) as keep
 * their Q, dO and fp32 dQ rows (1 KB a row) within 32 MB of L2, a divisor
 * of BH; one head a group when the q range is chunked. */
int heads_per_group(int64_t BH, int64_t Sq, int chunks);

/* True when the environment asks for the profiling ablation `what`
 * (VSALAB_ABLATE=what), read at each launch. no_dq_reduce: the sm90a main
 * kernels skip the dQ reduce (dq is wrong; only timings mean anything).
 * no_pdl: the fixed-point v3 main kernel is a plain stream-ordered launch,
 * not a programmatic dependent of the row-exponent launch (results are
 * unchanged; its griddepcontrol.wait then returns at once). v5_joint,
 * v5_no_pingpong: earlier variants of the block-128 kernel (v5's two
 * barriers a pair; lockstep), results unchanged. */
bool ablate(const char *what);

/* A 3D tensor map (column, head, row) over a bf16 tensor of B·H heads of
 * S tokens of 128 columns in `layout`, with (64, 1, 64) boxes and the
 * 128-byte swizzle (cuTensorMapEncodeTiled, found through the runtime's
 * driver entry point). BHSD: dims (128, 1, B·H·S), row stride 256 bytes;
 * BSHD: dims (128, H, B·S), head stride 256 bytes, row stride H·256
 * bytes. A box is 64 rows of 128 contiguous bytes either way, so its
 * shared-memory image is the one a 2D (128, rows) map with 64x64 boxes
 * wrote; tma_head gives a head's coordinates. B·H·S must be < 2^31. */
cudaError_t tile_map(CUtensorMap *m, const void *data, int layout, int64_t B, int H, int64_t S);

}  // namespace vsa_bwd
