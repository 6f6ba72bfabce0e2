/* bwd_prep.cu — the preprocess, postprocess and host helpers both native
 * backwards share (see bwd_prep.h). Plain CUDA: built for every target. */
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#include "bwd_prep.h"

namespace vsa_bwd {
namespace {

__device__ __forceinline__ uint32_t
pack_bf16(float lo, float hi)
{
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

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

/* The preprocess, one launch: Delta[row] = Σ_d dO[row, d]·o[row, d] in
 * fp32 and the row's dQ accumulator zeroed (one warp per row), the order
 * counters zeroed, and (blocks < groups) the work order. */
__global__ void __launch_bounds__(256)
prep_kernel(const __grid_constant__ prep_params p)
{
  if (p.order && blockIdx.x < p.groups) sort_group(p, blockIdx.x);
  const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t nthreads = (int64_t)gridDim.x * blockDim.x;
  for (int64_t x = tid; x < p.n_a; x += nthreads) p.zero_a[x] = 0;
  for (int64_t x = tid; x < p.n_b; x += nthreads) p.zero_b[x] = 0;
  const int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= p.rows) return;
  reinterpret_cast<float4 *>(p.dq_accum + row * D)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);
  const __nv_bfloat162 *a = reinterpret_cast<const __nv_bfloat162 *>(p.dO + row * D) + lane * 2;
  const __nv_bfloat162 *c = reinterpret_cast<const __nv_bfloat162 *>(p.o + row * D) + lane * 2;
  float s = 0.f;
#pragma unroll
  for (int x = 0; x < 2; x++) {
    float2 u = __bfloat1622float2(a[x]), w = __bfloat1622float2(c[x]);
    s = fmaf(u.x, w.x, fmaf(u.y, w.y, s));
  }
  float n2 = 0.f; // ‖dO_r‖², for the fixed-point bound
  if (p.row_exp) {
#pragma unroll
    for (int x = 0; x < 2; x++) {
      float2 u = __bfloat1622float2(a[x]);
      n2 = fmaf(u.x, u.x, fmaf(u.y, u.y, n2));
    }
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, m);
    n2 += __shfl_xor_sync(0xffffffffu, n2, m);
  }
  if (lane == 0) {
    p.delta[row] = s;
    if (p.row_exp) {
      const int64_t bh = row / p.Sq;
      const float maxk = __uint_as_float(p.kv_stats[2 * bh]);
      const float maxv = sqrtf(__uint_as_float(p.kv_stats[2 * bh + 1]));
      const float bound = 2.f * maxk * fmaf(sqrtf(n2), maxv, fabsf(s));
      int ex = 0; // bound < 2^ex
      if (bound > 0.f && isfinite(bound)) frexpf(bound, &ex);
      p.row_exp[row] = bound > 0.f && isfinite(bound) ? min(max(30 - ex, -126), 126) : 0;
    }
  }
}

/* Deterministic dQ: per (b, h) = blockIdx.y, max|K| and max‖V_row‖² over
 * the valid rows of kv block blockIdx.x (row < vbs), folded into
 * kv_stats[bh] with atomicMax on the float bits (non-negative floats order
 * as their bits do; NaN rows are skipped). One warp per 8 rows. */
__global__ void __launch_bounds__(256)
kv_stats_kernel(const __grid_constant__ prep_params p)
{
  const int blk = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t bh = blockIdx.y;
  const int vb = min(max(p.vbs[blk], 0), BLK);
  float mk = 0.f, mv = 0.f;
  for (int r = w; r < vb; r += 8) {
    const int64_t row = bh * p.Skv + (int64_t)blk * BLK + r;
    const __nv_bfloat162 *kr = reinterpret_cast<const __nv_bfloat162 *>(p.k + row * D) + lane * 2;
    const __nv_bfloat162 *vr = reinterpret_cast<const __nv_bfloat162 *>(p.v + row * D) + lane * 2;
    float rk = 0.f, rv = 0.f;
#pragma unroll
    for (int x = 0; x < 2; x++) {
      float2 u = __bfloat1622float2(kr[x]), z = __bfloat1622float2(vr[x]);
      rk = fmaxf(rk, fmaxf(fabsf(u.x), fabsf(u.y)));
      rv = fmaf(z.x, z.x, fmaf(z.y, z.y, rv));
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
      rk = fmaxf(rk, __shfl_xor_sync(0xffffffffu, rk, m));
      rv += __shfl_xor_sync(0xffffffffu, rv, m);
    }
    mk = fmaxf(mk, rk);
    mv = fmaxf(mv, rv);
  }
  if (lane == 0 && vb > 0) {
    atomicMax(p.kv_stats + 2 * bh, __float_as_uint(mk));
    atomicMax(p.kv_stats + 2 * bh + 1, __float_as_uint(mv));
  }
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

/* dq = bf16(accumulator · sm_scale), four elements per thread. */
__global__ void
dq_finish_kernel(const float4 *acc, uint2 *dq, float scale, int64_t n4, dq_layout layout,
                 const int *row_exp)
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
    dq[x] = make_uint2(pack_bf16(a.x * sc, a.y * sc), pack_bf16(a.z * sc, a.w * sc));
  }
}

} // namespace

cudaError_t
launch_prep(const prep_params &p, cudaStream_t stream)
{
  if (p.row_exp) {
    const int64_t BH = p.rows / p.Sq;
    if (BH > 65535) return cudaErrorInvalidValue;
    cudaError_t e = cudaMemsetAsync(p.kv_stats, 0, (size_t)BH * 2 * sizeof(uint32_t), stream);
    if (e != cudaSuccess) return e;
    kv_stats_kernel<<<dim3((unsigned)(p.Skv / BLK), (unsigned)BH), 256, 0, stream>>>(p);
  }
  prep_kernel<<<(unsigned)((p.rows + 7) / 8), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t
launch_dq_finish(const float *dq_accum, uint16_t *dq, float scale, int64_t rows,
                 dq_layout layout, const int *row_exp, cudaStream_t stream)
{
  int64_t n4 = rows * D / 4;
  int blocks = (int)((n4 + 255) / 256 < 65536 ? (n4 + 255) / 256 : 65536);
  dq_finish_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4 *>(dq_accum),
                                               reinterpret_cast<uint2 *>(dq), scale, n4,
                                               layout, row_exp);
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
tile_map(CUtensorMap *m, const void *data, int64_t rows)
{
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
  cuuint64_t dims[2] = {(cuuint64_t)D, (cuuint64_t)rows};
  cuuint64_t strides[1] = {(cuuint64_t)D * 2};
  cuuint32_t box[2] = {64, 64}, elem[2] = {1, 1};
  CUresult r = encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(data), dims,
                      strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

bool
ablate_no_dq_reduce()
{
  const char *a = getenv("VSALAB_ABLATE");
  return a && strcmp(a, "no_dq_reduce") == 0;
}

}  // namespace vsa_bwd
