/* bsa_bwd_kv2_sm90a.cu — version 4 of the native Hopper backward: two kv
 * blocks per CTA that share their q blocks' loads and dQ reduces.
 *
 * CTA = 3 warpgroups per (b, h, kv blocks 2p and 2p+1[, q chunk]), one CTA
 * per SM:
 *  - consumer warpgroups 0 and 1 (240 registers after setmaxnreg) own kv
 *    blocks a = 2p and b = 2p+1: K, V in shared memory, dK, dV in
 *    registers, the per-pair math of v2/v3 (sm90_bwd_pair.cuh);
 *  - the producer warpgroup (24 registers; one thread works) walks the
 *    union of both k2q lists (a merge of two ascending lists) and loads
 *    each q block of it once — Q_i, dO_i, lse_i, Delta_i — into a ring of
 *    STAGES stages, tagged with which kv blocks select it; it issues each
 *    q block's dQ bulk reduce once both consumers are done with its stage.
 * A q block only one kv block selects is that warpgroup's alone (v3's
 * pair: dQ staged in the dead stage). A q block both select is computed by
 * both, and its dQ = dS_a K_a + dS_b K_b leaves as one partial: after a
 * barrier over both warpgroups (both dS^T tiles written), warpgroup w
 * computes the 64 columns w of the K = 128 product and stages them. So a
 * shared q block costs one 32 KB load and one 32 KB reduce instead of two
 * of each — the L2 traffic the v3 profile found binding.
 *
 * With uniform random lists at density d, a fraction d of each list is
 * shared with the neighbouring kv block; VSA-like lists (local) share more.
 * Pairs are adjacent kv blocks (2p, 2p+1): neighbours along the fastest
 * tile axis for video lists; no overlap-maximising pairing yet.
 *
 * Work order, q chunking, the dK/dV hand-off between chunks, the
 * fixed-point deterministic mode and the list semantics are v3's
 * (bsa_bwd_ws_sm90a.cu): entries outside [0, nq) skipped, counts clamped
 * to the width, padded kv rows zeroed in shared memory, empty lists write
 * exact zero dK/dV. The merge needs ascending lists to find shared q
 * blocks (the op's canonical lists are); unsorted lists stay correct,
 * they only share less. Built for sm_90a only; head dim 128.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <limits.h>

#include "../kernels.h"
#include "../common/bwd_prep.h"
#include "sm90_bwd_pair.cuh"
#include "sm90_bwd_ws.h"

namespace {

using namespace sm90bwd;
constexpr int STAGES = 4;
constexpr int THREADS = 3 * CONSUMER_THREADS;
// Named barriers: 0 is __syncthreads, 1 and 2 the consumer warpgroups, 3
// both consumer warpgroups (shared q blocks).
constexpr int BAR_WG0 = 1, BAR_BOTH = 3;
// Shared memory map (bytes from a 1024-aligned base): per kv block w, K at
// OFF_KV + w·2·TILE and V after it; then the two dS^T tiles, the ring, its
// statistics (lse[64], delta[64] a stage), its tags and the mbarriers.
constexpr uint32_t OFF_KV = 0;
constexpr uint32_t OFF_DS2 = OFF_KV + 4 * TILE;
constexpr uint32_t OFF_RING = OFF_DS2 + 2 * REGION;
constexpr uint32_t OFF_RSTATS = OFF_RING + STAGES * STAGE_BYTES;
constexpr uint32_t OFF_TAGS = OFF_RSTATS + STAGES * STATS_BYTES; // int2 {q block, mask}
constexpr uint32_t OFF_BARS = OFF_TAGS + STAGES * 8;             // kv, full[S], ready[S]
constexpr uint32_t SMEM_BYTES = OFF_BARS + (1 + 2 * STAGES) * 8 + 1024;
static_assert(SMEM_BYTES <= 227 * 1024, "v4 shared memory plan exceeds the H200's 227 KB");
// A tag's mask: bit w set when kv block w selects the q block; 0 ends the walk.
constexpr int MASK_END = 0, MASK_BOTH = 3;

/* One kv block's list within chunk [lo, hi). */
struct kv_list {
  const int32_t *idx;
  int cnt, e;
  __device__ __forceinline__ int head() const { return e < cnt ? __ldg(idx + e) : INT_MAX; }
};

template <bool FIXED>
__device__ __forceinline__ void
producer(const sm90_ws_params &p, int64_t bh, int ja, int jb, int lo, int hi, uint32_t base,
         unsigned char *base_ptr)
{
  const uint32_t bar_kv = base + OFF_BARS, bar_full = bar_kv + 8,
                 bar_ready = bar_full + 8 * STAGES;
  kv_list l[2];
  const int js[2] = {ja, jb};
  for (int w = 0; w < 2; w++) {
    l[w].cnt = 0;
    l[w].idx = p.k2q_idx;
    if (js[w] < 0) continue;
    l[w].cnt = min(max(p.k2q_num[bh * p.nkv + js[w]], 0), p.k2q_width);
    l[w].idx = p.k2q_idx + (bh * p.nkv + js[w]) * (int64_t)p.k2q_width;
  }
  for (int w = 0; w < 2; w++) l[w].e = next_entry(l[w].idx, 0, l[w].cnt, lo, hi);
  if (l[0].e < l[0].cnt || l[1].e < l[1].cnt) {
    const int tiles = jb >= 0 ? 2 : 1;
    const vsa_bwd::head_coord kh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nkv * BLK, bh);
    mbar_arrive_expect_tx(bar_kv, tiles * 2 * TILE);
    for (int w = 0; w < tiles; w++)
      load_kv_tiles(p, kh.h, kh.row + js[w] * BLK, base + OFF_KV + w * 2 * TILE,
                    base + OFF_KV + w * 2 * TILE + TILE, bar_kv);
  }
  // The head's q-side map coordinates, once a CTA (vsa_bwd::tma_head).
  const vsa_bwd::head_coord qh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nq * BLK, bh);
  // A stage's tag names its q block until the stage is refilled: the
  // reduce reads it back from there.
  volatile int2 *tags = reinterpret_cast<volatile int2 *>(base_ptr + OFF_TAGS);
  int n = 0;
  for (;; n++) {
    const int ia = l[0].head(), ib = l[1].head();
    const int i = min(ia, ib);
    const int s = n % STAGES;
    const uint32_t st = base + OFF_RING + s * STAGE_BYTES;
    if (n >= STAGES) { // item n - STAGES's dQ, staged here, goes out before the refill
      mbar_wait(bar_ready + 8 * s, ((n - STAGES) / STAGES) & 1);
      reduce_dq<FIXED>(p, bh, tags[s].x, st);
    }
    if (i == INT_MAX) { // the end tag: no loads, a plain arrival
      tags[s].x = -1;
      tags[s].y = MASK_END;
      mbar_arrive(bar_full + 8 * s);
      break;
    }
    const int mask = (ia == i ? 1 : 0) | (ib == i ? 2 : 0);
    if (ia == i) l[0].e = next_entry(l[0].idx, l[0].e + 1, l[0].cnt, lo, hi);
    if (ib == i) l[1].e = next_entry(l[1].idx, l[1].e + 1, l[1].cnt, lo, hi);
    tags[s].x = i;
    tags[s].y = mask;
    load_q_stage(p, bh, qh, i, st, base + OFF_RSTATS + s * STATS_BYTES, bar_full + 8 * s);
  }
  // n items went out; the last min(n, STAGES - 1) of them still hold dQ.
  for (int m = n - STAGES + 1 > 0 ? n - STAGES + 1 : 0; m < n; m++) {
    const int s = m % STAGES;
    mbar_wait(bar_ready + 8 * s, (m / STAGES) & 1);
    reduce_dq<FIXED>(p, bh, tags[s].x, base + OFF_RING + s * STAGE_BYTES);
  }
  bulk_wait_all();
}

/* Consumer warpgroup WG of kv block j (-1: none, an odd count; it then
 * only acknowledges the tags), after setmaxnreg. */
template <bool FIXED, int WG>
__device__ __forceinline__ void
consumer(const sm90_ws_params &p, int64_t bh, int j, int c, uint32_t base,
         unsigned char *base_ptr)
{
  const uint32_t bar_kv = base + OFF_BARS, bar_full = bar_kv + 8,
                 bar_ready = bar_full + 8 * STAGES;
  constexpr int bar = BAR_WG0 + WG;
  using mine = kv_tiles<OFF_KV + WG * 2 * TILE, OFF_KV + WG * 2 * TILE + TILE, OFF_DS2 + WG * REGION>;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int vb = j >= 0 ? p.vbs[j] : 0;
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;  // this thread's kv rows
  const bool valid0 = r0 < vb, valid1 = r1 < vb;
  float acc_dk[64], acc_dv[64];
#pragma unroll
  for (int x = 0; x < 64; x++) acc_dk[x] = acc_dv[x] = 0.f;

  const int2 *tags = reinterpret_cast<const int2 *>(base_ptr + OFF_TAGS);
  bool kv_ready = false;
  for (int n = 0;; n++) {
    const int s = n % STAGES;
    mbar_wait(bar_full + 8 * s, (n / STAGES) & 1);
    const volatile int2 *tv = tags + s;
    const int2 tag = make_int2(tv->x, tv->y);
    if (tag.y == MASK_END) break;
    const uint32_t ready = bar_ready + 8 * s;
    if (!(tag.y & (1 << WG))) { // the other kv block's q block alone
      mbar_arrive(ready);
      continue;
    }
    if (!kv_ready) {
      mbar_wait(bar_kv, 0);
      if (vb < BLK) {
        zero_padded_rows(base_ptr + OFF_KV + WG * 2 * TILE,
                         base_ptr + OFF_KV + WG * 2 * TILE + TILE, vb);
        fence_proxy_async();
        named_sync(bar, CONSUMER_THREADS);
      }
      kv_ready = true;
    }
    const uint32_t sQ = base + OFF_RING + s * STAGE_BYTES;
    unsigned char *stg = base_ptr + OFF_RING + s * STAGE_BYTES;
    const float *lse = reinterpret_cast<const float *>(base_ptr + OFF_RSTATS + s * STATS_BYTES);
    float sc0 = 1.f, sc1 = 1.f; // FIXED: 2^row_exp of this thread's two q rows
    if (FIXED) {
      const int *re = p.row_exp + (bh * p.nq + tag.x) * (int64_t)BLK;
      sc0 = exp2_int(__ldg(re + r0));
      sc1 = exp2_int(__ldg(re + r1));
    }
    auto emit = [&](int hn, const float *acc_q) {
      if (FIXED) stage_dq_half_fixed(stg, hn, acc_q, sc0, sc1);
      else stage_dq_half(stg, hn, acc_q);
    };
    uint32_t a_p[16], a_ds[16];
    pair_dkdv<mine>(base, base_ptr, sQ, sQ + TILE, lse, lse + BLK, p.scale_log2, valid0, valid1,
                    acc_dk, acc_dv, a_p, a_ds);
    if (tag.y == MASK_BOTH) {
      // Both dS^T tiles written (and both K tiles' padding zeroed: each
      // warpgroup zeroes before its first pair, so before this barrier).
      // barrier.sync without .aligned: the warpgroups reach it from their
      // own code (compute-sanitizer synccheck flagged bar.sync here).
      named_sync_any(BAR_BOTH, 2 * CONSUMER_THREADS);
      float acc_q[32];
      pair_dq_shared(base + OFF_KV, base + OFF_DS2, WG, acc_q, a_p, a_ds);
      // Both warpgroups' wgmmas on this stage and on both dS^T tiles have
      // retired: the stage is dead and either dS^T may be rewritten.
      named_sync_any(BAR_BOTH, 2 * CONSUMER_THREADS);
      emit(WG, acc_q);
    } else {
      named_sync(bar, CONSUMER_THREADS); // dS^T complete for every warp
#pragma unroll
      for (int hn = 0; hn < 2; hn++) { // dQ_i = dS K, 64 columns at a time
        float acc_q[32];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
          wgmma_ss_n64<1, 1>(acc_q, desc_mnmajor(base + mine::ds + kk * 2048),
                             desc_mnmajor(base + mine::k + hn * REGION + kk * 2048), kk > 0);
        wgmma_commit();
        wgmma_wait<0>(); // also retires dV/dK: the stage is dead
        reg_fence(acc_q, 32);
        emit(hn, acc_q);
      }
    }
    reg_fence(acc_dk, 64);
    reg_fence(acc_dv, 64);
    fence_proxy_async(); // the staged dQ is read by the copy engine next
    mbar_arrive(ready);
  }
  if (j < 0) return;
  const int64_t kv_row0 = bh * ((int64_t)p.nkv * BLK) + (int64_t)j * BLK;
  // dk/dv rows of j in the layout; partials by kv_row0 (scratch).
  const int64_t out0 = vsa_bwd::token_offset(p.layout, p.H, (int64_t)p.nkv * BLK, bh,
                                             (int64_t)j * BLK);
  finish_kv(kv_row0, out0, vsa_bwd::token_stride(p.layout, p.H), c, p.chunks, p.kv_acc,
            p.kv_sem + bh * p.nkv + j, p.dk, p.dv, p.sm_scale, bar, acc_dk, acc_dv);
}

template <bool FIXED>
__global__ void __launch_bounds__(THREADS, 1)
bwd_kv2_kernel(const __grid_constant__ sm90_ws_params p)
{
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  const int npairs = (p.nkv + 1) / 2;
  const int64_t slot = (int64_t)blockIdx.z * p.group_items + blockIdx.x;
  const int64_t item = p.order ? __ldg(p.order + slot) : slot;
  const int pr = (int)(item % npairs), c = blockIdx.y;
  const int64_t bh = item / npairs;
  const int ja = 2 * pr, jb = 2 * pr + 1 < p.nkv ? 2 * pr + 1 : -1;
  const int lo = c * p.q_chunk, hi = min(p.nq, lo + p.q_chunk);
  const int wg = threadIdx.x >> 7;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  unsigned char *base_ptr = smem_raw + (base - smem_addr(smem_raw));
  const uint32_t bar_kv = base + OFF_BARS, bar_full = bar_kv + 8,
                 bar_ready = bar_full + 8 * STAGES;
  if (threadIdx.x == 0) {
    mbar_init(bar_kv, 1);
    for (int s = 0; s < STAGES; s++) {
      mbar_init(bar_full + 8 * s, 1);
      mbar_init(bar_ready + 8 * s, 2 * CONSUMER_THREADS);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 2) {
    setmaxnreg_dec<24>();
    if (threadIdx.x == 2 * CONSUMER_THREADS) producer<FIXED>(p, bh, ja, jb, lo, hi, base, base_ptr);
    return;
  }

  setmaxnreg_inc<240>();
  // Each warpgroup's code is its own instance: its tiles' offsets and
  // barrier are constants (registers are what the consumer lacks).
  if (wg == 0) consumer<FIXED, 0>(p, bh, ja, c, base, base_ptr);
  else consumer<FIXED, 1>(p, bh, jb, c, base, base_ptr);
#endif
}

} // namespace

cudaError_t
sm90_kv2_launch(const sm90_ws_params &p, cudaStream_t stream)
{
  static bool configured = false;
  return sm90_launch_main(bwd_kv2_kernel<false>, bwd_kv2_kernel<true>, THREADS, SMEM_BYTES, configured, p, stream);
}
