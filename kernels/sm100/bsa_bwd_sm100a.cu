/* bsa_bwd_sm100a.cu — the native Blackwell (sm_100a, tcgen05 + tensor
 * memory) block-sparse backward. Built twice from this source: for sm_100a
 * / sm_100f / sm_103a with the hardware tcgen05 layer, and (VSA_TCGEN05_EMU)
 * for sm_90a with the emulated one, whose launcher is
 * bsa_backward_sm100a_emu. No Blackwell GPU is available to this project:
 * the hardware build is compiled and SASS-checked, never run; the emulated
 * build runs this kernel's every other line on an H200 (kernels/NOTES.md).
 *
 * One persistent CTA per SM walks work items (b, h, kv block j[, q chunk c])
 * in the preprocess's longest-list-first order (an atomic ticket). Per item
 * it keeps K_j, V_j in shared memory and dV^T, dK^T in tensor memory, and
 * takes j's k2q list two q blocks (128 q rows) a step, so that every MMA
 * has M = 128 (cta_group::1, one row per tensor-memory lane):
 *   S    = Q2 K^T      128x64x128   SS, K-major A and B
 *   dP   = dO2 V^T     128x64x128   SS
 *   P    = exp2(S·sm_scale·log2e − lse), 0 on kv columns >= vbs[j]
 *   dS   = P ∘ (dP − Delta)
 *   dV^T += dO2^T P    128x64x128   SS, MN-major A (dO) and B (P, smem)
 *   dK^T += Q2^T dS    128x64x128   SS, MN-major A (Q) and B (dS, smem)
 *   dQ2  = dS K        128x128x64   TS: dS fed back from tensor memory
 *                                   (A-from-TMEM), K read MN-major
 * (standard attention backward, FlashAttention-2 Alg. 2, with Triton's
 * base-2 lse). In this orientation P and dS are the B operand of the dV/dK
 * GEMMs, which the ISA takes from shared memory only; the A-from-TMEM form
 * feeds dS into dQ. Q2/dO2 are the step's two 64-row blocks stacked; an
 * odd last step loads its one block twice and masks the second half.
 *
 * Warp roles (384 threads):
 *   warps 0-3   softmax: lane = q row; tcgen05.ld S, dP rows; P, dS to
 *               shared memory (bf16, 128B-swizzled) and dS to tensor memory
 *   warps 4-7   dQ drain: tcgen05.ld dQ rows -> fp32 staging -> 4 KB
 *               cp.reduce.async.bulk per warp and column quarter; at item
 *               start, zero K/V rows >= vbs; at item end, the dK/dV epilogue
 *   warp 8      TMA producer (K, V once an item; Q2, dO2, lse, Delta a step
 *               into a 2-slot ring) and the work scheduler
 *   warp 9      MMA issuer (one thread), tensor-memory owner
 *   warps 10-11 idle; in the emulated build, the tcgen05 emulator
 * Tensor memory (512 columns x 128 lanes, fp32): S[2] 0/64, dP 128,
 * dS[2] (bf16x2) 192/224, dQ 256, dV^T 384, dK^T 448.
 *
 * dQ partials are summed in an fp32 accumulator in arrival order, or
 * (deterministic) as int32 fixed point scaled by 2^row_exp[row]
 * (common/bwd_prep.h), which adds exactly in any order: the same bits every
 * run. dK/dV are summed in list order (deterministic either way); with q
 * chunking, chunk c adds chunk c-1's fp32 partial in order.
 *
 * Semantics as the reference (src/core/bsa.h): entries outside [0, nq) or the
 * chunk's q range are skipped, counts clamped to the width, padded kv rows
 * (>= vbs) zeroed in shared memory and masked, empty lists give exact-zero
 * dK/dV; head dim 128; any B, H, Sq != Skv, odd block counts; 64-bit
 * offsets (TMA rows < 2^31). Both token layouts (BHSD, BSHD): the TMA
 * maps are 3D (column, head, row; common/bwd_prep.h, tile_map), so every
 * box is still 64 rows of 128 contiguous bytes and the shared-memory
 * tiles are the same bytes; a work item finds its head's coordinates once
 * (tma_head), and the dK/dV epilogue stores rows H·D apart in BSHD.
 */
#include <cuda.h>
#include <cuda_bf16.h>

#include "../common/async_copy.cuh"
#include "../common/block_expand.h"
#include "../common/bwd_prep.h"
#include "../kernels.h"
#include "bsa_bwd_b128.h"
#include "bwd_items.cuh"
#include "tcgen05.cuh"

#ifdef VSA_TCGEN05_EMU
#define SM100_FN(name) name##_emu
#else
#define SM100_FN(name) name
#endif

namespace {

using vsa_bwd::BLK;
using vsa_bwd::D;

// ----------------------------------------------------------------------------
// roles, shared memory, tensor memory

constexpr int W_LOAD = 8, W_MMA = 9, W_EMU = 10; // warps 10-11: the emulator (emulated build)
constexpr int THREADS = 384;
// Register split (setmaxnreg): the launch bound caps every thread at
// 65536 / 384 = 168; the producer warpgroup (which the MMA issuer's
// unrolled descriptors need ~100 of) gives the rest to the softmax and
// drain warpgroups (ptxas -v: no spills at 104 / 192).
constexpr int REG_CAP = 168;
constexpr int REG_PRODUCER = 104;
constexpr int REG_WORKER = 192;
static_assert(2 * (REG_WORKER - REG_CAP) <= REG_CAP - REG_PRODUCER, "register budget");

constexpr uint32_t REGION = 8192;                 // 64 rows x 128 B (64 bf16)
constexpr uint32_t OFF_K = 0, OFF_V = 2 * REGION; // two regions each (d 0-63, 64-127)
constexpr uint32_t PAIR_HALF = 2 * REGION;        // d 0-63 / 64-127 of a pair's 128 rows
constexpr uint32_t PAIR = 2 * PAIR_HALF;          // Q2 (or dO2): [d half][block][64 rows]
constexpr uint32_t STATS = 1024;                  // lse[128], Delta[128]
constexpr uint32_t SLOT = 2 * PAIR + STATS;       // Q2, dO2, stats
constexpr uint32_t OFF_RING = 4 * REGION;
constexpr uint32_t OFF_P = OFF_RING + 2 * SLOT;   // 128 q rows x 64 kv bf16
constexpr uint32_t OFF_DS = OFF_P + 2 * REGION;
constexpr uint32_t OFF_STG = OFF_DS + 2 * REGION; // dQ staging: 4 warps x 4 KB
constexpr uint32_t STG_WARP = 4096;
constexpr uint32_t OFF_BAR = OFF_STG + 4 * STG_WARP;
constexpr uint32_t SMEM_BYTES = OFF_BAR + 1024 + 1024; // barriers, slots; alignment slack
static_assert(SLOT % 1024 == 0 && OFF_P % 1024 == 0 && OFF_STG % 1024 == 0, "1024-aligned tiles");
static_assert(SMEM_BYTES + tc05::emu_smem_bytes <= 232448,
              "shared memory over the 227 KB opt-in (the emulation's queue included)");

enum : uint32_t { // tensor-memory columns
  T_S = 0, T_DP = 128, T_DS = 192, T_DQ = 256, T_DV = 384, T_DK = 448, T_COLS = 512
};
static_assert(T_DK + 64 == T_COLS && T_COLS <= 512, "tensor-memory column plan");

enum { // mbarriers, 8 bytes each from OFF_BAR
  B_KV_FULL, B_KV_READY, B_KV_FREE, B_FULL, B_EMPTY = B_FULL + 2, B_S_FULL = B_EMPTY + 2,
  B_DP_FULL = B_S_FULL + 2, B_DS_READY, B_PDS_FREE, B_DS_FREE, B_DQ_FULL = B_DS_FREE + 2,
  B_DQ_FREE, B_ACC_FULL, B_ACC_FREE, B_SCHED_FULL, B_SCHED_EMPTY = B_SCHED_FULL + 2,
  B_COUNT = B_SCHED_EMPTY + 2
};
constexpr uint32_t OFF_TMEM_SLOT = OFF_BAR + 8 * B_COUNT;
static_assert(OFF_TMEM_SLOT + 4 <= OFF_BAR + 1024, "barrier area");
constexpr int SCHED_READERS = 9; // softmax + drain warps, the MMA warp

constexpr int BAR_END = 1, BAR_DRAIN = 2; // named barriers (15: the emulator)

struct params {
  CUtensorMap tm_q, tm_do, tm_k, tm_v;
  const float *lse, *delta;
  const int *row_exp; // deterministic: per-row fixed-point exponent
  const int32_t *k2q_idx, *k2q_num, *vbs, *order;
  int k2q_width, H, nq, nkv, q_chunk, chunks, groups, group_items;
  int layout; // vsa_layout of q, k, v, dO, dk, dv (the maps are built for it)
  int64_t tickets;
  float sm_scale, scale_log2;
  float *dq_accum; // fp32 or int32 (deterministic) accumulator, quarter layout
  int *ticket;     // zeroed by the preprocess
  int64_t *sched;  // per CTA, 2 slots: the scheduler's items ((ticket << 24) | entries, -1: done)
  float *kv_acc;   // q chunking: dK/dV partials
  int *kv_sem;
  __nv_bfloat16 *dk, *dv;
  tc05::emu_params emu;
};

__device__ __forceinline__ uint32_t bar_addr(uint32_t base, int b) { return base + OFF_BAR + 8 * b; }

/* Parity of the k-th completion (k = 0, 1, ...) of a barrier; waiting for
 * completion k-1 of a barrier that has not completed yet passes (the
 * "free" barriers before their first use). */
__device__ __forceinline__ uint32_t ph(uint32_t k) { return k & 1; }
__device__ __forceinline__ uint32_t ph_free(uint32_t k) { return (k & 1) ^ 1; }

__device__ __forceinline__ uint64_t
desc(uint32_t addr, uint32_t lbo)
{
  return vsa_umma_smem_desc(addr, lbo, 1024, VSA_UMMA_SWIZZLE_128B);
}

/* An item's list: the entries in [lo, hi) of (bh, j)'s k2q row. */
using sm100bwd::count_valid;
using sm100bwd::decode_item;
using sm100bwd::item;

/* A reader's copy of the scheduler's k-th item (a whole warp calls it). */
__device__ __forceinline__ bool
read_item(const params &p, uint32_t base, uint32_t k, item &it)
{
  return sm100bwd::read_sched_item(p, base + OFF_BAR, B_SCHED_FULL, B_SCHED_EMPTY, k, it);
}

// ----------------------------------------------------------------------------
// the roles

/* warp 8: scheduler and TMA producer (lane 0 issues). */
__device__ __forceinline__ void
producer(const params &p, uint32_t base)
{
  const bool lead = (threadIdx.x & 31) == 0;
  uint32_t gs = 0, kc = 0;
  for (uint32_t k = 0;; k++) {
    const int s = k & 1;
    mbar_wait(bar_addr(base, B_SCHED_EMPTY + s), ph_free(k >> 1));
    int64_t t = 0;
    if (lead) t = atomicAdd(reinterpret_cast<unsigned long long *>(p.ticket), 1ull);
    t = __shfl_sync(0xffffffffu, t, 0);
    item it;
    int valid = 0;
    if (t < p.tickets) {
      it = decode_item(p, t, 0);
      valid = count_valid(it.l);
      it.valid = valid;
    }
    if (lead) {
      // The slot is global memory, ordered by the mbarrier like shared memory
      // would be, but outside what compute-sanitizer racecheck tracks.
      *(reinterpret_cast<volatile int64_t *>(p.sched) + 2 * blockIdx.x + s) =
          t < p.tickets ? (t << 24) | valid : -1;
      mbar_arrive(bar_addr(base, B_SCHED_FULL + s));
    }
    if (t >= p.tickets) return;
    const int steps = (valid + 1) >> 1;
    if (steps == 0) continue;
    if (lead) {
      // The head's map coordinates (vsa_bwd::tma_head), once an item.
      const vsa_bwd::head_coord kh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nkv * BLK, it.bh);
      const vsa_bwd::head_coord qh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nq * BLK, it.bh);
      const int kr = kh.row + it.j * BLK;
      mbar_wait(bar_addr(base, B_KV_FREE), ph_free(kc));
      const uint32_t full = bar_addr(base, B_KV_FULL);
      mbar_arrive_expect_tx(full, 4 * REGION);
      tma_load_3d(base + OFF_K, &p.tm_k, 0, kh.h, kr, full);
      tma_load_3d(base + OFF_K + REGION, &p.tm_k, 64, kh.h, kr, full);
      tma_load_3d(base + OFF_V, &p.tm_v, 0, kh.h, kr, full);
      tma_load_3d(base + OFF_V + REGION, &p.tm_v, 64, kh.h, kr, full);
      int e = it.l.next(0);
      for (int n = 0; n < steps; n++, gs++) {
        const int i0 = __ldg(it.l.list + e);
        e = it.l.next(e + 1);
        const int i1 = e < it.l.cnt ? __ldg(it.l.list + e) : i0; // odd tail: masked copy
        if (e < it.l.cnt) e = it.l.next(e + 1);
        const int sl = gs & 1;
        mbar_wait(bar_addr(base, B_EMPTY + sl), ph_free(gs >> 1));
        const uint32_t f = bar_addr(base, B_FULL + sl), st = base + OFF_RING + sl * SLOT;
        mbar_arrive_expect_tx(f, SLOT);
        // r0, r1: rows of lse/Delta (head-major); t0, t1: map rows.
        const int64_t r0 = it.bh * ((int64_t)p.nq * BLK) + (int64_t)i0 * BLK;
        const int64_t r1 = it.bh * ((int64_t)p.nq * BLK) + (int64_t)i1 * BLK;
        const int t0 = qh.row + i0 * BLK, t1 = qh.row + i1 * BLK;
        for (int h = 0; h < 2; h++) {
          tma_load_3d(st + h * PAIR_HALF, &p.tm_q, 64 * h, qh.h, t0, f);
          tma_load_3d(st + h * PAIR_HALF + REGION, &p.tm_q, 64 * h, qh.h, t1, f);
          tma_load_3d(st + PAIR + h * PAIR_HALF, &p.tm_do, 64 * h, qh.h, t0, f);
          tma_load_3d(st + PAIR + h * PAIR_HALF + REGION, &p.tm_do, 64 * h, qh.h, t1, f);
        }
        const uint32_t stats = st + 2 * PAIR;
        bulk_load(stats, p.lse + r0, BLK * 4, f);
        bulk_load(stats + 256, p.lse + r1, BLK * 4, f);
        bulk_load(stats + 512, p.delta + r0, BLK * 4, f);
        bulk_load(stats + 768, p.delta + r1, BLK * 4, f);
      }
    } else {
      gs += steps;
    }
    kc++;
    __syncwarp();
  }
}

/* warp 9: every MMA and commit, issued by lane 0; the whole warp follows
 * the waits, so the warp stays converged for its barriers. */
__device__ __forceinline__ void
mma_issuer(const params &p, uint32_t base, uint32_t tmem)
{
  const bool lead = (threadIdx.x & 31) == 0;
  const uint32_t id_s = vsa_umma_idesc_bf16(128, 64, 0, 0);   // S, dP
  const uint32_t id_kv = vsa_umma_idesc_bf16(128, 64, 1, 1);  // dV^T, dK^T
  const uint32_t id_q = vsa_umma_idesc_bf16(128, 128, 0, 1);  // dQ (A from TMEM)
  uint32_t gs = 0, kc = 0;
  item it;
  for (uint32_t k = 0; read_item(p, base, k, it); k++) {
    const int steps = (it.valid + 1) >> 1;
    if (steps == 0) continue;
    mbar_wait(bar_addr(base, B_KV_READY), ph(kc));
    mbar_wait(bar_addr(base, B_ACC_FREE), ph_free(kc));
    tc05::fence_after();
    // S(g) into S[g & 1] and dP(g): Q2/dO2 of slot g & 1 times K/V.
    auto issue_s = [&](uint32_t g, bool dp) {
      const uint32_t st = base + OFF_RING + (g & 1) * SLOT;
      const uint32_t a0 = dp ? st + PAIR : st, b0 = base + (dp ? OFF_V : OFF_K);
      const uint32_t d = tmem + (dp ? T_DP : T_S + 64 * (g & 1));
      if (!lead) return;
#pragma unroll
      for (int kk = 0; kk < 8; kk++) {
        const uint32_t ka = (kk >> 2) * PAIR_HALF + (kk & 3) * 32;
        const uint32_t kb = (kk >> 2) * REGION + (kk & 3) * 32;
        tc05::mma_ss(d, desc(a0 + ka, 16), desc(b0 + kb, 16), id_s, kk > 0);
      }
      tc05::commit(bar_addr(base, dp ? B_DP_FULL : B_S_FULL + (g & 1)));
    };
    mbar_wait(bar_addr(base, B_FULL + (gs & 1)), ph(gs >> 1));
    tc05::fence_after();
    issue_s(gs, false);
    issue_s(gs, true);
    for (int n = 0; n < steps; n++, gs++) {
      if (n + 1 < steps) { // the next step's S overlaps this step's softmax
        mbar_wait(bar_addr(base, B_FULL + ((gs + 1) & 1)), ph((gs + 1) >> 1));
        tc05::fence_after();
        issue_s(gs + 1, false);
      }
      mbar_wait(bar_addr(base, B_DS_READY), ph(gs));
      tc05::fence_after();
      const uint32_t st = base + OFF_RING + (gs & 1) * SLOT;
      if (lead) {
        // MN-major A (M = d): LBO = PAIR_HALF; K steps of 16 q rows = 2 KB.
#pragma unroll
        for (int kk = 0; kk < 8; kk++) // dV^T += dO2^T P, K = the step's 128 q rows
          tc05::mma_ss(tmem + T_DV, desc(st + PAIR + kk * 2048, PAIR_HALF),
                       desc(base + OFF_P + kk * 2048, 2 * REGION), id_kv, n > 0 || kk > 0);
#pragma unroll
        for (int kk = 0; kk < 8; kk++) // dK^T += Q2^T dS
          tc05::mma_ss(tmem + T_DK, desc(st + kk * 2048, PAIR_HALF),
                       desc(base + OFF_DS + kk * 2048, 2 * REGION), id_kv, n > 0 || kk > 0);
        tc05::commit(bar_addr(base, B_EMPTY + (gs & 1))); // Q2/dO2 slot free
        tc05::commit(bar_addr(base, B_PDS_FREE));         // P/dS tiles free
      }
      if (n + 1 < steps) issue_s(gs + 1, true);           // dP read by softmax(gs)
      mbar_wait(bar_addr(base, B_DQ_FREE), ph_free(gs));
      tc05::fence_after();
      if (lead) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++) // dQ2 = dS K, K = 64 kv rows, 16 a step
          tc05::mma_ts(tmem + T_DQ, tmem + T_DS + 32 * (gs & 1) + 8 * kk,
                       desc(base + OFF_K + kk * 2048, REGION), id_q, kk > 0);
        tc05::commit(bar_addr(base, B_DQ_FULL));
        tc05::commit(bar_addr(base, B_DS_FREE + (gs & 1)));
      }
    }
    if (lead) {
      tc05::commit(bar_addr(base, B_ACC_FULL));
      tc05::commit(bar_addr(base, B_KV_FREE));
    }
    kc++;
  }
}

/* warps 0-3: lane = q row of the step. */
__device__ __forceinline__ void
softmax(const params &p, uint32_t base, unsigned char *base_ptr, uint32_t tmem)
{
  const int r = threadIdx.x & 127;
  const uint32_t tl = tmem + ((uint32_t)(r & ~31) << 16);
  uint32_t gs = 0;
  item it;
  for (uint32_t k = 0; read_item(p, base, k, it); k++) {
    const int steps = (it.valid + 1) >> 1;
    const int vb = min(max(__ldg(p.vbs + it.j), 0), BLK);
    for (int n = 0; n < steps; n++, gs++) {
      const bool row_ok = r < BLK || 2 * n + 1 < it.valid;
      const float *stats =
          reinterpret_cast<const float *>(base_ptr + OFF_RING + (gs & 1) * SLOT + 2 * PAIR);
      mbar_wait(bar_addr(base, B_FULL + (gs & 1)), ph(gs >> 1));
      const float lse = stats[r], delta = stats[128 + r];
      mbar_wait(bar_addr(base, B_S_FULL + (gs & 1)), ph(gs >> 1));
      tc05::fence_after();
      uint32_t s[64];
      tc05::ld_32x32b<64>(tl + T_S + 64 * (gs & 1), s);
      tc05::wait_ld();
      float pr[64];
      uint32_t pk[32];
#pragma unroll
      for (int c = 0; c < 64; c++)
        pr[c] = row_ok && c < vb ? fast_exp2(fmaf(__uint_as_float(s[c]), p.scale_log2, -lse)) : 0.f;
#pragma unroll
      for (int c = 0; c < 32; c++) pk[c] = pack_bf16(pr[2 * c], pr[2 * c + 1]);
      // Row r of a 128B-swizzled [128 rows][64 bf16] tile: chunk x at x ^ (r & 7).
      mbar_wait(bar_addr(base, B_PDS_FREE), ph_free(gs));
      uint4 *prow = reinterpret_cast<uint4 *>(base_ptr + OFF_P + r * 128);
#pragma unroll
      for (int x = 0; x < 8; x++)
        prow[x ^ (r & 7)] = make_uint4(pk[4 * x], pk[4 * x + 1], pk[4 * x + 2], pk[4 * x + 3]);
      mbar_wait(bar_addr(base, B_DP_FULL), ph(gs));
      tc05::fence_after();
      tc05::ld_32x32b<64>(tl + T_DP, s);
      tc05::wait_ld();
#pragma unroll
      for (int c = 0; c < 32; c++) {
        const float d0 = row_ok && 2 * c < vb ? pr[2 * c] * (__uint_as_float(s[2 * c]) - delta) : 0.f;
        const float d1 =
            row_ok && 2 * c + 1 < vb ? pr[2 * c + 1] * (__uint_as_float(s[2 * c + 1]) - delta) : 0.f;
        pk[c] = pack_bf16(d0, d1);
      }
      uint4 *dsrow = reinterpret_cast<uint4 *>(base_ptr + OFF_DS + r * 128);
#pragma unroll
      for (int x = 0; x < 8; x++)
        dsrow[x ^ (r & 7)] = make_uint4(pk[4 * x], pk[4 * x + 1], pk[4 * x + 2], pk[4 * x + 3]);
      mbar_wait(bar_addr(base, B_DS_FREE + (gs & 1)), ph_free(gs >> 1));
      tc05::fence_after();
      tc05::st_32x32b<32>(tl + T_DS + 32 * (gs & 1), pk);
      tc05::wait_st();
      fence_proxy_async(); // P, dS tiles are read by the MMA (async proxy)
      tc05::fence_before();
      mbar_arrive(bar_addr(base, B_DS_READY));
    }
  }
}

/* One 4 KB quarter of a warp's 32 dQ rows: staged (chunk x of row l at
 * x ^ (l & 7)), then bulk-added to the accumulator. */
template <bool FIXED>
__device__ __forceinline__ void
drain_quarter(const params &p, unsigned char *stg, uint32_t stg_addr, const uint32_t *v,
              float scale, float *dst)
{
  const int lane = threadIdx.x & 31;
  if (lane == 0) bulk_wait_read();
  __syncwarp();
  uint4 *row = reinterpret_cast<uint4 *>(stg + lane * 128);
#pragma unroll
  for (int x = 0; x < 8; x++) {
    uint4 w = make_uint4(v[4 * x], v[4 * x + 1], v[4 * x + 2], v[4 * x + 3]);
    if (FIXED) {
      w.x = (uint32_t)__float2int_rn(__uint_as_float(w.x) * scale);
      w.y = (uint32_t)__float2int_rn(__uint_as_float(w.y) * scale);
      w.z = (uint32_t)__float2int_rn(__uint_as_float(w.z) * scale);
      w.w = (uint32_t)__float2int_rn(__uint_as_float(w.w) * scale);
    }
    row[x ^ (lane & 7)] = w;
  }
  fence_proxy_async();
  __syncwarp();
  if (lane == 0) {
    if (FIXED) bulk_reduce_add_u32(reinterpret_cast<uint32_t *>(dst), stg_addr, STG_WARP);
    else bulk_reduce_add_f32(dst, stg_addr, STG_WARP);
  }
}

/* warps 4-7: zero padded K/V rows, drain dQ, write dK/dV. */
template <bool FIXED>
__device__ __forceinline__ void
drain(const params &p, uint32_t base, unsigned char *base_ptr, uint32_t tmem)
{
  const int r = threadIdx.x & 127, w = r >> 5, lane = threadIdx.x & 31;
  const uint32_t tl = tmem + ((uint32_t)(w * 32) << 16);
  unsigned char *stg = base_ptr + OFF_STG + w * STG_WARP;
  const uint32_t stg_addr = base + OFF_STG + w * STG_WARP;
  uint32_t gs = 0, kc = 0;
  item it;
  for (uint32_t k = 0; read_item(p, base, k, it); k++) {
    const int steps = (it.valid + 1) >> 1;
    const int64_t kv_row0 = it.bh * ((int64_t)p.nkv * BLK) + (int64_t)it.j * BLK;
    const int vb = min(max(__ldg(p.vbs + it.j), 0), BLK);
    if (steps > 0) {
      mbar_wait(bar_addr(base, B_KV_FULL), ph(kc));
      if (vb < BLK) { // padded K/V rows: zeros, whatever the slots hold
        for (int id = r; id < 4 * BLK * 8; id += 128) {
          const int reg = id / (BLK * 8), row = (id / 8) % BLK, c16 = id & 7;
          if (row >= vb)
            *reinterpret_cast<uint4 *>(base_ptr + reg * REGION + row * 128 + c16 * 16) =
                make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async();
      }
      named_sync_any(BAR_DRAIN, 128);
      if (r == 0) mbar_arrive(bar_addr(base, B_KV_READY));
    }
    int e = it.l.next(0);
    for (int n = 0; n < steps; n++, gs++) {
      const int i0 = __ldg(it.l.list + e);
      e = it.l.next(e + 1);
      const bool has1 = e < it.l.cnt;
      const int i1 = has1 ? __ldg(it.l.list + e) : i0;
      if (has1) e = it.l.next(e + 1);
      mbar_wait(bar_addr(base, B_DQ_FULL), ph(gs));
      tc05::fence_after();
      uint32_t v[128];
      tc05::ld_32x32b<64>(tl + T_DQ, reinterpret_cast<uint32_t(&)[64]>(v[0]));
      tc05::ld_32x32b<64>(tl + T_DQ + 64, reinterpret_cast<uint32_t(&)[64]>(v[64]));
      tc05::wait_ld();
      tc05::fence_before();
      mbar_arrive(bar_addr(base, B_DQ_FREE));
      if (w < 2 || has1) {
        const int blk = w < 2 ? i0 : i1;
        const int64_t qrow0 = it.bh * ((int64_t)p.nq * BLK) + (int64_t)blk * BLK;
        // 2^row_exp exactly (row_exp in [-126, 126]): an exact scaling.
        float scale = 1.f;
        if (FIXED) scale = exp2_int(__ldg(p.row_exp + qrow0 + (r & 63)));
        float *tile = p.dq_accum + qrow0 * D;
#pragma unroll
        for (int qt = 0; qt < 4; qt++)
          drain_quarter<FIXED>(p, stg, stg_addr, v + 32 * qt, scale,
                               tile + qt * (BLK * 32) + (w & 1) * (32 * 32));
      }
    }
    // The dK/dV epilogue: lane r holds column d = r of dV^T, then dK^T.
    // With q chunking, chunk c first adds chunk c-1's fp32 partial (in
    // chunk order: the same bits every run) and, unless last, hands its own
    // on.
    const bool take = p.chunks > 1 && it.c > 0, pass = p.chunks > 1 && it.c < p.chunks - 1;
    int *sem = p.kv_sem + it.bh * p.nkv + it.j;
    float4 *part = reinterpret_cast<float4 *>(p.kv_acc + kv_row0 * (2 * D)) + r;
    if (take) {
      if (r == 0) wait_turn(sem, it.c);
      named_sync_any(BAR_DRAIN, 128);
      __threadfence();
    }
    if (steps > 0) {
      mbar_wait(bar_addr(base, B_ACC_FULL), ph(kc));
      tc05::fence_after();
    }
    // This lane's column of j's first token in dk/dv (layout-aware).
    const int64_t out0 =
        vsa_bwd::token_offset(p.layout, p.H, (int64_t)p.nkv * BLK, it.bh, (int64_t)it.j * BLK) + r;
#pragma unroll 1
    for (int t = 0; t < 2; t++) { // 0: dV (no scale), 1: dK (sm_scale)
      float a[64];
      if (steps > 0) {
        tc05::ld_32x32b<64>(tl + (t ? T_DK : T_DV), reinterpret_cast<uint32_t(&)[64]>(a));
        tc05::wait_ld();
      } else {
#pragma unroll
        for (int x = 0; x < 64; x++) a[x] = 0.f;
      }
      if (take) {
#pragma unroll
        for (int x = 0; x < 16; x++) {
          const float4 b = __ldcg(part + (16 * t + x) * 128);
          a[4 * x] += b.x; a[4 * x + 1] += b.y; a[4 * x + 2] += b.z; a[4 * x + 3] += b.w;
        }
      }
      if (pass) {
#pragma unroll
        for (int x = 0; x < 16; x++)
          __stcg(part + (16 * t + x) * 128, make_float4(a[4 * x], a[4 * x + 1], a[4 * x + 2], a[4 * x + 3]));
      } else {
        // Column r of j's 64 rows in the layout: a warp stores 64 contiguous
        // bytes of one row at a time (rows H·D apart in BSHD).
        __nv_bfloat16 *out = (t ? p.dk : p.dv) + out0;
        const float sc = t ? p.sm_scale : 1.f;
        vsa_bwd::store_column(out, p.layout == VSA_BSHD ? p.H : 0, a, sc);
      }
    }
    if (steps > 0) {
      tc05::fence_before();
      mbar_arrive(bar_addr(base, B_ACC_FREE));
      kc++;
    }
    if (pass) {
      __threadfence();
      named_sync_any(BAR_DRAIN, 128);
      if (r == 0) red_release_add(sem, 1);
    }
  }
  if (lane == 0) bulk_wait_all();
  __syncwarp();
}

template <bool FIXED>
__global__ void __launch_bounds__(THREADS, 1)
bwd_kernel(const __grid_constant__ params p)
{
#if (defined(VSA_TCGEN05_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900) || \
    (!defined(VSA_TCGEN05_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 &&   \
     (defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) ||      \
      defined(__CUDA_ARCH_FAMILY_SPECIFIC__)))
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  unsigned char *base_ptr = smem_raw + (base - smem_addr(smem_raw));
  const int warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    tc05::emu_init(p.emu);
    for (int s = 0; s < 2; s++) {
      mbar_init(bar_addr(base, B_FULL + s), 1);
      mbar_init(bar_addr(base, B_EMPTY + s), 1);
      mbar_init(bar_addr(base, B_S_FULL + s), 1);
      mbar_init(bar_addr(base, B_DS_FREE + s), 1);
      mbar_init(bar_addr(base, B_SCHED_FULL + s), 1);
      mbar_init(bar_addr(base, B_SCHED_EMPTY + s), SCHED_READERS);
    }
    mbar_init(bar_addr(base, B_KV_FULL), 1);
    mbar_init(bar_addr(base, B_KV_READY), 1);
    mbar_init(bar_addr(base, B_KV_FREE), 1);
    mbar_init(bar_addr(base, B_DP_FULL), 1);
    mbar_init(bar_addr(base, B_DS_READY), 128);
    mbar_init(bar_addr(base, B_PDS_FREE), 1);
    mbar_init(bar_addr(base, B_DQ_FULL), 1);
    mbar_init(bar_addr(base, B_DQ_FREE), 128);
    mbar_init(bar_addr(base, B_ACC_FULL), 1);
    mbar_init(bar_addr(base, B_ACC_FREE), 128);
    fence_mbar_init();
  }
  __syncthreads(); // the emulation's state is set before the allocation
  if (warp == W_MMA) {
    tc05::tmem_alloc(base + OFF_TMEM_SLOT, T_COLS);
    tc05::tmem_relinquish();
  }
  tc05::fence_before();
  __syncthreads();
  tc05::fence_after();
  const uint32_t tmem = *reinterpret_cast<volatile uint32_t *>(base_ptr + OFF_TMEM_SLOT);

  if (warp >= 8) {
    setmaxnreg_dec<REG_PRODUCER>();
    if (warp >= W_EMU) {
      tc05::emu_run(); // returns at once in the hardware build
    } else if (warp == W_LOAD) {
      producer(p, base);
    } else if (warp == W_MMA) {
      mma_issuer(p, base, tmem);
      named_sync_any(BAR_END, 288); // every tensor-memory read is done
      if ((threadIdx.x & 31) == 0) tc05::emu_stop();
      tc05::fence_after();
      tc05::tmem_dealloc(tmem, T_COLS);
    }
    return;
  }
  setmaxnreg_inc<REG_WORKER>();
  if (warp < 4) softmax(p, base, base_ptr, tmem);
  else drain<FIXED>(p, base, base_ptr, tmem);
  tc05::fence_before();
  named_sync_any(BAR_END, 288);
#endif
}

}  // namespace

// ----------------------------------------------------------------------------
// host side

/* Scratch map: dQ accumulator (rows x D x 4 B), Delta (rows), row
 * exponents and ‖dO_r‖ (rows each) and K/V statistics (deterministic), the ticket (8 B) and the q-chunk
 * counters (kv_rows / 64), the work order (kv_rows / 64), the scheduler
 * slots (16 B a CTA), then, 256-byte
 * aligned, the dK/dV partials (q chunking) and the emulated tensor memory. */
struct scratch_map {
  size_t delta, row_exp, row_dnorm, kv_stats, ticket, order, sched, kv_acc, emu, total;
};

static scratch_map
map_scratch(const vsa_shape *s, int q_chunk, int ctas)
{
  const int64_t rows = (int64_t)s->B * s->H * s->Sq, kv_rows = (int64_t)s->B * s->H * s->Skv;
  scratch_map m;
  size_t at = (size_t)rows * D * 4;
  auto carve = [&](size_t bytes) { size_t o = at; at = (at + bytes + 255) & ~(size_t)255; return o; };
  m.delta = carve((size_t)rows * 4);
  m.row_exp = carve((size_t)rows * 4);
  m.row_dnorm = carve((size_t)rows * 4);
  m.kv_stats = carve(vsa_bwd::kv_stats_bytes((int64_t)s->B * s->H, s->Skv / BLK));
  m.ticket = carve(8 + (size_t)(kv_rows / BLK) * 4);
  m.order = carve((size_t)(kv_rows / BLK) * 4);
  m.sched = carve((size_t)ctas * 16);
  const bool chunked = vsa_bwd::chunk_count(s->Sq / BLK, q_chunk) > 1;
  m.kv_acc = carve(chunked ? (size_t)kv_rows * 2 * D * 4 : 0);
  m.emu = carve((size_t)ctas * tc05::EMU_CTA_BYTES);
  m.total = at;
  return m;
}

extern "C" size_t
SM100_FN(bsa_backward_sm100a_scratch_bytes)(const vsa_shape *s, int q_chunk, int sm_count)
{
  if (vsa_bwd::block_of(s) == 128)
    return SM100_B128_FN(bsa_b128_sm100a_scratch_bytes)(s, q_chunk, sm_count);
  return map_scratch(s, q_chunk, sm_count).total;
}

extern "C" size_t
SM100_FN(bsa_backward_sm100a_smem_bytes)(void)
{
  // dynamic, plus the emulation's static state; the larger of the two kernels
  const size_t b64 = SMEM_BYTES + tc05::emu_smem_bytes, b128 = SM100_B128_FN(bsa_b128_sm100a_smem_bytes)();
  return b64 > b128 ? b64 : b128;
}

extern "C" int
SM100_FN(bsa_backward_sm100a_has_image)(void)
{
  cudaFuncAttributes a;
  if (cudaFuncGetAttributes(&a, bwd_kernel<false>) != cudaSuccess) {
    (void)cudaGetLastError(); // no image for this device: not sticky
    return 0;
  }
  return 1;
}

extern "C" cudaError_t
SM100_FN(bsa_backward_sm100a)(const vsa_shape *s, const uint16_t *d_dO, const uint16_t *d_q,
                              const uint16_t *d_k, const uint16_t *d_v, const uint16_t *d_o,
                              const float *d_lse, const int32_t *d_k2q_idx,
                              const int32_t *d_k2q_num, int k2q_width, const int32_t *d_vbs,
                              void *d_scratch, uint16_t *d_dq, uint16_t *d_dk, uint16_t *d_dv,
                              int deterministic, int q_chunk, int sm_count, cudaStream_t stream)
{
  if (s->layout != VSA_BHSD && s->layout != VSA_BSHD) return cudaErrorInvalidValue;
  if (vsa_bwd::block_of(s) == 128) // the native 128-token kernel (bsa_bwd_b128_sm100a.cu)
    return SM100_B128_FN(bsa_b128_sm100a)(s, d_dO, d_q, d_k, d_v, d_o, d_lse, d_k2q_idx,
                                          d_k2q_num, k2q_width, d_vbs, d_scratch, d_dq, d_dk,
                                          d_dv, deterministic, q_chunk, sm_count, stream);
  if (vsa_bwd::block_of(s) != 64) return cudaErrorInvalidValue;
  if (s->D != D || s->Sq % BLK || s->Skv % BLK || s->Sq <= 0 || s->Skv <= 0 || k2q_width < 1 ||
      sm_count < 1)
    return cudaErrorInvalidValue;
  const int64_t BH = (int64_t)s->B * s->H, rows = BH * s->Sq, kv_rows = BH * s->Skv;
  if (rows >= (1ll << 31) || kv_rows >= (1ll << 31)) return cudaErrorInvalidValue;
  const int nq = s->Sq / BLK, nkv = s->Skv / BLK;
  const int chunks = vsa_bwd::chunk_count(nq, q_chunk);
  const int group = vsa_bwd::heads_per_group(BH, s->Sq, chunks);
  const int64_t tickets = BH * nkv * chunks;
  const int ctas = (int)(tickets < sm_count ? tickets : sm_count);
  const scratch_map m = map_scratch(s, q_chunk, sm_count);
  char *ws = static_cast<char *>(d_scratch);

  params p;
  cudaError_t e = vsa_bwd::tile_map(&p.tm_q, d_q, s->layout, s->B, s->H, s->Sq);
  if (e == cudaSuccess) e = vsa_bwd::tile_map(&p.tm_do, d_dO, s->layout, s->B, s->H, s->Sq);
  if (e == cudaSuccess) e = vsa_bwd::tile_map(&p.tm_k, d_k, s->layout, s->B, s->H, s->Skv);
  if (e == cudaSuccess) e = vsa_bwd::tile_map(&p.tm_v, d_v, s->layout, s->B, s->H, s->Skv);
  if (e != cudaSuccess) return e;

  vsa_bwd::prep_params pp = {};
  pp.dO = d_dO;
  pp.o = d_o;
  pp.layout = s->layout;
  pp.H = s->H;
  pp.Sq = s->Sq;
  pp.Skv = s->Skv;
  pp.delta = reinterpret_cast<float *>(ws + m.delta);
  pp.dq_accum = reinterpret_cast<float *>(ws);
  pp.rows = rows;
  pp.zero_b = reinterpret_cast<int *>(ws + m.ticket);
  pp.n_b = 2 + kv_rows / BLK; // the 64-bit ticket, then the chunk counters
  pp.k2q_num = d_k2q_num;
  pp.k2q_width = k2q_width;
  pp.groups = (int)(BH / group);
  pp.group_items = group * nkv;
  pp.order = reinterpret_cast<int32_t *>(ws + m.order);
  if (deterministic)
    vsa_bwd::prep_fixed_point(pp, d_k, d_v, d_vbs, s->Sq, s->Skv,
                              reinterpret_cast<float *>(ws + m.kv_stats),
                              reinterpret_cast<float *>(ws + m.row_dnorm),
                              reinterpret_cast<int *>(ws + m.row_exp));
  e = vsa_bwd::launch_prep(pp, stream);
  if (e != cudaSuccess) return e;

  p.lse = d_lse;
  p.delta = pp.delta;
  p.row_exp = pp.row_exp;
  p.k2q_idx = d_k2q_idx;
  p.k2q_num = d_k2q_num;
  p.vbs = d_vbs;
  p.order = pp.order;
  p.k2q_width = k2q_width;
  p.H = s->H;
  p.layout = s->layout;
  p.nq = nq;
  p.nkv = nkv;
  p.q_chunk = chunks > 1 ? q_chunk : nq;
  p.chunks = chunks;
  p.groups = pp.groups;
  p.group_items = pp.group_items;
  p.tickets = tickets;
  p.sm_scale = s->sm_scale;
  p.scale_log2 = s->sm_scale * 1.4426950408889634f;
  p.dq_accum = pp.dq_accum;
  p.ticket = pp.zero_b;
  p.sched = reinterpret_cast<int64_t *>(ws + m.sched);
  p.kv_acc = reinterpret_cast<float *>(ws + m.kv_acc);
  p.kv_sem = pp.zero_b + 2;
  p.dk = reinterpret_cast<__nv_bfloat16 *>(d_dk);
  p.dv = reinterpret_cast<__nv_bfloat16 *>(d_dv);
  p.emu.tmem = ws + m.emu;

  static bool configured = false;
  if (!configured) {
    e = cudaFuncSetAttribute(bwd_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(bwd_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  if (deterministic)
    bwd_kernel<true><<<ctas, THREADS, SMEM_BYTES, stream>>>(p);
  else
    bwd_kernel<false><<<ctas, THREADS, SMEM_BYTES, stream>>>(p);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return vsa_bwd::launch_dq_finish(pp.dq_accum, d_dq, s->sm_scale, rows,
                                   deterministic ? vsa_bwd::DQ_QUARTERS_FIXED : vsa_bwd::DQ_QUARTERS,
                                   pp.row_exp, s->layout, s->H, s->Sq, stream);
}
