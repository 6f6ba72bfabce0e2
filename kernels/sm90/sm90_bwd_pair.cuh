/* sm90_bwd_pair.cuh — what the sm_90a backward kernels share: the shared
 * memory map of one kv block's CTA, the fragment helpers, and the five
 * GEMMs of one (q block i, kv block j) pair for one consumer warpgroup.
 *
 * Per pair, with K_j, V_j and the stage's Q_i, dO_i, lse_i, Delta_i in
 * shared memory and dK, dV accumulating in registers:
 *   S^T  = K Q^T     64x64x128  wgmma SS (K-major A and B)
 *   dP^T = V dO^T    64x64x128  wgmma SS
 *   P^T  = exp2(S^T·sm_scale·log2e − lse_i), 0 on kv rows >= vbs[j]
 *   dS^T = P^T ∘ (dP^T − Delta_i)
 *   dV  += P^T dO    64x128x64  wgmma RS (P^T accumulators reused as A)
 *   dK  += dS^T Q    64x128x64  wgmma RS
 *   dQ_i = dS K      64x128x64  wgmma SS (dS^T stored bf16, read M-major)
 * The formulas are the standard attention backward (FlashAttention-2,
 * Dao 2023, Alg. 2) with Triton's base-2 lse ("M format").
 */
#pragma once
#include <cuda_bf16.h>

#include "wgmma.cuh"

namespace sm90bwd {

constexpr int BLK = 64;
constexpr int D = 128;
constexpr int CONSUMER_THREADS = 128;  // one warpgroup
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
constexpr uint32_t OFF_END = OFF_STATS + 2 * STATS_BYTES;
// Named barrier of the consumer warpgroup (0 is __syncthreads).
constexpr int BAR_CONSUMERS = 1;

/* Next list position >= e whose q block id is in [lo, hi) (cnt if none). */
__device__ __forceinline__ int
next_entry(const int32_t *list, int e, int cnt, int lo, int hi)
{
  for (; e < cnt; e++) {
    int i = __ldg(list + e);
    if (i >= lo && i < hi) return e;
  }
  return cnt;
}

__device__ __forceinline__ int
next_entry(const int32_t *list, int e, int cnt, int nq)
{
  return next_entry(list, e, cnt, 0, nq);
}

/* Store a 64x128 fp32 accumulator (wgmma fragment order, consumer threads
 * 0..127) as bf16 rows. */
__device__ __forceinline__ void
store_rows(__nv_bfloat16 *out, const float *acc, float scale)
{
  int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
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

/* Byte offset of dQ element (row, col) in a staged fp32 dQ tile: 512-byte
 * rows whose 16-byte chunks are XOR-swizzled by (row & 7) against bank
 * conflicts. The accumulator then holds swizzled rows, which the
 * postprocess reads back in order. */
__device__ __forceinline__ uint32_t
dq_stage_offset(int row, int col)
{
  return row * 512 + ((((col >> 2) ^ (row & 7))) << 4) + ((col & 3) << 2);
}

/* Zero K and V rows >= vb in shared memory (consumer threads): masked rows
 * then contribute exact zeros whatever the padded slots hold. */
__device__ __forceinline__ void
zero_padded_rows(unsigned char *base_ptr, int vb)
{
  for (int id = threadIdx.x & 127; id < BLK * 16; id += CONSUMER_THREADS) {
    int row = id >> 4, c16 = id & 15;
    if (row >= vb) {
      uint32_t off = (c16 >> 3) * REGION + row * 128 + (c16 & 7) * 16;
      *reinterpret_cast<uint4 *>(base_ptr + OFF_K + off) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4 *>(base_ptr + OFF_V + off) = make_uint4(0, 0, 0, 0);
    }
  }
}

/* The five GEMMs of one pair for the consumer warpgroup (threads 0..127 of
 * the CTA, or the low warpgroup's lanes via threadIdx & 127). sQ/sdO: the
 * stage's tiles; lse/delta: its statistics. emit(hn, acc_q) receives dQ_i's
 * 64-column half hn (fragment order) after every wgmma of the pair has
 * retired, so the stage may be overwritten inside emit. */
template <class Emit>
__device__ __forceinline__ void
pair_gradients(uint32_t base, unsigned char *base_ptr, uint32_t sQ, uint32_t sdO,
               const float *lse, const float *delta, float scale_log2, bool valid0,
               bool valid1, float *acc_dk, float *acc_dv, Emit emit)
{
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;

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
    acc_s[4 * jn + 0] = valid0 ? fast_exp2(fmaf(acc_s[4 * jn + 0], scale_log2, -l0)) : 0.f;
    acc_s[4 * jn + 1] = valid0 ? fast_exp2(fmaf(acc_s[4 * jn + 1], scale_log2, -l1)) : 0.f;
    acc_s[4 * jn + 2] = valid1 ? fast_exp2(fmaf(acc_s[4 * jn + 2], scale_log2, -l0)) : 0.f;
    acc_s[4 * jn + 3] = valid1 ? fast_exp2(fmaf(acc_s[4 * jn + 3], scale_log2, -l1)) : 0.f;
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
  // dS^T (kv rows x q columns) to shared memory for the dQ GEMM. The
  // previous pair's dQ GEMM has retired in every warp (its emit ran).
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
  named_sync(BAR_CONSUMERS, CONSUMER_THREADS); // dS^T complete for every warp

  // dQ_i = dS K, 64 columns of d at a time.
#pragma unroll
  for (int hn = 0; hn < 2; hn++) {
    float acc_q[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
      wgmma_ss_n64<1, 1>(acc_q, desc_mnmajor(base + OFF_DS + kk * 2048),
                         desc_mnmajor(base + OFF_K + hn * REGION + kk * 2048), kk > 0);
    wgmma_commit();
    wgmma_wait<0>(); // also retires dV/dK: the stage (Q_i, dO_i) is now dead
    reg_fence(acc_q, 32);
    emit(hn, acc_q);
  }
  reg_fence(acc_dk, 64);
  reg_fence(acc_dv, 64);
}

/* Write dQ half hn (fragment order) into a staged fp32 tile at stg. */
__device__ __forceinline__ void
stage_dq_half(unsigned char *stg, int hn, const float *acc_q)
{
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;
#pragma unroll
  for (int jn = 0; jn < 8; jn++) {
    int col = hn * 64 + jn * 8 + 2 * (lane & 3);
    *reinterpret_cast<float2 *>(stg + dq_stage_offset(r0, col)) =
        make_float2(acc_q[4 * jn], acc_q[4 * jn + 1]);
    *reinterpret_cast<float2 *>(stg + dq_stage_offset(r1, col)) =
        make_float2(acc_q[4 * jn + 2], acc_q[4 * jn + 3]);
  }
}

/* The same as int32 fixed point: round(x · sc) with the row's scale sc =
 * 2^row_exp (sc0 for row r0, sc1 for r1), stored as the float's bits. */
__device__ __forceinline__ void
stage_dq_half_fixed(unsigned char *stg, int hn, const float *acc_q, float sc0, float sc1)
{
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;
#pragma unroll
  for (int jn = 0; jn < 8; jn++) {
    int col = hn * 64 + jn * 8 + 2 * (lane & 3);
    *reinterpret_cast<int2 *>(stg + dq_stage_offset(r0, col)) =
        make_int2(__float2int_rn(acc_q[4 * jn] * sc0), __float2int_rn(acc_q[4 * jn + 1] * sc0));
    *reinterpret_cast<int2 *>(stg + dq_stage_offset(r1, col)) =
        make_int2(__float2int_rn(acc_q[4 * jn + 2] * sc1), __float2int_rn(acc_q[4 * jn + 3] * sc1));
  }
}

} // namespace sm90bwd
