/* bsa_bwd_b128_qstep_sm90a.cu — version 6 of the native Hopper backward at
 * block 128: a 128-token kv block a CTA, walked in 64-row q steps, with dQ
 * split by columns between the consumer warpgroups and staged in buffers of
 * its own (block 128 only).
 *
 * CTA = 3 warpgroups per (b, h, 128-token kv block J[, q chunk]), one CTA
 * per SM:
 *  - consumer warpgroup w (w = 0, 1; 240 registers) owns kv rows
 *    64w..64w+63 of J: K_w, V_w in shared memory, dK_w, dV_w in registers;
 *  - the producer warpgroup (24 registers): one thread walks J's 128-token
 *    k2q list and loads each selected q block as two 64-row steps (Q, dO,
 *    lse, Delta and, in fixed point, the row exponents) into a ring of two
 *    32 KB stages; a second thread walks the same list and adds each
 *    step's staged dQ into the accumulator with one 32 KB bulk reduce.
 * Per step each consumer runs sm90_bwd_pair.cuh's 64 x 64 phase 1 (S^T,
 * dP^T, P^T, dS^T stored to shared memory, dV += P^T dO issued); one
 * barrier over both warpgroups (both dS^T tiles of the step are written);
 * then dQ columns 64w..64w+63 = dS K[:, 64w..] over all 128 kv rows, dK +=
 * dS^T Q behind it, and dQ staged while dK runs. The order is the one
 * cuDNN's and FlashAttention-4's Hopper backwards use (kernels/NOTES.md,
 * v6).
 *
 * Against v5 (bsa_bwd_b128_sm90a.cu), which stages a 128 x 128 pair's dQ
 * in the dead ring stage: a stage leaves the ring as soon as both
 * warpgroups' dK has retired, without waiting for dQ's conversion and
 * reduce, and the dQ GEMM overlaps the dK GEMM instead of following both
 * halves' dV/dK. The accumulator is in DQ_QUARTERS order (bwd_prep.h), so
 * a warpgroup's 64 columns of a 64-row step are one contiguous 16 KB.
 *
 * Semantics as v5: entries outside [0, nq/2) skipped, counts clamped,
 * padded kv rows zeroed in shared memory, empty lists write exact zero
 * dK/dV, dK/dV partials pass between q chunks in chunk order. Built for
 * sm_90a only; head dim 128.
 */
#include <cuda.h>
#include <cuda_bf16.h>

#include "../kernels.h"
#include "../common/bwd_prep.h"
#include "sm90_bwd_pair.cuh"
#include "sm90_bwd_ws.h"

namespace {

using namespace sm90bwd;
constexpr int STAGES = 2;
constexpr int THREADS = 3 * CONSUMER_THREADS;
// Named barriers: 0 is __syncthreads, 1 and 2 the consumer warpgroups, 3
// both consumer warpgroups.
constexpr int BAR_WG0 = 1, BAR_BOTH = 3;
constexpr uint32_t DQ_BYTES = BLK * D * sizeof(float);  // a step's dQ; warpgroup w's half at w·DQ_BYTES/2
constexpr uint32_t STAT_BYTES = BLK * sizeof(float);    // one statistic of a step
// Shared memory map (bytes from a 1024-aligned base):
//   K_0, V_0, K_1, V_1 (one TILE each; K_h at h·2·TILE);
//   four dS^T tiles, (kv half h, step parity b) at OFF_DS4 + (2b + h)·REGION,
//   so a step's two are adjacent (the dQ GEMM's K = 128 operand);
//   two dQ buffers, step parity b at OFF_DQ + b·DQ_BYTES;
//   the ring: a stage holds the Q tile, then the dO tile;
//   its statistics (lse[64], Delta[64], row_exp[64]); the tags (the step's
//   64-token q block, -1 ends);
//   the mbarriers (kv, full[S], empty[S], dq_full[2], dq_empty[2]).
constexpr uint32_t OFF_KV = 0;
constexpr uint32_t OFF_DS4 = OFF_KV + 4 * TILE;
constexpr uint32_t OFF_DQ = OFF_DS4 + 4 * REGION;
constexpr uint32_t OFF_RING = OFF_DQ + 2 * DQ_BYTES;
constexpr uint32_t RING_STAGE = 2 * TILE;
constexpr uint32_t OFF_RSTATS = OFF_RING + STAGES * RING_STAGE;
constexpr uint32_t RING_STATS = 3 * STAT_BYTES;
constexpr uint32_t OFF_TAGS = OFF_RSTATS + STAGES * RING_STATS;
constexpr uint32_t OFF_BARS = (OFF_TAGS + STAGES * sizeof(int) + 7) & ~7u;
constexpr uint32_t BAR_FULL = OFF_BARS + 8, BAR_EMPTY = BAR_FULL + 8 * STAGES,
                   BAR_DQ_FULL = BAR_EMPTY + 8 * STAGES, BAR_DQ_EMPTY = BAR_DQ_FULL + 16;
constexpr uint32_t OFF_END = BAR_DQ_EMPTY + 16;
// As v5: the H100/H200 opt-in, with dynamic shared memory starting
// 1024-aligned (the kernel returns without writing where it does not).
constexpr uint32_t SMEM_BYTES = 227 * 1024;
static_assert(OFF_END <= SMEM_BYTES, "v6 shared memory plan exceeds the H200's 227 KB");
static_assert(OFF_RING % 1024 == 0 && OFF_DQ % 1024 == 0, "swizzled tiles need 1024-byte alignment");

/* Loader: 64-token q block i of head bh into stage st and its statistics
 * at stats, on mbarrier full. */
template <bool FIXED>
__device__ __forceinline__ void
load_step(const sm90_ws_params &p, int64_t bh, vsa_bwd::head_coord qh, int i, uint32_t st,
          uint32_t stats, uint32_t full)
{
  const int64_t q_row0 = bh * ((int64_t)p.nq * BLK) + (int64_t)i * BLK;
  const int tr = qh.row + i * BLK;
  mbar_arrive_expect_tx(full, RING_STAGE + (FIXED ? 3 : 2) * STAT_BYTES);
  tma_load_3d(st, &p.tm_q, 0, qh.h, tr, full);
  tma_load_3d(st + REGION, &p.tm_q, 64, qh.h, tr, full);
  tma_load_3d(st + TILE, &p.tm_do, 0, qh.h, tr, full);
  tma_load_3d(st + TILE + REGION, &p.tm_do, 64, qh.h, tr, full);
  bulk_load(stats, p.lse + q_row0, STAT_BYTES, full);
  bulk_load(stats + STAT_BYTES, p.delta + q_row0, STAT_BYTES, full);
  if (FIXED) bulk_load(stats + 2 * STAT_BYTES, p.row_exp + q_row0, STAT_BYTES, full);
}

/* J's 128-token list, and its first entry in the q chunk [lo, hi). */
struct list_walk {
  const int32_t *list;
  int cnt, lo, hi, e;
  __device__ list_walk(const sm90_ws_params &p, int64_t bh, int J, int lo_, int hi_)
  {
    const int64_t row = bh * (p.nkv / 2) + J;
    cnt = min(max(p.list128.num[row], 0), p.list128.width);
    list = p.list128.idx + row * p.list128.width;
    lo = lo_;
    hi = min(hi_, p.nq / 2);
    e = next_entry(list, 0, cnt, lo, hi);
  }
  __device__ bool done() const { return e >= cnt; }
  __device__ int next() // the current entry's q block; moves on
  {
    const int I = __ldg(list + e);
    e = next_entry(list, e + 1, cnt, lo, hi);
    return I;
  }
};

template <bool FIXED>
__device__ __forceinline__ void
loader(const sm90_ws_params &p, int64_t bh, int J, int lo, int hi, uint32_t base,
       unsigned char *base_ptr)
{
  list_walk w(p, bh, J, lo, hi);
  if (!w.done()) {
    const vsa_bwd::head_coord kh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nkv * BLK, bh);
    mbar_arrive_expect_tx(base + OFF_BARS, 4 * TILE);
    for (int h = 0; h < 2; h++)
      load_kv_tiles(p, kh.h, kh.row + J * 2 * BLK + h * BLK, base + OFF_KV + h * 2 * TILE,
                    base + OFF_KV + h * 2 * TILE + TILE, base + OFF_BARS);
  }
  const vsa_bwd::head_coord qh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nq * BLK, bh);
  volatile int *tags = reinterpret_cast<volatile int *>(base_ptr + OFF_TAGS);
  int n = 0;
  // A stage is refilled once both warpgroups' GEMMs of step n - STAGES
  // have retired (its empty barrier); the end tag too, so a consumer never
  // sees a full barrier two phases ahead.
  auto acquire = [&](int s) {
    if (n >= STAGES) mbar_wait(base + BAR_EMPTY + 8 * s, ((n - STAGES) / STAGES) & 1);
  };
  while (!w.done()) {
    const int I = w.next();
    for (int t = 0; t < 2; t++, n++) {
      const int s = n % STAGES;
      acquire(s);
      tags[s] = 2 * I + t;
      load_step<FIXED>(p, bh, qh, 2 * I + t, base + OFF_RING + s * RING_STAGE,
                       base + OFF_RSTATS + s * RING_STATS, base + BAR_FULL + 8 * s);
    }
  }
  const int s = n % STAGES;
  acquire(s);
  tags[s] = -1;
  mbar_arrive(base + BAR_FULL + 8 * s);
}

/* Reducer: the same walk; each step's dQ (both warpgroups' halves, one
 * contiguous 32 KB in DQ_QUARTERS order) goes out as one bulk reduce. */
template <bool FIXED>
__device__ __forceinline__ void
reducer(const sm90_ws_params &p, int64_t bh, int J, int lo, int hi, uint32_t base)
{
  list_walk w(p, bh, J, lo, hi);
  int n = 0;
  while (!w.done()) {
    const int I = w.next();
    for (int t = 0; t < 2; t++, n++) {
      const int b = n & 1;
      mbar_wait(base + BAR_DQ_FULL + 8 * b, (n >> 1) & 1);
      reduce_dq<FIXED>(p, bh, 2 * I + t, base + OFF_DQ + b * DQ_BYTES); // returns once read
      mbar_arrive(base + BAR_DQ_EMPTY + 8 * b);
    }
  }
  bulk_wait_all();
}

/* A consumer: write its dQ fragment (64 q rows x 64 columns, wgmma order)
 * into its half of a step's buffer at stg in DQ_QUARTERS order: 32-column
 * quarters of 128-byte rows whose 16-byte chunks sit at chunk ^ (row & 7)
 * (a warp's 8-byte stores then take the minimum two wavefronts). Fixed
 * point: int32 round(x · 2^row_exp) by fixed_round, the same bits as F2I. */
template <bool FIXED>
__device__ __forceinline__ void
stage_dq_quarters(unsigned char *stg, const float *acc_q, float sc0, float sc1)
{
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;
#pragma unroll
  for (int jn = 0; jn < 8; jn++) {
    const int col = jn * 8 + 2 * (lane & 3);
    const uint32_t off = (col >> 5) * (BLK * 128) + ((((col & 31) >> 2) ^ (r0 & 7)) << 4) +
                         (col & 3) * 4;
    const float *a = acc_q + 4 * jn;
    if (FIXED) {
      *reinterpret_cast<int2 *>(stg + off + r0 * 128) =
          make_int2(fixed_round(a[0], sc0), fixed_round(a[1], sc0));
      *reinterpret_cast<int2 *>(stg + off + r1 * 128) =
          make_int2(fixed_round(a[2], sc1), fixed_round(a[3], sc1));
    } else {
      *reinterpret_cast<float2 *>(stg + off + r0 * 128) = make_float2(a[0], a[1]);
      *reinterpret_cast<float2 *>(stg + off + r1 * 128) = make_float2(a[2], a[3]);
    }
  }
}

/* Consumer warpgroup WG: kv rows 64·WG.. of 128-token kv block J. */
template <bool FIXED, int WG>
__device__ __forceinline__ void
consumer(const sm90_ws_params &p, int64_t bh, int J, int c, uint32_t base,
         unsigned char *base_ptr)
{
  constexpr int both = 2 * CONSUMER_THREADS;
  constexpr int bar = BAR_WG0 + WG;
  constexpr uint32_t K_ = OFF_KV + WG * 2 * TILE, V_ = K_ + TILE;
  using tiles = kv_tiles<K_, V_, OFF_DS4 + WG * REGION>; // dS^T of parity 0
  const int j = 2 * J + WG; // this warpgroup's 64-token kv sub-block
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int vb = p.vbs[j];
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8; // kv rows in phase 1, q rows in dQ
  const bool valid0 = r0 < vb, valid1 = r1 < vb;
  float acc_dk[64], acc_dv[64];
#pragma unroll
  for (int x = 0; x < 64; x++) acc_dk[x] = acc_dv[x] = 0.f;

  const int *tags = reinterpret_cast<const int *>(base_ptr + OFF_TAGS);
  bool kv_ready = false;
#pragma unroll 1
  for (int n = 0;; n++) {
    const int s = n % STAGES, b = n & 1;
    mbar_wait(base + BAR_FULL + 8 * s, (n / STAGES) & 1);
    if (*(reinterpret_cast<const volatile int *>(tags + s)) < 0) break;
    if (!kv_ready) {
      mbar_wait(base + OFF_BARS, 0);
      if (vb < BLK) { // both K halves are zeroed before the first step's BAR_BOTH
        zero_padded_rows(base_ptr + K_, base_ptr + V_, vb);
        fence_proxy_async();
        named_sync(bar, CONSUMER_THREADS);
      }
      kv_ready = true;
    }
    const uint32_t st = base + OFF_RING + s * RING_STAGE;
    const float *lse = reinterpret_cast<const float *>(base_ptr + OFF_RSTATS + s * RING_STATS);
    const float *delta = lse + BLK;
    // Phase 1; dS^T goes to tile (WG, b), which both warpgroups' dQ GEMMs
    // of step n - 2 read: each retired it before its BAR_BOTH of step
    // n - 1, which this warpgroup has passed.
    uint32_t a_p[16], a_ds[16];
    pair_dkdv<tiles, no_gate, no_hook, true>(base, base_ptr + b * TILE, st, st + TILE, lse, delta,
                                             p.scale_log2, valid0, valid1, acc_dk, acc_dv, a_p,
                                             a_ds);
    named_sync_any(BAR_BOTH, both); // both dS^T tiles of this step written
    // dQ columns 64·WG..: dS (q x all 128 kv rows) K[:, 64·WG..].
    float acc_q[32];
    const uint32_t ds = base + OFF_DS4 + b * TILE;
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        wgmma_ss_n64<1, 1>(acc_q, desc_mnmajor(ds + h * REGION + kk * 2048),
                           desc_mnmajor(base + OFF_KV + h * 2 * TILE + WG * REGION + kk * 2048),
                           h > 0 || kk > 0);
    wgmma_commit();
    wgmma_wait<1>(); // dV retired: P^T's fragments are dead
    reg_fence(acc_dv, 64);
    reg_fence_u32(a_p, 16);
    // dK += dS^T Q, behind the dQ GEMM.
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
      wgmma_rs_n128<1>(acc_dk, &a_ds[4 * kk], desc_mnmajor(st + kk * 2048));
    wgmma_commit();
    wgmma_wait<1>(); // dQ retired
    reg_fence(acc_q, 32);
    float sc0 = 1.f, sc1 = 1.f;
    if (FIXED) {
      const int *rexp = reinterpret_cast<const int *>(lse + 2 * BLK);
      sc0 = exp2_int(rexp[r0]);
      sc1 = exp2_int(rexp[r1]);
    }
    // The buffer of parity b is free once the reducer has read step n - 2's.
    if (n >= 2) mbar_wait(base + BAR_DQ_EMPTY + 8 * b, ((n - 2) >> 1) & 1);
    stage_dq_quarters<FIXED>(base_ptr + OFF_DQ + b * DQ_BYTES + WG * (DQ_BYTES / 2), acc_q, sc0,
                             sc1);
    fence_proxy_async(); // the copy engine reads the buffer next
    mbar_arrive(base + BAR_DQ_FULL + 8 * b);
    wgmma_wait<0>(); // dK retired: this warpgroup no longer reads the stage
    reg_fence(acc_dk, 64);
    reg_fence_u32(a_ds, 16);
    mbar_arrive(base + BAR_EMPTY + 8 * s);
  }
  const int64_t kv_row0 = bh * ((int64_t)p.nkv * BLK) + (int64_t)j * BLK;
  const int64_t out0 = vsa_bwd::token_offset(p.layout, p.H, (int64_t)p.nkv * BLK, bh,
                                             (int64_t)j * BLK);
  finish_kv(kv_row0, out0, vsa_bwd::token_stride(p.layout, p.H), c, p.chunks, p.kv_acc,
            p.kv_sem + bh * p.nkv + j, p.dk, p.dv, p.sm_scale, bar, acc_dk, acc_dv);
}

template <bool FIXED>
__global__ void __launch_bounds__(THREADS, 1)
bwd_qstep_kernel(const __grid_constant__ sm90_ws_params p)
{
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  const int nkv128 = p.nkv / 2;
  const int64_t slot = (int64_t)blockIdx.z * p.group_items + blockIdx.x;
  const int64_t item = p.order ? __ldg(p.order + slot) : slot;
  const int J = (int)(item % nkv128), c = blockIdx.y;
  const int64_t bh = item / nkv128;
  // q chunks count 64-token blocks (q_chunk is even here: the launcher).
  const int lo = c * p.q_chunk / 2, hi = lo + p.q_chunk / 2;
  const int wg = threadIdx.x >> 7;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  if (smem_addr(smem_raw) & 1023) return; // see SMEM_BYTES
  const uint32_t base = smem_addr(smem_raw);
  if (threadIdx.x == 0) {
    mbar_init(base + OFF_BARS, 1);
    for (int s = 0; s < STAGES; s++) {
      mbar_init(base + BAR_FULL + 8 * s, 1);
      mbar_init(base + BAR_EMPTY + 8 * s, 2 * CONSUMER_THREADS);
    }
    for (int b = 0; b < 2; b++) {
      mbar_init(base + BAR_DQ_FULL + 8 * b, 2 * CONSUMER_THREADS);
      mbar_init(base + BAR_DQ_EMPTY + 8 * b, 1);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 2) {
    setmaxnreg_dec<24>();
    if (threadIdx.x == 2 * CONSUMER_THREADS) loader<FIXED>(p, bh, J, lo, hi, base, smem_raw);
    else if (threadIdx.x == 2 * CONSUMER_THREADS + 32) reducer<FIXED>(p, bh, J, lo, hi, base);
    return;
  }

  setmaxnreg_inc<240>();
  if (wg == 0) consumer<FIXED, 0>(p, bh, J, c, base, smem_raw);
  else consumer<FIXED, 1>(p, bh, J, c, base, smem_raw);
#endif
}

} // namespace

cudaError_t
sm90_b128_qstep_launch(const sm90_ws_params &p, cudaStream_t stream)
{
  static bool configured = false;
  return sm90_launch_main(bwd_qstep_kernel<false>, bwd_qstep_kernel<true>, THREADS, SMEM_BYTES,
                          configured, p, stream);
}
