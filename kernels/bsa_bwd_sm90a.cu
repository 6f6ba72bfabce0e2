/* bsa_bwd_sm90a.cu — the native Hopper (sm_90a) block-sparse backward.
 *
 * Version 1 (see kernels/NOTES.md): one CTA of one warpgroup (128 threads)
 * per (b, h, kv block j), two CTAs per SM. It keeps K_j, V_j in shared
 * memory and dK, dV in registers, and walks j's k2q list. Per q block i:
 *   S^T  = K Q^T     64x64x128  wgmma SS (K-major A and B)
 *   dP^T = V dO^T    64x64x128  wgmma SS
 *   P^T  = exp2(S^T·sm_scale·log2e − lse_i), 0 on kv rows >= vbs[j]
 *   dS^T = P^T ∘ (dP^T − Delta_i)
 *   dV  += P^T dO    64x128x64  wgmma RS (P^T accumulators reused as A)
 *   dK  += dS^T Q    64x128x64  wgmma RS
 *   dQ_i = dS K      64x128x64  wgmma SS (dS^T stored bf16, read M-major)
 *                    added into an fp32 accumulator, by one of two modes:
 *                    ATOMIC (v1): 4096 float2 atomics per pair from registers;
 *                    BULK (v2): staged in the pair's dead Q/dO stage (fp32,
 *                    16-byte chunks XOR-swizzled by row against bank
 *                    conflicts) and added by one 32 KB cp.reduce.async.bulk;
 *                    the accumulator then holds swizzled rows, which the
 *                    postprocess reads back in order.
 * Q_i, dO_i, lse_i, Delta_i stream through a two-stage cp.async ring.
 * Before: Delta = rowsum(dO∘o) and a zeroed dQ accumulator; after:
 * dq = bf16(accumulator · sm_scale). dk carries sm_scale, dv none.
 *
 * Semantics as the reference (src/bsa.h): list entries past a count are
 * never read (entries outside [0, nq) are skipped, counts clamped to the
 * width, so no input faults); padded kv rows (>= vbs) are zeroed in shared
 * memory and masked by selection, so their dk/dv rows are exactly 0 and
 * NaN/Inf in padded K/V slots never reach a product; an empty list writes
 * zero dk/dv. dk/dv are bitwise deterministic for a given list order; dq is
 * summed with atomics (order varies run to run within fp32 rounding).
 *
 * Built for sm_90a only (wgmma); head dim 128.
 */
#include <cuda_bf16.h>

#include "kernels.h"
#include "sm90_primitives.cuh"

namespace {

constexpr int BLK = 64;
constexpr int D = 128;
constexpr int THREADS = 128;
constexpr uint32_t REGION = 8192;      // one 64x64 bf16 swizzled region
constexpr uint32_t TILE = 2 * REGION;  // a 64x128 bf16 tile
// Shared memory map (bytes from a 1024-aligned base).
constexpr uint32_t OFF_K = 0;
constexpr uint32_t OFF_V = OFF_K + TILE;
constexpr uint32_t OFF_STAGE = OFF_V + TILE;  // per stage: Q, dO tiles
constexpr uint32_t STAGE_BYTES = 2 * TILE;
constexpr uint32_t OFF_DS = OFF_STAGE + 2 * STAGE_BYTES;
constexpr uint32_t OFF_STATS = OFF_DS + REGION;  // per stage: lse[64], delta[64]
constexpr uint32_t STATS_BYTES = 2 * BLK * sizeof(float);
constexpr uint32_t SMEM_BYTES = OFF_STATS + 2 * STATS_BYTES + 1024;

struct bwd_params {
  const __nv_bfloat16 *dO, *q, *k, *v;
  const float *lse, *delta;
  const int32_t *k2q_idx, *k2q_num, *vbs;
  int k2q_width, H, nq, nkv;
  float sm_scale, scale_log2;
  float *dq_accum;
  __nv_bfloat16 *dk, *dv;
};

__device__ __forceinline__ uint32_t
pack_bf16(float lo, float hi)
{
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* Copy a 64x128 bf16 tile (rows D elements apart) into two swizzled regions. */
__device__ __forceinline__ void
load_tile(uint32_t dst, const __nv_bfloat16 *src)
{
#pragma unroll
  for (int c = 0; c < 8; c++) {
    int id = threadIdx.x + THREADS * c;
    int row = id >> 4, c16 = id & 15;
    uint32_t off = (c16 >> 3) * REGION + row * 128 + ((((c16 & 7) ^ (row & 7))) << 4);
    cp_async16(dst + off, src + (int64_t)row * D + c16 * 8);
  }
}

/* Q_i, dO_i, lse_i and Delta_i of q block i into stage s. */
__device__ __forceinline__ void
load_stage(const bwd_params &p, uint32_t base, int s, int64_t bh, int i)
{
  int64_t row0 = bh * ((int64_t)p.nq * BLK) + (int64_t)i * BLK;
  uint32_t st = base + OFF_STAGE + s * STAGE_BYTES;
  load_tile(st, p.q + row0 * D);
  load_tile(st + TILE, p.dO + row0 * D);
  int t = threadIdx.x;
  if (t < 32) {
    const float *src = (t < 16 ? p.lse : p.delta) + row0 + (t & 15) * 4;
    cp_async16(base + OFF_STATS + s * STATS_BYTES + t * 16, src);
  }
}

/* Next list position >= e whose q block id is in range (cnt if none). */
__device__ __forceinline__ int
next_entry(const int32_t *list, int e, int cnt, int nq)
{
  for (; e < cnt; e++) {
    int i = __ldg(list + e);
    if (i >= 0 && i < nq) return e;
  }
  return cnt;
}

/* Store the 64x128 fp32 accumulator (wgmma fragment order) as bf16 rows. */
__device__ __forceinline__ void
store_rows(__nv_bfloat16 *out, const float *acc, float scale)
{
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int r0 = warp * 16 + (lane >> 2);
#pragma unroll
  for (int jn = 0; jn < 16; jn++) {
    int col = jn * 8 + 2 * (lane & 3);
    *reinterpret_cast<uint32_t *>(out + (int64_t)r0 * D + col) =
        pack_bf16(acc[4 * jn] * scale, acc[4 * jn + 1] * scale);
    *reinterpret_cast<uint32_t *>(out + (int64_t)(r0 + 8) * D + col) =
        pack_bf16(acc[4 * jn + 2] * scale, acc[4 * jn + 3] * scale);
  }
}

/* Byte offset of dQ element (row, col) in a BULK staging tile: 512-byte fp32
 * rows whose 16-byte chunks are XOR-swizzled by (row & 7). */
__device__ __forceinline__ uint32_t
dq_stage_offset(int row, int col)
{
  return row * 512 + ((((col >> 2) ^ (row & 7))) << 4) + ((col & 3) << 2);
}

template <bool BULK>
__global__ void __launch_bounds__(THREADS, 2)
bwd_kernel(const bwd_params p)
{
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = (int64_t)b * p.H + h;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t kv_row0 = bh * ((int64_t)p.nkv * BLK) + (int64_t)j * BLK;
  __nv_bfloat16 *dk_out = p.dk + kv_row0 * D;
  __nv_bfloat16 *dv_out = p.dv + kv_row0 * D;

  int cnt = p.k2q_num[bh * p.nkv + j];
  cnt = min(max(cnt, 0), p.k2q_width);
  const int32_t *list = p.k2q_idx + (bh * p.nkv + j) * (int64_t)p.k2q_width;
  int e = next_entry(list, 0, cnt, p.nq);
  const int vb = p.vbs[j];

  float acc_dk[64], acc_dv[64];
#pragma unroll
  for (int x = 0; x < 64; x++) acc_dk[x] = acc_dv[x] = 0.f;
  if (e >= cnt) { // nothing selects this kv block: exact zeros
    store_rows(dk_out, acc_dk, 0.f);
    store_rows(dv_out, acc_dv, 0.f);
    return;
  }

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  unsigned char *base_ptr = smem_raw + (base - smem_addr(smem_raw));
  load_tile(base + OFF_K, p.k + kv_row0 * D);
  load_tile(base + OFF_V, p.v + kv_row0 * D);
  load_stage(p, base, 0, bh, __ldg(list + e));
  cp_async_commit();

  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;  // this thread's kv rows
  const bool valid0 = r0 < vb, valid1 = r1 < vb;

  for (int it = 0; e < cnt; it++) {
    const int s = it & 1;
    const int i = __ldg(list + e);
    const int en = next_entry(list, e + 1, cnt, p.nq);
    if (en < cnt) load_stage(p, base, s ^ 1, bh, __ldg(list + en));
    cp_async_commit();
    cp_async_wait<1>();
    if (it == 0) {
      __syncthreads(); // every thread's K/V copies have landed

      // Zero K/V rows past vbs: masked rows then contribute exact zeros
      // whatever the padded slots hold.
      for (int id = threadIdx.x; id < BLK * 16; id += THREADS) {
        int row = id >> 4, c16 = id & 15;
        if (row >= vb) {
          uint32_t off = (c16 >> 3) * REGION + row * 128 + (c16 & 7) * 16;
          *reinterpret_cast<uint4 *>(base_ptr + OFF_K + off) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4 *>(base_ptr + OFF_V + off) = make_uint4(0, 0, 0, 0);
        }
      }
    }
    fence_proxy_async();
    __syncthreads();

    const uint32_t sQ = base + OFF_STAGE + s * STAGE_BYTES, sdO = sQ + TILE;
    const float *lse = reinterpret_cast<const float *>(base_ptr + OFF_STATS + s * STATS_BYTES);
    const float *delta = lse + BLK;

    // S^T = K Q^T and dP^T = V dO^T: two commit groups.
    float acc_s[32], acc_dp[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
      uint32_t off = (kk >> 2) * REGION + (kk & 3) * 32;
      wgmma_ss_n64<0, 0>(acc_s, desc_kmajor(base + OFF_K + off), desc_kmajor(sQ + off), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
      uint32_t off = (kk >> 2) * REGION + (kk & 3) * 32;
      wgmma_ss_n64<0, 0>(acc_dp, desc_kmajor(base + OFF_V + off), desc_kmajor(sdO + off), kk > 0);
    }
    wgmma_commit();

    // P^T: columns of this thread's fragment are q rows of block i.
    wgmma_wait<1>();
    reg_fence(acc_s, 32);
#pragma unroll
    for (int jn = 0; jn < 8; jn++) {
      int col = jn * 8 + 2 * (lane & 3);
      float l0 = lse[col], l1 = lse[col + 1];
      float c = p.scale_log2;
      acc_s[4 * jn + 0] = valid0 ? exp2f(fmaf(acc_s[4 * jn + 0], c, -l0)) : 0.f;
      acc_s[4 * jn + 1] = valid0 ? exp2f(fmaf(acc_s[4 * jn + 1], c, -l1)) : 0.f;
      acc_s[4 * jn + 2] = valid1 ? exp2f(fmaf(acc_s[4 * jn + 2], c, -l0)) : 0.f;
      acc_s[4 * jn + 3] = valid1 ? exp2f(fmaf(acc_s[4 * jn + 3], c, -l1)) : 0.f;
    }
    wgmma_wait<0>();
    reg_fence(acc_dp, 32);
    // dS^T = P^T (dP^T − Delta), selected to 0 on masked rows.
#pragma unroll
    for (int jn = 0; jn < 8; jn++) {
      int col = jn * 8 + 2 * (lane & 3);
      float d0 = delta[col], d1 = delta[col + 1];
      acc_dp[4 * jn + 0] = valid0 ? acc_s[4 * jn + 0] * (acc_dp[4 * jn + 0] - d0) : 0.f;
      acc_dp[4 * jn + 1] = valid0 ? acc_s[4 * jn + 1] * (acc_dp[4 * jn + 1] - d1) : 0.f;
      acc_dp[4 * jn + 2] = valid1 ? acc_s[4 * jn + 2] * (acc_dp[4 * jn + 2] - d0) : 0.f;
      acc_dp[4 * jn + 3] = valid1 ? acc_s[4 * jn + 3] * (acc_dp[4 * jn + 3] - d1) : 0.f;
    }
    // Accumulator pairs of n8 chunks (2kk, 2kk+1) are the A fragment of k16
    // slice kk: no shuffles.
    uint32_t a_p[16], a_ds[16];
#pragma unroll
    for (int x = 0; x < 16; x++) {
      a_p[x] = pack_bf16(acc_s[2 * x], acc_s[2 * x + 1]);
      a_ds[x] = pack_bf16(acc_dp[2 * x], acc_dp[2 * x + 1]);
    }
    // dS^T (kv rows x q columns) to shared memory for the dQ GEMM.
    unsigned char *sds = base_ptr + OFF_DS;
#pragma unroll
    for (int jn = 0; jn < 8; jn++) {
      int col = jn * 8 + 2 * (lane & 3);
      *reinterpret_cast<uint32_t *>(sds + sw128_offset(r0, col)) = a_ds[2 * jn];
      *reinterpret_cast<uint32_t *>(sds + sw128_offset(r1, col)) = a_ds[2 * jn + 1];
    }
    // dV += P^T dO, dK += dS^T Q (dO, Q read N-major).
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
      wgmma_rs_n128<1>(acc_dv, &a_p[4 * kk], desc_mnmajor(sdO + kk * 2048));
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
      wgmma_rs_n128<1>(acc_dk, &a_ds[4 * kk], desc_mnmajor(sQ + kk * 2048));
    wgmma_commit();
    fence_proxy_async();
    __syncthreads();

    // dQ_i = dS K, 64 columns of d at a time, added into the accumulator.
    float *dqa = p.dq_accum + (bh * ((int64_t)p.nq * BLK) + (int64_t)i * BLK) * D;
#pragma unroll
    for (int hn = 0; hn < 2; hn++) {
      float acc_q[32];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        wgmma_ss_n64<1, 1>(acc_q, desc_mnmajor(base + OFF_DS + kk * 2048),
                           desc_mnmajor(base + OFF_K + hn * REGION + kk * 2048), kk > 0);
      wgmma_commit();
      wgmma_wait<0>(); // also retires dV/dK: stage s (Q_i, dO_i) is now dead
      reg_fence(acc_q, 32);
#pragma unroll
      for (int jn = 0; jn < 8; jn++) {
        int col = hn * 64 + jn * 8 + 2 * (lane & 3);
        float2 v0 = make_float2(acc_q[4 * jn], acc_q[4 * jn + 1]);
        float2 v1 = make_float2(acc_q[4 * jn + 2], acc_q[4 * jn + 3]);
        if (BULK) {
          unsigned char *stg = base_ptr + OFF_STAGE + s * STAGE_BYTES;
          *reinterpret_cast<float2 *>(stg + dq_stage_offset(r0, col)) = v0;
          *reinterpret_cast<float2 *>(stg + dq_stage_offset(r1, col)) = v1;
        } else {
          atomicAdd(reinterpret_cast<float2 *>(dqa + (int64_t)r0 * D + col), v0);
          atomicAdd(reinterpret_cast<float2 *>(dqa + (int64_t)r1 * D + col), v1);
        }
      }
    }
    if (BULK) {
      fence_proxy_async();
      __syncthreads();
      if (threadIdx.x == 0) {
        bulk_reduce_add_f32(dqa, sQ, BLK * D * sizeof(float));
        bulk_wait_read(); // the stage is refilled next iteration
      }
    }
    reg_fence(acc_dk, 64);
    reg_fence(acc_dv, 64);
    __syncthreads(); // stage s and dS^T are free for the next iteration
    e = en;
  }
  if (BULK && threadIdx.x == 0) bulk_wait_all();
  store_rows(dk_out, acc_dk, p.sm_scale);
  store_rows(dv_out, acc_dv, 1.f);
#endif
}

/* Delta[row] = Σ_d dO[row, d]·o[row, d] in fp32: one warp per row. */
__global__ void
delta_kernel(const __nv_bfloat16 *dO, const __nv_bfloat16 *o, float *delta, int64_t rows)
{
  int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const __nv_bfloat162 *a = reinterpret_cast<const __nv_bfloat162 *>(dO + row * D) + lane * 2;
  const __nv_bfloat162 *c = reinterpret_cast<const __nv_bfloat162 *>(o + row * D) + lane * 2;
  float s = 0.f;
#pragma unroll
  for (int x = 0; x < 2; x++) {
    float2 u = __bfloat1622float2(a[x]), w = __bfloat1622float2(c[x]);
    s = fmaf(u.x, w.x, fmaf(u.y, w.y, s));
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
  if (lane == 0) delta[row] = s;
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

extern "C" size_t
bsa_backward_sm90a_scratch_bytes(const vsa_shape *s)
{
  int64_t rows = (int64_t)s->B * s->H * s->Sq;
  return (size_t)rows * D * sizeof(float) + (size_t)rows * sizeof(float);
}

extern "C" cudaError_t
bsa_backward_sm90a(const vsa_shape *s, const uint16_t *d_dO, const uint16_t *d_q,
                   const uint16_t *d_k, const uint16_t *d_v, const uint16_t *d_o,
                   const float *d_lse, const int32_t *d_k2q_idx,
                   const int32_t *d_k2q_num, int k2q_width, const int32_t *d_vbs,
                   void *d_scratch, uint16_t *d_dq, uint16_t *d_dk, uint16_t *d_dv,
                   int dq_bulk, cudaStream_t stream)
{
  if (s->D != D || s->Sq % BLK || s->Skv % BLK || s->B * s->H > 65535 || k2q_width < 1)
    return cudaErrorInvalidValue;
  int64_t rows = (int64_t)s->B * s->H * s->Sq;
  float *dq_accum = static_cast<float *>(d_scratch);
  float *delta = dq_accum + rows * D;
  const __nv_bfloat16 *dO = reinterpret_cast<const __nv_bfloat16 *>(d_dO);
  delta_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(
      dO, reinterpret_cast<const __nv_bfloat16 *>(d_o), delta, rows);
  cudaError_t e = cudaMemsetAsync(dq_accum, 0, (size_t)rows * D * sizeof(float), stream);
  if (e != cudaSuccess) return e;
  static bool configured = false;
  if (!configured) {
    e = cudaFuncSetAttribute(bwd_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(bwd_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  bwd_params p;
  p.dO = dO;
  p.q = reinterpret_cast<const __nv_bfloat16 *>(d_q);
  p.k = reinterpret_cast<const __nv_bfloat16 *>(d_k);
  p.v = reinterpret_cast<const __nv_bfloat16 *>(d_v);
  p.lse = d_lse;
  p.delta = delta;
  p.k2q_idx = d_k2q_idx;
  p.k2q_num = d_k2q_num;
  p.vbs = d_vbs;
  p.k2q_width = k2q_width;
  p.H = s->H;
  p.nq = s->Sq / BLK;
  p.nkv = s->Skv / BLK;
  p.sm_scale = s->sm_scale;
  p.scale_log2 = s->sm_scale * 1.4426950408889634f;
  p.dq_accum = dq_accum;
  p.dk = reinterpret_cast<__nv_bfloat16 *>(d_dk);
  p.dv = reinterpret_cast<__nv_bfloat16 *>(d_dv);
  dim3 grid(p.nkv, s->H, s->B);
  if (dq_bulk)
    bwd_kernel<true><<<grid, THREADS, SMEM_BYTES, stream>>>(p);
  else
    bwd_kernel<false><<<grid, THREADS, SMEM_BYTES, stream>>>(p);
  int64_t n4 = rows * D / 4;
  int blocks = (int)((n4 + 255) / 256 < 65536 ? (n4 + 255) / 256 : 65536);
  dq_finish_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4 *>(dq_accum),
                                               reinterpret_cast<uint2 *>(d_dq), s->sm_scale, n4, dq_bulk);
  return cudaGetLastError();
}
