/* bwd_prep.cu — the preprocess, postprocess and host helpers both native
 * backwards share (see bwd_prep.h). Plain CUDA: built for every target. */
#include <cuda_bf16.h>

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
        const int64_t cnt = min(max(p.k2q_num[first + x], 0), p.k2q_width);
        const int64_t b = cnt * 256 / ((int64_t)p.k2q_width + 1); // 0..255
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
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
  if (lane == 0) p.delta[row] = s;
}

/* dq = bf16(accumulator · sm_scale), four elements per thread; with
 * swizzled rows (BULK), chunk c of row r sits at chunk c ^ (r & 7). */
__global__ void
dq_finish_kernel(const float4 *acc, uint2 *dq, float scale, int64_t n4, int swizzled)
{
  for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n4;
       x += (int64_t)gridDim.x * blockDim.x) {
    int64_t row = x >> 5; // 32 chunks of 4 floats per 128-float row
    int c = (int)(x & 31);
    float4 a = acc[swizzled ? (row << 5) + (c ^ (int)(row & 7)) : x];
    dq[x] = make_uint2(pack_bf16(a.x * scale, a.y * scale), pack_bf16(a.z * scale, a.w * scale));
  }
}

} // namespace

cudaError_t
launch_prep(const prep_params &p, cudaStream_t stream)
{
  prep_kernel<<<(unsigned)((p.rows + 7) / 8), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t
launch_dq_finish(const float *dq_accum, uint16_t *dq, float scale, int64_t rows, bool swizzled,
                 cudaStream_t stream)
{
  int64_t n4 = rows * D / 4;
  int blocks = (int)((n4 + 255) / 256 < 65536 ? (n4 + 255) / 256 : 65536);
  dq_finish_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4 *>(dq_accum),
                                               reinterpret_cast<uint2 *>(dq), scale, n4,
                                               swizzled);
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

}  // namespace vsa_bwd
