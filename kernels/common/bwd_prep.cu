/* bwd_prep.cu — the preprocess, postprocess and host helpers both native
 * backwards share (see bwd_prep.h). Plain CUDA: built for every target.
 * The user tensors (o, dO, k, v in, dq out) are read and written in
 * vsa_shape.layout: a row's 128 elements stay contiguous in both layouts,
 * so every access keeps its width and only row addresses change. */
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#include "async_copy.cuh"
#include "bwd_prep.h"

namespace vsa_bwd {
namespace {

/* Block g sorts group g's items by descending k2q count (256 buckets of
 * the count, a counting sort with warp-aggregated shared-memory atomics):
 * launched in that order, the longest lists start first and the grid's
 * tail is made of short ones (greedy longest-first scheduling). */
__device__ void
sort_group(const prep_params &p, int g)
{
  __shared__ int bucket_start[256];
  const int t = threadIdx.x, lane = t & 31;
  const int64_t first = (int64_t)g * p.group_items;
  for (int b = t; b < 256; b += blockDim.x) bucket_start[b] = 0;
  __syncthreads();
  for (int pass = 0; pass < 2; pass++) {
    for (int x0 = 0; x0 < p.group_items; x0 += blockDim.x) {
      const int x = x0 + t;
      int key = 256; // past the end: no bucket
      if (x < p.group_items) {
        const int64_t it = first + x;
        int64_t cnt, most = p.k2q_width;
        if (p.pair_nkv > 0) { // a pair of kv blocks: both counts
          const int64_t npairs = (p.pair_nkv + 1) / 2, bh = it / npairs;
          const int j = 2 * (int)(it % npairs);
          cnt = min(max(p.k2q_num[bh * p.pair_nkv + j], 0), p.k2q_width);
          if (j + 1 < p.pair_nkv) cnt += min(max(p.k2q_num[bh * p.pair_nkv + j + 1], 0), p.k2q_width);
          most = 2 * most;
        } else {
          cnt = min(max(p.k2q_num[it], 0), p.k2q_width);
        }
        const int64_t b = cnt * 256 / (most + 1); // 0..255
        key = 255 - (int)b;
      }
      const unsigned peers = __match_any_sync(0xffffffffu, key);
      const int leader = __ffs(peers) - 1;
      int at = 0;
      if (lane == leader && key < 256) at = atomicAdd(&bucket_start[key], __popc(peers));
      at = __shfl_sync(peers, at, leader) + __popc(peers & ((1u << lane) - 1));
      if (pass == 1 && key < 256) p.order[first + at] = (int32_t)(first + x);
    }
    __syncthreads();
    if (pass == 0 && t == 0) { // counts -> starts, bucket 0 (longest) first
      int run = 0;
      for (int b = 0; b < 256; b++) {
        int n = bucket_start[b];
        bucket_start[b] = run;
        run += n;
      }
    }
    __syncthreads();
  }
}

/* Deterministic dQ: statistics block (x, bh) of the preprocess folds
 * max|K| and max‖V_row‖² over the valid rows (row < vbs) of kv blocks x,
 * x + S, x + 2S, ... of head bh (S = stat_slots) into slot (bh, x) of
 * kv_stats; whoever needs a head's values takes the maximum over its slots
 * (head_kv_stats) in a later launch. No atomics and no zeroed scratch:
 * every slot is written. NaN elements are skipped by fmaxf, a NaN row norm
 * by the final fmaxf.
 *
 * Memory-bound by design: thread t reads 16-byte chunk t & 15 of rows
 * (t >> 4) + 16y, y < 4, of K and of V, all eight loads issued before
 * any use (32 KB a block in flight); a row's 16 chunks sit in 16
 * consecutive lanes, which sum ‖V_row‖² by shuffles. The one-row-a-warp
 * version ran at 1.4–1.7 TB/s (kernels/NOTES.md). */
template <bool BSHD>
__device__ __forceinline__ void
kv_stats_block(const prep_params &p, int x, int64_t bh)
{
  const int t = threadIdx.x, lane = t & 31, chunk = t & 15, S = p.stat_slots;
  const int64_t nkv = p.Skv / BLK;
  float mk = 0.f, mv = 0.f;
  // BHSD: row bh·Skv + token at row·D from k and v, as before the layouts.
  // BSHD: token 0 of head bh at h0, tokens H·D apart.
  const int64_t h0 = BSHD ? row_offset(VSA_BSHD, p.H, p.Skv, bh * p.Skv) : 0;
  const int64_t ts = BSHD ? (int64_t)p.H * D : D;
  const int64_t rbase = BSHD ? 0 : bh * p.Skv;
  for (int64_t blk = x; blk < nkv; blk += S) {
    const int vb = min(max(p.vbs[blk], 0), BLK);
    const int64_t first = rbase + blk * BLK;
    uint4 kc[4], vc[4];
#pragma unroll
    for (int y = 0; y < 4; y++) {
      const int r = (t >> 4) + 16 * y;
      kc[y] = vc[y] = make_uint4(0, 0, 0, 0);
      if (r < vb) {
        const int64_t o = h0 + (first + r) * ts;
        kc[y] = __ldg(reinterpret_cast<const uint4 *>(p.k + o) + chunk);
        vc[y] = __ldg(reinterpret_cast<const uint4 *>(p.v + o) + chunk);
      }
    }
#pragma unroll
    for (int y = 0; y < 4; y++) {
      const uint32_t kw[4] = {kc[y].x, kc[y].y, kc[y].z, kc[y].w};
      const uint32_t vw[4] = {vc[y].x, vc[y].y, vc[y].z, vc[y].w};
      float rv = 0.f;
#pragma unroll
      for (int w = 0; w < 4; w++) { // bf16 -> fp32 is a 16-bit shift
        mk = fmaxf(mk, fmaxf(fabsf(__uint_as_float(kw[w] << 16)),
                             fabsf(__uint_as_float(kw[w] & 0xffff0000u))));
        const float v0 = __uint_as_float(vw[w] << 16), v1 = __uint_as_float(vw[w] & 0xffff0000u);
        rv = fmaf(v0, v0, fmaf(v1, v1, rv));
      }
#pragma unroll
      for (int m = 8; m > 0; m >>= 1) rv += __shfl_xor_sync(0xffffffffu, rv, m);
      mv = fmaxf(mv, rv);
    }
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    mk = fmaxf(mk, __shfl_xor_sync(0xffffffffu, mk, m));
    mv = fmaxf(mv, __shfl_xor_sync(0xffffffffu, mv, m));
  }
  __shared__ float wk[8], wv[8];
  if (lane == 0) {
    wk[t >> 5] = mk;
    wv[t >> 5] = mv;
  }
  __syncthreads();
  if (t == 0) {
    for (int w = 1; w < 8; w++) {
      mk = fmaxf(mk, wk[w]);
      mv = fmaxf(mv, wv[w]);
    }
    reinterpret_cast<float2 *>(p.kv_stats)[bh * S + x] = make_float2(mk, mv);
  }
}

/* The preprocess, one launch: in the fixed-point mode its first
 * stat_blocks blocks are K/V statistics blocks (kv_stats_block); every
 * other block computes Delta[row] = Σ_d dO[row, d]·o[row, d] in fp32 and
 * zeroes the row's dQ accumulator (one warp per row, 8 rows a block, all of
 * one head: Sq is a multiple of 64), zeroes the counters, and (the first
 * `groups` of them) builds the work order. In the fixed-point mode a row
 * also gets ‖dO_r‖ (row_dnorm), for row_exp_kernel. Nothing in it waits
 * for anything: the exponents, which need a whole head's statistics, are
 * the next launch (kernels/NOTES.md v3.4). */
template <bool BSHD> // p.layout, as a constant: the BSHD addressing costs 8
                     // registers (40), which the BHSD instance (32, full
                     // occupancy, the code of before) does not pay
__global__ void __launch_bounds__(256)
prep_kernel(const __grid_constant__ prep_params p)
{
  if ((int64_t)blockIdx.x < p.stat_blocks) {
    kv_stats_block<BSHD>(p, (int)(blockIdx.x % p.stat_slots), blockIdx.x / p.stat_slots);
    return;
  }
  const int64_t block = blockIdx.x - p.stat_blocks, blocks = gridDim.x - p.stat_blocks;
  if (p.order && block < p.groups) sort_group(p, (int)block);
  const int64_t tid = block * blockDim.x + threadIdx.x, nthreads = blocks * blockDim.x;
  for (int64_t x = tid; x < p.n_a; x += nthreads) p.zero_a[x] = 0;
  for (int64_t x = tid; x < p.n_b; x += nthreads) p.zero_b[x] = 0;
  const int64_t row = block * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= p.rows) return;
  reinterpret_cast<float4 *>(p.dq_accum + row * D)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);
  // 4-byte loads: dO and o need no more alignment than a bf16 pair.
  const int64_t off = row_offset(BSHD ? VSA_BSHD : VSA_BHSD, p.H, p.Sq, row);
  const uint32_t *a = reinterpret_cast<const uint32_t *>(p.dO + off) + 2 * lane;
  const uint32_t *c = reinterpret_cast<const uint32_t *>(p.o + off) + 2 * lane;
  const uint32_t aw[2] = {a[0], a[1]}, cw[2] = {c[0], c[1]};
  float s = 0.f, n2 = 0.f; // Delta_r, and ‖dO_r‖² for the fixed-point bound
#pragma unroll
  for (int x = 0; x < 2; x++) {
    const float u0 = __uint_as_float(aw[x] << 16), u1 = __uint_as_float(aw[x] & 0xffff0000u);
    const float w0 = __uint_as_float(cw[x] << 16), w1 = __uint_as_float(cw[x] & 0xffff0000u);
    s = fmaf(u0, w0, fmaf(u1, w1, s));
    n2 = fmaf(u0, u0, fmaf(u1, u1, n2));
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, m);
    n2 += __shfl_xor_sync(0xffffffffu, n2, m);
  }
  if (lane == 0) {
    p.delta[row] = s;
    if (p.row_exp) p.row_dnorm[row] = sqrtf(n2);
  }
}

/* The fixed-point exponent of one q row from the bound in bwd_prep.h
 * (prep_params): ‖dO_r‖ (dnorm), Delta_r, and its head's max|K| and
 * max‖V_row‖ (head_k, head_v, head_kv_stats): 30 − ex with B_r < 2^ex
 * (ex = ⌊log2 B_r⌋ + 1, frexpf's), clamped to [−126, 126]; 0 when B_r is
 * 0 or not finite. Float rounding in B_r is a few ulps, far inside the
 * bound's factor 2 and the 2^30-of-2^31 margin. */
__device__ __forceinline__ int
fixed_row_exp(float dnorm, float delta, float head_k, float head_v)
{
  const float bound = 2.f * head_k * fmaf(dnorm, head_v, fabsf(delta));
  if (!(bound > 0.f) || !isfinite(bound)) return 0;
  int ex; // bound < 2^ex
  frexpf(bound, &ex);
  return min(max(30 - ex, -126), 126);
}

/* A head's max|K| and max‖V_row‖ (the square root of the slots' largest
 * ‖V_row‖²) from its stat_slots slots (one warp, every lane gets the
 * result). */
__device__ __forceinline__ float2
head_kv_stats(const float *kv_stats, int slots, int64_t bh)
{
  float mk = 0.f, mv = 0.f;
  for (int x = threadIdx.x & 31; x < slots; x += 32) {
    const float2 st = reinterpret_cast<const float2 *>(kv_stats)[bh * slots + x];
    mk = fmaxf(mk, st.x);
    mv = fmaxf(mv, st.y);
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    mk = fmaxf(mk, __shfl_xor_sync(0xffffffffu, mk, m));
    mv = fmaxf(mv, __shfl_xor_sync(0xffffffffu, mv, m));
  }
  return make_float2(mk, sqrtf(mv));
}

/* The fixed-point row exponents, launched after the preprocess: thread =
 * q row; a warp's 32 rows are of one head (Sq is a multiple of 64), whose
 * slots it folds once. A main kernel launched behind it as a programmatic
 * dependent (v3) may start at once and waits (griddepcontrol.wait) only
 * before it reads the exponents. */
__global__ void __launch_bounds__(256)
row_exp_kernel(const __grid_constant__ prep_params p)
{
  pdl_launch_dependents();
  const int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t warp_row = row & ~(int64_t)31;
  if (warp_row >= p.rows) return; // the whole warp
  const float2 h = head_kv_stats(p.kv_stats, p.stat_slots, warp_row / p.Sq);
  if (row < p.rows) p.row_exp[row] = fixed_row_exp(p.row_dnorm[row], p.delta[row], h.x, h.y);
}

/* Index (in float4) of output chunk c (4 columns) of row `row` in the
 * accumulator layout. */
__device__ __forceinline__ int64_t
dq_index(dq_layout layout, int64_t row, int c)
{
  switch (layout) {
  case DQ_ROWS: return (row << 5) + c;
  case DQ_ROWS_SWIZZLED:
  case DQ_ROWS_SWIZZLED_FIXED: return (row << 5) + (c ^ dq_row_swizzle(row));
  default: { // quarters of each 64-row q block
    const int r = (int)(row & 63), qt = c >> 3, x = c & 7;
    return ((row >> 6) << 11) + (qt << 9) + (r << 3) + (x ^ (r & 7));
  }
  }
}

/* dq = bf16(accumulator · sm_scale), four elements per thread; row r of
 * the accumulator goes to dq's row r in token layout tok_layout (a warp's
 * 32 chunks are one row: 256 contiguous bytes in either layout). */
__global__ void
dq_finish_kernel(const float4 *acc, uint2 *dq, float scale, int64_t n4, dq_layout layout,
                 const int *row_exp, int tok_layout, int H, int64_t Sq)
{
  for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n4;
       x += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = x >> 5; // 32 chunks of 4 floats per 128-float row
    float4 a = acc[dq_index(layout, row, (int)(x & 31))];
    float sc = scale;
    if (layout == DQ_QUARTERS_FIXED || layout == DQ_ROWS_SWIZZLED_FIXED) {
      const int4 v = *reinterpret_cast<const int4 *>(&a);
      a = make_float4((float)v.x, (float)v.y, (float)v.z, (float)v.w);
      sc = ldexpf(scale, -row_exp[row]);
    }
    dq[(row_offset(tok_layout, H, Sq, row) >> 2) + (x & 31)] =
        make_uint2(pack_bf16(a.x * sc, a.y * sc), pack_bf16(a.z * sc, a.w * sc));
  }
}

} // namespace

cudaError_t
launch_prep(const prep_params &p, cudaStream_t stream)
{
  if (p.layout != VSA_BHSD && p.layout != VSA_BSHD) return cudaErrorInvalidValue;
  if (p.Sq < 1 || p.H < 1) return cudaErrorInvalidValue; // row_offset's divisors
  const int64_t blocks = (p.rows + 7) / 8 + p.stat_blocks;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (p.layout == VSA_BSHD)
    prep_kernel<true><<<(unsigned)blocks, 256, 0, stream>>>(p);
  else
    prep_kernel<false><<<(unsigned)blocks, 256, 0, stream>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || !p.row_exp) return e;
  row_exp_kernel<<<(unsigned)((p.rows + 255) / 256), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t
launch_dq_finish(const float *dq_accum, uint16_t *dq, float scale, int64_t rows,
                 dq_layout layout, const int *row_exp, int tok_layout, int H, int64_t Sq,
                 cudaStream_t stream)
{
  if (tok_layout != VSA_BHSD && tok_layout != VSA_BSHD) return cudaErrorInvalidValue;
  int64_t n4 = rows * D / 4;
  int blocks = (int)((n4 + 255) / 256 < 65536 ? (n4 + 255) / 256 : 65536);
  dq_finish_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4 *>(dq_accum),
                                               reinterpret_cast<uint2 *>(dq), scale, n4,
                                               layout, row_exp, tok_layout, H, Sq);
  return cudaGetLastError();
}

int
chunk_count(int64_t nq, int q_chunk)
{
  return q_chunk <= 0 || q_chunk >= nq ? 1 : (int)((nq + q_chunk - 1) / q_chunk);
}

/* Within a group the work order is longest list first; across groups it
 * stays head by head, so the L2 holds the heads in flight. */
int
heads_per_group(int64_t BH, int64_t Sq, int chunks)
{
  int64_t most = chunks > 1 ? 1 : (32ll << 20) / (Sq * 1024);
  int64_t g = most < 1 ? 1 : (most > BH ? BH : most);
  while (BH % g) g--;
  return (int)g;
}

cudaError_t
tile_map(CUtensorMap *m, const void *data, int layout, int64_t B, int H, int64_t S)
{
  if ((layout != VSA_BHSD && layout != VSA_BSHD) || B < 1 || H < 1 || S < 1 ||
      B * H * S >= (1ll << 31))
    return cudaErrorInvalidValue;
  typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static encode_fn encode;
  if (!encode) {
    cudaDriverEntryPointQueryResult q;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode,
                                                     12000, cudaEnableDefault, &q);
    if (e != cudaSuccess) return e;
    if (q != cudaDriverEntryPointSuccess || !encode) return cudaErrorNotSupported;
  }
  // (column, head, row). BHSD: one "head" coordinate (always 0; its stride
  // is never stepped), rows bh·S + t 256 bytes apart. BSHD: heads 256
  // bytes apart, rows b·S + t H·256 bytes apart (a multiple of 16, as TMA
  // strides must be, and far below its 2^40 limit). TMA addresses in 64
  // bits, so B·S·H·D beyond 2^31 elements is fine.
  const bool bshd = layout == VSA_BSHD;
  cuuint64_t dims[3] = {(cuuint64_t)D, bshd ? (cuuint64_t)H : 1,
                        (cuuint64_t)(bshd ? B * S : B * H * S)};
  cuuint64_t strides[2] = {(cuuint64_t)D * 2, (cuuint64_t)D * 2 * (bshd ? H : 1)};
  cuuint32_t box[3] = {64, 1, 64}, elem[3] = {1, 1, 1};
  CUresult r = encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void *>(data), dims,
                      strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* Read at every launch, not cached: tests/gpu/ncu_profile.lua sets and
 * clears VSALAB_ABLATE between launches of one process (getenv costs far
 * less than a launch). */
bool
ablate(const char *what)
{
  const char *a = getenv("VSALAB_ABLATE");
  return a && strcmp(a, what) == 0;
}

}  // namespace vsa_bwd
