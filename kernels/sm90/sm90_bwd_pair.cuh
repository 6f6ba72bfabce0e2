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

#include "../common/bwd_prep.h"
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
 * 0..127) as bf16 rows `ld` elements apart (vsa_bwd::token_stride: D in
 * BHSD, H·D in BSHD; a row's 256 bytes are contiguous either way). */
__device__ __forceinline__ void
store_rows(__nv_bfloat16 *out, int ld, const float *acc, float scale)
{
  int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  int r0 = warp * 16 + (lane >> 2);
  __nv_bfloat16 *o0 = out + (int64_t)r0 * ld, *o1 = o0 + (int64_t)8 * ld;
#pragma unroll
  for (int jn = 0; jn < 16; jn++) {
    int col = jn * 8 + 2 * (lane & 3);
    *reinterpret_cast<uint32_t *>(o0 + col) =
        pack_bf16(acc[4 * jn] * scale, acc[4 * jn + 1] * scale);
    *reinterpret_cast<uint32_t *>(o1 + col) =
        pack_bf16(acc[4 * jn + 2] * scale, acc[4 * jn + 3] * scale);
  }
}

/* Byte offset of dQ element (row, col) in a staged fp32 dQ tile: 512-byte
 * rows whose 16-byte chunks are XOR-swizzled by vsa_bwd::dq_row_swizzle
 * (no bank conflicts for the fragment's 8-byte stores; see bwd_prep.h). The
 * accumulator then holds swizzled rows, which the postprocess reads back
 * in order. */
__device__ __forceinline__ uint32_t
dq_stage_offset(int row, int col)
{
  return row * 512 + ((((col >> 2) ^ vsa_bwd::dq_row_swizzle(row))) << 4) + ((col & 3) << 2);
}

/* Zero K and V rows >= vb in shared memory (one consumer warpgroup, its
 * lanes via threadIdx & 127; k, v: the tiles): masked rows then contribute
 * exact zeros whatever the padded slots hold. */
__device__ __forceinline__ void
zero_padded_rows(unsigned char *k, unsigned char *v, int vb)
{
  for (int id = threadIdx.x & 127; id < BLK * 16; id += CONSUMER_THREADS) {
    int row = id >> 4, c16 = id & 15;
    if (row >= vb) {
      uint32_t off = (c16 >> 3) * REGION + row * 128 + (c16 & 7) * 16;
      *reinterpret_cast<uint4 *>(k + off) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4 *>(v + off) = make_uint4(0, 0, 0, 0);
    }
  }
}

/* One consumer warpgroup, after the last pair of q chunk c of kv block j:
 * hand dK, dV on (kv_row0: j's first row, which places its partials in
 * kv_acc; out0, ld: the element offset of j's first token in dk/dv and
 * the distance between tokens, vsa_bwd::token_offset/token_stride; bar:
 * the warpgroup's named barrier). With one chunk they go straight out as bf16; otherwise
 * chunk c waits until chunk c-1 of the same kv block has stored its
 * running sum in kv_acc (its counter in kv_sem reaches c), adds it, and
 * stores the sum (or, for the last chunk, the bf16 outputs) before letting
 * chunk c+1 go. Chunks of a kv block start in order (chunk-major grid), so
 * the wait never depends on a CTA that has not started; the adds happen in
 * chunk order, so dK/dV are the same bits every run. */
__device__ __forceinline__ void
finish_kv(int64_t kv_row0, int64_t out0, int ld, int c, int chunks, float *kv_acc, int *sem,
          __nv_bfloat16 *dk, __nv_bfloat16 *dv, float sm_scale, int bar, float *acc_dk,
          float *acc_dv)
{
  if (chunks == 1) {
    store_rows(dk + out0, ld, acc_dk, sm_scale);
    store_rows(dv + out0, ld, acc_dv, 1.f);
    return;
  }
  const int t = threadIdx.x & 127;
  // This thread's fragment: 64 floats of dK, then 64 of dV, per thread.
  float4 *acc = reinterpret_cast<float4 *>(kv_acc + kv_row0 * (2 * D)) + t;
  if (c > 0) {
    if (t == 0) wait_turn(sem, c);
    named_sync(bar, CONSUMER_THREADS);
    __threadfence();
#pragma unroll
    for (int x = 0; x < 16; x++) {
      float4 a = __ldcg(acc + x * CONSUMER_THREADS), v = __ldcg(acc + (16 + x) * CONSUMER_THREADS);
      acc_dk[4 * x] += a.x; acc_dk[4 * x + 1] += a.y; acc_dk[4 * x + 2] += a.z; acc_dk[4 * x + 3] += a.w;
      acc_dv[4 * x] += v.x; acc_dv[4 * x + 1] += v.y; acc_dv[4 * x + 2] += v.z; acc_dv[4 * x + 3] += v.w;
    }
  }
  if (c == chunks - 1) {
    store_rows(dk + out0, ld, acc_dk, sm_scale);
    store_rows(dv + out0, ld, acc_dv, 1.f);
    return;
  }
#pragma unroll
  for (int x = 0; x < 16; x++) {
    __stcg(acc + x * CONSUMER_THREADS,
           make_float4(acc_dk[4 * x], acc_dk[4 * x + 1], acc_dk[4 * x + 2], acc_dk[4 * x + 3]));
    __stcg(acc + (16 + x) * CONSUMER_THREADS,
           make_float4(acc_dv[4 * x], acc_dv[4 * x + 1], acc_dv[4 * x + 2], acc_dv[4 * x + 3]));
  }
  __threadfence();
  named_sync(bar, CONSUMER_THREADS);
  if (t == 0) red_release_add(sem, 1);
}

/* Where one kv block's operands sit in shared memory, as byte offsets from
 * the 1024-aligned base: K_j and V_j tiles (128B-swizzled, two 64-column
 * regions each) and the dS^T tile of its warpgroup's current pair.
 * Compile-time offsets keep them out of the consumer's registers (runtime
 * ones cost enough registers that ptxas serialised the wgmmas). */
template <uint32_t K_, uint32_t V_, uint32_t DS_>
struct kv_tiles {
  static constexpr uint32_t k = K_, v = V_, ds = DS_;
};

/* Phase 1 of a pair for one consumer warpgroup (its lanes via threadIdx &
 * 127) and kv block T: S^T, dP^T, P^T, dS^T; dS^T stored bf16 to T::ds;
 * dV += P^T dO and
 * dK += dS^T Q issued (one commit group, still running on return). sQ/sdO:
 * the stage's tiles; lse/delta: its statistics; a_p, a_ds (16 each): P^T
 * and dS^T as bf16 A fragments, which the running dV/dK wgmmas read from
 * registers until a later wait retires them. The caller then makes dS^T
 * visible with a named barrier before any dQ GEMM reads it, and runs the
 * dQ GEMM itself: written out at each call site, because ptxas serialised
 * every wgmma of v3 (C7512) when that loop was a function of its own. */
/* No gate: a warpgroup issues its GEMMs when it reaches them. */
struct no_gate {
  __device__ __forceinline__ static void wait() {}
  __device__ __forceinline__ static void pass() {}
};

/* No hook: the dS^T store needs no wait beyond the caller's barriers. */
struct no_hook {
  __device__ __forceinline__ void operator()() const {}
};

/* Gate::wait() before each of the two GEMM issues (S^T/dP^T, dV/dK) and
 * Gate::pass() after it: v5's ping-pong makes two warpgroups take turns.
 * before_ds_store() runs just before dS^T is written: v5 waits there for
 * the other warpgroup's dQ GEMM that still reads the tile. */
template <class T, class Gate = no_gate, class Hook = no_hook>
__device__ __forceinline__ void
pair_dkdv(uint32_t base, unsigned char *base_ptr, uint32_t sQ, uint32_t sdO, const float *lse,
          const float *delta, float scale_log2, bool valid0, bool valid1, float *acc_dk,
          float *acc_dv, uint32_t *a_p, uint32_t *a_ds, const Hook &before_ds_store = Hook{})
{
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;

  // S^T = K Q^T and dP^T = V dO^T: two commit groups.
  float acc_s[32], acc_dp[32];
  Gate::wait();
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; kk++) {
    uint32_t off = (kk >> 2) * REGION + (kk & 3) * 32;
    wgmma_ss_n64<0, 0>(acc_s, desc_kmajor(base + T::k + off), desc_kmajor(sQ + off), kk > 0);
  }
  wgmma_commit();
#pragma unroll
  for (int kk = 0; kk < 8; kk++) {
    uint32_t off = (kk >> 2) * REGION + (kk & 3) * 32;
    wgmma_ss_n64<0, 0>(acc_dp, desc_kmajor(base + T::v + off), desc_kmajor(sdO + off), kk > 0);
  }
  wgmma_commit();
  Gate::pass();

  // lse_i and Delta_i of this thread's columns, read before the waits (a
  // wait is a compiler memory barrier: loads after it stall the softmax).
  float2 lse2[8], delta2[8];
#pragma unroll
  for (int jn = 0; jn < 8; jn++) {
    const int col = jn * 8 + 2 * (lane & 3);
    lse2[jn] = *reinterpret_cast<const float2 *>(lse + col);
    delta2[jn] = *reinterpret_cast<const float2 *>(delta + col);
  }
  // P^T: columns of this thread's fragment are q rows of block i.
  wgmma_wait<1>();
  reg_fence(acc_s, 32);
#pragma unroll
  for (int jn = 0; jn < 8; jn++) {
    const float l0 = lse2[jn].x, l1 = lse2[jn].y;
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
    const float d0 = delta2[jn].x, d1 = delta2[jn].y;
    acc_dp[4 * jn + 0] = valid0 ? acc_s[4 * jn + 0] * (acc_dp[4 * jn + 0] - d0) : 0.f;
    acc_dp[4 * jn + 1] = valid0 ? acc_s[4 * jn + 1] * (acc_dp[4 * jn + 1] - d1) : 0.f;
    acc_dp[4 * jn + 2] = valid1 ? acc_s[4 * jn + 2] * (acc_dp[4 * jn + 2] - d0) : 0.f;
    acc_dp[4 * jn + 3] = valid1 ? acc_s[4 * jn + 3] * (acc_dp[4 * jn + 3] - d1) : 0.f;
  }
  // Accumulator pairs of n8 chunks (2kk, 2kk+1) are the A fragment of k16
  // slice kk: no shuffles.
#pragma unroll
  for (int x = 0; x < 16; x++) {
    a_p[x] = pack_bf16(acc_s[2 * x], acc_s[2 * x + 1]);
    a_ds[x] = pack_bf16(acc_dp[2 * x], acc_dp[2 * x + 1]);
  }
  // dS^T (kv rows x q columns) to shared memory for the dQ GEMM. The
  // previous dQ GEMM that read this dS^T tile has retired (see the callers).
  before_ds_store();
#pragma unroll
  for (int jn = 0; jn < 8; jn++) {
    int col = jn * 8 + 2 * (lane & 3);
    *reinterpret_cast<uint32_t *>(base_ptr + T::ds + sw128_offset(r0, col)) = a_ds[2 * jn];
    *reinterpret_cast<uint32_t *>(base_ptr + T::ds + sw128_offset(r1, col)) = a_ds[2 * jn + 1];
  }
  // dV += P^T dO, dK += dS^T Q (dO, Q read N-major).
  Gate::wait();
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    wgmma_rs_n128<1>(acc_dv, &a_p[4 * kk], desc_mnmajor(sdO + kk * 2048));
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    wgmma_rs_n128<1>(acc_dk, &a_ds[4 * kk], desc_mnmajor(sQ + kk * 2048));
  wgmma_commit();
  Gate::pass();
  fence_proxy_async(); // dS^T is read by the async proxy (wgmma) next
}

/* Phase 2 (v4) for a q block both kv blocks of a CTA select: this warpgroup's
 * 64-column half hn of dQ_i = dS_0 K_0 + dS_1 K_1 (K = 128 kv rows), so the
 * two partials leave as one. kv: K_0 (K_1 two tiles after it, V between);
 * ds: dS^T_0 (dS^T_1 one region after it); a_p, a_ds: phase 1's
 * fragments, kept until the wait. Both dS^T tiles must be visible
 * (a barrier over both warpgroups). Returns after every wgmma of this
 * warpgroup has retired; the other warpgroup's may still run. */
__device__ __forceinline__ void
pair_dq_shared(uint32_t kv, uint32_t ds, int hn, float *acc_q, uint32_t *a_p, uint32_t *a_ds)
{
  wgmma_fence();
#pragma unroll
  for (int w = 0; w < 2; w++)
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
      wgmma_ss_n64<1, 1>(acc_q, desc_mnmajor(ds + w * REGION + kk * 2048),
                         desc_mnmajor(kv + w * 2 * TILE + hn * REGION + kk * 2048),
                         w > 0 || kk > 0);
  wgmma_commit();
  wgmma_wait<0>(); // also retires this warpgroup's dV/dK
  reg_fence(acc_q, 32);
  reg_fence_u32(a_p, 16);
  reg_fence_u32(a_ds, 16);
}

/* The five GEMMs of one pair for a CTA with one consumer warpgroup
 * (threads 0..127, v2 and v3): phase 1, the warpgroup's barrier, phase 2.
 * The layout is the map above (OFF_K, OFF_V, OFF_DS).
 *
 * Phase 2 keeps the tensor pipe fed while dQ leaves: half 0 is issued
 * behind the running dV/dK group; once that group retires (its A fragments
 * die), half 1 is issued into the freed registers, and half 0 is emitted
 * (staged, or converted to fixed point) while half 1 runs (v3.3, NOTES). */
template <class Emit>
__device__ __forceinline__ void
pair_gradients(uint32_t base, unsigned char *base_ptr, uint32_t sQ, uint32_t sdO,
               const float *lse, const float *delta, float scale_log2, bool valid0,
               bool valid1, float *acc_dk, float *acc_dv, Emit emit)
{
  using T = kv_tiles<OFF_K, OFF_V, OFF_DS>;
  uint32_t a_p[16], a_ds[16];
  pair_dkdv<T>(base, base_ptr, sQ, sdO, lse, delta, scale_log2, valid0, valid1, acc_dk, acc_dv,
               a_p, a_ds);
  named_sync(BAR_CONSUMERS, CONSUMER_THREADS); // dS^T complete for every warp
  float acc_q0[32], acc_q1[32];
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    wgmma_ss_n64<1, 1>(acc_q0, desc_mnmajor(base + OFF_DS + kk * 2048),
                       desc_mnmajor(base + OFF_K + kk * 2048), kk > 0);
  wgmma_commit();
  wgmma_wait<1>(); // dV/dK retired: a_p, a_ds are dead
  reg_fence(acc_dk, 64);
  reg_fence(acc_dv, 64);
  reg_fence_u32(a_p, 16);
  reg_fence_u32(a_ds, 16);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    wgmma_ss_n64<1, 1>(acc_q1, desc_mnmajor(base + OFF_DS + kk * 2048),
                       desc_mnmajor(base + OFF_K + REGION + kk * 2048), kk > 0);
  wgmma_commit();
  wgmma_wait<1>();
  reg_fence(acc_q0, 32);
  emit(0, acc_q0);
  wgmma_wait<0>();
  reg_fence(acc_q1, 32);
  emit(1, acc_q1);
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
