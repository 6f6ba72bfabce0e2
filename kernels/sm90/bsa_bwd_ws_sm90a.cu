/* bsa_bwd_ws_sm90a.cu — version 3 of the native Hopper backward: the same
 * per-pair math as v2 (sm90_bwd_pair.cuh), warp-specialized.
 *
 * CTA = 2 warpgroups per (b, h, kv block j[, q chunk]), two CTAs per SM:
 *  - consumer warpgroup (threads 0..127, 232 registers after setmaxnreg):
 *    keeps dK, dV in registers and runs the five GEMMs of each pair; it
 *    never issues a load or waits on the copy engine;
 *  - producer warpgroup (threads 128..255, 24 registers; one thread works):
 *    TMA-loads K_j, V_j once and Q_i, dO_i (128B-swizzled boxes of 3D maps
 *    that take either token layout, common/bwd_prep.h), lse_i and
 *    Delta_i (bulk copies) into a two-stage ring on mbarriers, and issues
 *    each pair's dQ bulk reduce-add once the consumer has staged it.
 * The dQ partial of pair n is staged in its own dead Q/dO stage; the
 * producer waits for that stage's reduce to have read shared memory before
 * loading pair n+2 into it, while the consumer works on pair n+1.
 *
 * Deterministic mode (FIXED): the consumer stages each partial as int32
 * round(x · 2^row_exp[row]) (common/bwd_prep.h bounds every partial sum
 * below 2^30) and the producer adds it with the u32 bulk reduce: integer
 * addition is exact in any order, so dq is the same bits every run, with
 * the fp32 mode's traffic and no waiting (it replaced a turn-taking mode,
 * kernels/NOTES.md v3.1).
 *
 * Otherwise CTAs take their (b, h, kv block) from the preprocess's work
 * order: longest k2q list first within a group of heads, so the grid ends
 * on short lists instead of a tail of long ones.
 *
 * Semantics as v2 (src/core/bsa.h): entries outside [0, nq) skipped, counts
 * clamped to the width, padded kv rows zeroed in shared memory, empty lists
 * write exact zero dK/dV. Built for sm_90a only; head dim 128.
 */
#include <cuda.h>
#include <cuda_bf16.h>

#include "../kernels.h"
#include "../common/bwd_prep.h"
#include "sm90_bwd_pair.cuh"
#include "sm90_bwd_ws.h"

namespace {

using namespace sm90bwd;
constexpr int THREADS = 2 * CONSUMER_THREADS;
constexpr uint32_t OFF_BAR = OFF_END;  // kv, full[2], dq_ready[2]
constexpr uint32_t SMEM_BYTES = OFF_BAR + 5 * 8 + 1024;

template <bool FIXED>
__global__ void __launch_bounds__(THREADS, 2)
bwd_ws_kernel(const __grid_constant__ sm90_ws_params p)
{
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  const int64_t slot = (int64_t)blockIdx.z * p.group_items + blockIdx.x;
  const int64_t item = p.order ? __ldg(p.order + slot) : slot;
  const int j = (int)(item % p.nkv), c = blockIdx.y;
  const int64_t bh = item / p.nkv;
  const int64_t kv_row0 = bh * ((int64_t)p.nkv * BLK) + (int64_t)j * BLK;
  const bool consumer = threadIdx.x < CONSUMER_THREADS;
  const int lo = c * p.q_chunk, hi = min(p.nq, lo + p.q_chunk);

  int cnt = p.k2q_num[bh * p.nkv + j];
  cnt = min(max(cnt, 0), p.k2q_width);
  const int32_t *list = p.k2q_idx + (bh * p.nkv + j) * (int64_t)p.k2q_width;
  // first == cnt: nothing in this chunk selects this kv block; the
  // consumer still hands zero partials on (exact zero dK/dV when no chunk
  // has a pair).
  const int first = next_entry(list, 0, cnt, lo, hi);

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  unsigned char *base_ptr = smem_raw + (base - smem_addr(smem_raw));
  const uint32_t bar_kv = base + OFF_BAR, bar_full = bar_kv + 8, bar_ready = bar_kv + 24;
  if (threadIdx.x == 0) {
    mbar_init(bar_kv, 1);
    for (int s = 0; s < 2; s++) {
      mbar_init(bar_full + 8 * s, 1);
      mbar_init(bar_ready + 8 * s, CONSUMER_THREADS);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (!consumer) {
    setmaxnreg_dec<24>();
    if (threadIdx.x != CONSUMER_THREADS || first >= cnt) return;
    // The head's map coordinates, once a CTA (vsa_bwd::tma_head).
    const vsa_bwd::head_coord qh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nq * BLK, bh);
    const vsa_bwd::head_coord kh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nkv * BLK, bh);
    mbar_arrive_expect_tx(bar_kv, 2 * TILE);
    load_kv_tiles(p, kh.h, kh.row + j * BLK, base + OFF_K, base + OFF_V, bar_kv);
    int staged0 = 0, staged1 = 0; // q block whose pair uses each stage
    int n = 0;
    for (int e = first; e < cnt; e = next_entry(list, e + 1, cnt, lo, hi), n++) {
      const int s = n & 1;
      const uint32_t st = base + OFF_STAGE + s * STAGE_BYTES;
      const int done = s ? staged1 : staged0;
      if (n >= 2) { // pair n-2's dQ, staged here, goes out before the refill
        mbar_wait(bar_ready + 8 * s, ((n - 2) >> 1) & 1);
        reduce_dq<FIXED>(p, bh, done, st);
      }
      const int i = __ldg(list + e);
      if (s) staged1 = i; else staged0 = i;
      load_q_stage(p, bh, qh, i, st, base + OFF_STATS + s * STATS_BYTES, bar_full + 8 * s);
    }
    for (int m = n >= 2 ? n - 2 : 0; m < n; m++) { // the last pairs' dQ
      const int s = m & 1;
      mbar_wait(bar_ready + 8 * s, (m >> 1) & 1);
      reduce_dq<FIXED>(p, bh, s ? staged1 : staged0, base + OFF_STAGE + s * STAGE_BYTES);
    }
    bulk_wait_all();
    return;
  }

  setmaxnreg_inc<232>();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int vb = p.vbs[j];
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;  // this thread's kv rows
  const bool valid0 = r0 < vb, valid1 = r1 < vb;
  float acc_dk[64], acc_dv[64];
#pragma unroll
  for (int x = 0; x < 64; x++) acc_dk[x] = acc_dv[x] = 0.f;

  if (first < cnt) {
    mbar_wait(bar_kv, 0);
    if (vb < BLK) {
      zero_padded_rows(base_ptr + OFF_K, base_ptr + OFF_V, vb);
      fence_proxy_async();
      named_sync(BAR_CONSUMERS, CONSUMER_THREADS);
    }
  }
  // FIXED: launched behind the row-exponent kernel as its programmatic
  // dependent; the K/V and first stages load meanwhile. Every CTA waits,
  // so this grid never completes before the exponents do.
  if (FIXED) pdl_wait();
  int n = 0;
  for (int e = first; e < cnt; e = next_entry(list, e + 1, cnt, lo, hi), n++) {
    const int s = n & 1;
    mbar_wait(bar_full + 8 * s, (n >> 1) & 1);
    const uint32_t sQ = base + OFF_STAGE + s * STAGE_BYTES;
    unsigned char *stg = base_ptr + OFF_STAGE + s * STAGE_BYTES;
    const float *lse = reinterpret_cast<const float *>(base_ptr + OFF_STATS + s * STATS_BYTES);
    float sc0 = 1.f, sc1 = 1.f; // FIXED: 2^row_exp of this thread's two q rows
    if (FIXED) {
      const int *re = p.row_exp + (bh * p.nq + __ldg(list + e)) * (int64_t)BLK;
      sc0 = exp2_int(__ldg(re + r0));
      sc1 = exp2_int(__ldg(re + r1));
    }
    pair_gradients(base, base_ptr, sQ, sQ + TILE, lse, lse + BLK, p.scale_log2, valid0,
                   valid1, acc_dk, acc_dv, [&](int hn, const float *acc_q) {
                     if (FIXED) stage_dq_half_fixed(stg, hn, acc_q, sc0, sc1);
                     else stage_dq_half(stg, hn, acc_q);
                   });
    fence_proxy_async(); // the staged dQ is read by the copy engine next
    mbar_arrive(bar_ready + 8 * s);
  }
  // dk/dv rows of j in the layout; partials by kv_row0 (scratch).
  const int64_t out0 = vsa_bwd::token_offset(p.layout, p.H, (int64_t)p.nkv * BLK, bh,
                                             (int64_t)j * BLK);
  finish_kv(kv_row0, out0, vsa_bwd::token_stride(p.layout, p.H), c, p.chunks, p.kv_acc,
            p.kv_sem + bh * p.nkv + j, p.dk, p.dv, p.sm_scale, BAR_CONSUMERS, acc_dk, acc_dv);
#endif
}

} // namespace

cudaError_t
sm90_ws_launch(const sm90_ws_params &p, cudaStream_t stream)
{
  static bool configured = false;
  return sm90_launch_main(bwd_ws_kernel<false>, bwd_ws_kernel<true>, THREADS, SMEM_BYTES, configured, p, stream,
                          !vsa_bwd::ablate("no_pdl"));
}
