/* bsa_bwd_b128_sm100a.cu — the native Blackwell (tcgen05) block-sparse
 * backward for 128-token blocks. Built like bsa_bwd_sm100a.cu: for sm_100a
 * / sm_100f / sm_103a with the hardware tcgen05 layer, and (VSA_TCGEN05_EMU)
 * for sm_90a with the emulated one. Compiled and emulated, never run on
 * Blackwell: no Blackwell GPU is available to this project
 * (kernels/NOTES.md, "sm100a at block 128", has the design and its model).
 *
 * One persistent CTA per SM walks work items (b, h, kv block j[, q chunk])
 * in the preprocess's longest-list-first order. Per item it keeps K_j, V_j
 * (128 rows each) in shared memory and dV^T, dK^T in tensor memory, and
 * takes j's k2q list one 128-row q block a step. Every MMA is
 * cta_group::1, M = 128, N = 128, K = 128 (eight K = 16 instructions), both
 * operands from shared memory (SS):
 *   S    = Q K^T      K-major A and B                 -> tmem S
 *   dP   = dO V^T     K-major A and B                 -> tmem dP
 *   P    = exp2(S·sm_scale·log2e − lse), 0 on kv columns >= vbs[j]
 *   dS   = P ∘ (dP − Delta)
 *   dV^T += dO^T P    MN-major A (dO) and B (P tile)  -> tmem dV^T
 *   dK^T += Q^T dS    MN-major A (Q) and B (dS tile)  -> tmem dK^T
 *   dQ   = dS K       K-major A (dS tile), MN-major B -> tmem dP (reused)
 * (FlashAttention-2 Alg. 2 with Triton's base-2 lse). S, dP, dV^T and dK^T
 * fill the 512 tensor-memory columns; dQ lands in dP's columns once the
 * softmax has read dP, and the next dP waits until the drain has read dQ.
 * dS is read from its shared tile (the 64-token kernel's A-from-TMEM form
 * has no columns left here).
 *
 * Warp roles (384 threads), as the 64-token kernel:
 *   warps 0-3   softmax: lane = q row; P, dS (bf16) to 128B-swizzled tiles
 *   warps 4-7   dQ drain (tcgen05.ld, bulk reduce-add into the quarter
 *               layout of 64-row blocks), K/V padding, dK/dV epilogue
 *   warp 8      TMA producer and scheduler
 *   warp 9      MMA issuer, tensor-memory owner
 *   warps 10-11 idle; in the emulated build, the tcgen05 emulator
 *
 * Shared memory holds one {Q, dO, lse, Delta} slot (65 KB): K, V (64 KB),
 * P, dS (64 KB) and the dQ staging (16 KB) leave no room for a second; the
 * next step's loads start once dK^T has read Q (the NOTES' model counts
 * what that costs).
 *
 * dQ: fp32 in arrival order, or (deterministic, the default) int32 fixed
 * point scaled by 2^row_exp[row] (common/bwd_prep.h): the same bits every
 * run. dK/dV in list order; q chunks add their fp32 partials in order.
 * Semantics as the reference (src/core/bsa.h) at block 128: entries outside
 * [0, nq) or the chunk skipped, counts clamped, kv rows >= vbs[j] zeroed in
 * shared memory and masked, empty lists give exact-zero dK/dV. Both token
 * layouts (BHSD, BSHD): 3D TMA maps (common/bwd_prep.h, tile_map) load the
 * same shared-memory tiles either way; the dK/dV epilogue stores rows H·D
 * apart in BSHD.
 */
#include <cuda.h>
#include <cuda_bf16.h>

#include "../common/async_copy.cuh"
#include "../common/block_expand.h"
#include "../common/bwd_prep.h"
#include "bsa_bwd_b128.h"
#include "bwd_items.cuh"
#include "tcgen05.cuh"

namespace {

using vsa_bwd::D;
constexpr int BLK = 128; // tokens per block (q and kv)
constexpr int SUB = 64;  // rows of a TMA box and of the accumulator's q blocks

// ----------------------------------------------------------------------------
// roles, shared memory, tensor memory

constexpr int W_LOAD = 8, W_MMA = 9, W_EMU = 10;
constexpr int THREADS = 384;
constexpr int REG_CAP = 168; // 65536 / 384
constexpr int REG_PRODUCER = 104;
constexpr int REG_WORKER = 192;
static_assert(2 * (REG_WORKER - REG_CAP) <= REG_CAP - REG_PRODUCER, "register budget");

constexpr uint32_t REGION = 16384;            // 128 rows x 128 B (64 bf16), 128B-swizzled
constexpr uint32_t TILE = 2 * REGION;         // 128 x 128 bf16: [column half][128 rows]
constexpr uint32_t OFF_K = 0, OFF_V = TILE;
constexpr uint32_t STATS = 1024;              // lse[128], Delta[128]
constexpr uint32_t SLOT = 2 * TILE + STATS;   // Q, dO, stats
constexpr uint32_t OFF_SLOT = 2 * TILE;
constexpr uint32_t OFF_P = OFF_SLOT + SLOT;   // [kv half][128 q rows][64 kv]
constexpr uint32_t OFF_DS = OFF_P + TILE;
constexpr uint32_t OFF_STG = OFF_DS + TILE;   // dQ staging: 4 warps x 4 KB
constexpr uint32_t STG_WARP = 4096;
constexpr uint32_t OFF_BAR = OFF_STG + 4 * STG_WARP;
constexpr uint32_t SMEM_BYTES = OFF_BAR + 1024 + 1024; // barriers, slot; alignment slack
static_assert(SLOT % 1024 == 0 && OFF_P % 1024 == 0 && OFF_STG % 1024 == 0, "1024-aligned tiles");
static_assert(SMEM_BYTES + tc05::emu_smem_bytes <= 232448,
              "shared memory over the 227 KB opt-in (the emulation's state included)");

enum : uint32_t { // tensor-memory columns (fp32, 128 lanes)
  T_S = 0, T_DP = 128, T_DQ = T_DP, T_DV = 256, T_DK = 384, T_COLS = 512
};
static_assert(T_DK + BLK == T_COLS && T_COLS <= 512, "tensor-memory column plan");

enum { // mbarriers, 8 bytes each from OFF_BAR
  B_KV_FULL, B_KV_READY, B_KV_FREE, B_FULL, B_EMPTY, B_S_FULL, B_DP_FULL, B_DS_READY,
  B_PDS_FREE, B_DQ_FULL, B_DQ_FREE, B_ACC_FULL, B_ACC_FREE, B_SCHED_FULL,
  B_SCHED_EMPTY = B_SCHED_FULL + 2, B_COUNT = B_SCHED_EMPTY + 2
};
constexpr uint32_t OFF_TMEM_SLOT = OFF_BAR + 8 * B_COUNT;
static_assert(OFF_TMEM_SLOT + 4 <= OFF_BAR + 1024, "barrier area");
constexpr int SCHED_READERS = 9; // softmax + drain warps, the MMA warp

constexpr int BAR_END = 1, BAR_DRAIN = 2; // named barriers (15: the emulator)

struct params {
  CUtensorMap tm_q, tm_do, tm_k, tm_v;
  const float *lse, *delta;
  const int *row_exp;
  const int32_t *k2q_idx, *k2q_num, *vbs, *order;
  int k2q_width, nq, nkv, q_chunk, chunks, group_items;
  int H, layout; // heads a batch; vsa_layout of q, k, v, dO, dk, dv
  int64_t tickets;
  float sm_scale, scale_log2;
  float *dq_accum; // fp32 or int32 (deterministic), quarter layout of 64-row blocks
  int *ticket;
  int64_t *sched;
  float *kv_acc;
  int *kv_sem;
  __nv_bfloat16 *dk, *dv;
  tc05::emu_params emu;
};

__device__ __forceinline__ uint32_t bar_addr(uint32_t base, int b) { return base + OFF_BAR + 8 * b; }

/* Parity of the k-th completion of a barrier; ph_free(k) passes before the
 * barrier's first completion (k = 0). */
__device__ __forceinline__ uint32_t ph(uint32_t k) { return k & 1; }
__device__ __forceinline__ uint32_t ph_free(uint32_t k) { return (k & 1) ^ 1; }

__device__ __forceinline__ uint64_t
desc(uint32_t addr, uint32_t lbo)
{
  return vsa_umma_smem_desc(addr, lbo, 1024, VSA_UMMA_SWIZZLE_128B);
}

using sm100bwd::count_valid;
using sm100bwd::decode_item;
using sm100bwd::item;

/* A reader's copy of the scheduler's k-th item (a whole warp calls it). */
__device__ __forceinline__ bool
read_item(const params &p, uint32_t base, uint32_t k, item &it)
{
  return sm100bwd::read_sched_item(p, base + OFF_BAR, B_SCHED_FULL, B_SCHED_EMPTY, k, it);
}

/* A 128-row, 128-column bf16 tile by four 64x64 TMA boxes: [column
 * half][row half], the two row halves of one region 8 KB apart (the same
 * bytes one 128-row box would write). hc, row0: the map coordinates of its
 * first token (vsa_bwd::tma_head). */
__device__ __forceinline__ void
load_tile(uint32_t dst, const CUtensorMap *m, int hc, int row0, uint32_t bar)
{
  for (int h = 0; h < 2; h++)
    for (int rh = 0; rh < 2; rh++)
      tma_load_3d(dst + h * REGION + rh * (REGION / 2), m, 64 * h, hc, row0 + SUB * rh, bar);
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
    }
    if (lead) {
      *(reinterpret_cast<volatile int64_t *>(p.sched) + 2 * blockIdx.x + s) =
          t < p.tickets ? (t << 24) | valid : -1;
      mbar_arrive(bar_addr(base, B_SCHED_FULL + s));
    }
    if (t >= p.tickets) return;
    if (valid == 0) continue;
    if (lead) {
      // The head's map coordinates (vsa_bwd::tma_head), once an item.
      const vsa_bwd::head_coord kh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nkv * BLK, it.bh);
      const vsa_bwd::head_coord qh = vsa_bwd::tma_head(p.layout, p.H, (int64_t)p.nq * BLK, it.bh);
      mbar_wait(bar_addr(base, B_KV_FREE), ph_free(kc));
      const uint32_t full = bar_addr(base, B_KV_FULL);
      mbar_arrive_expect_tx(full, 2 * TILE);
      load_tile(base + OFF_K, &p.tm_k, kh.h, kh.row + it.j * BLK, full);
      load_tile(base + OFF_V, &p.tm_v, kh.h, kh.row + it.j * BLK, full);
      int e = it.l.next(0);
      for (int n = 0; n < valid; n++, gs++) {
        const int i = __ldg(it.l.list + e);
        e = it.l.next(e + 1);
        mbar_wait(bar_addr(base, B_EMPTY), ph_free(gs));
        const uint32_t f = bar_addr(base, B_FULL), st = base + OFF_SLOT;
        mbar_arrive_expect_tx(f, SLOT);
        const int64_t r0 = it.bh * ((int64_t)p.nq * BLK) + (int64_t)i * BLK; // lse, Delta
        load_tile(st, &p.tm_q, qh.h, qh.row + i * BLK, f);
        load_tile(st + TILE, &p.tm_do, qh.h, qh.row + i * BLK, f);
        bulk_load(st + 2 * TILE, p.lse + r0, BLK * 4, f);
        bulk_load(st + 2 * TILE + 512, p.delta + r0, BLK * 4, f);
      }
    } else {
      gs += valid;
    }
    kc++;
    __syncwarp();
  }
}

/* Eight K = 16 MMAs of an M128 N128 K128 product over K-major tiles a (the
 * A rows) and b (the B rows), each [K half][128 rows][64]. */
__device__ __forceinline__ void
mma_kmajor(uint32_t d, uint32_t a, uint32_t b, uint32_t idesc, bool acc)
{
#pragma unroll
  for (int kk = 0; kk < 8; kk++) {
    const uint32_t k = (kk >> 2) * REGION + (kk & 3) * 32;
    tc05::mma_ss(d, desc(a + k, 16), desc(b + k, 16), idesc, acc || kk > 0);
  }
}

/* warp 9: every MMA and commit, issued by lane 0; the whole warp follows
 * the waits. */
__device__ __forceinline__ void
mma_issuer(const params &p, uint32_t base, uint32_t tmem)
{
  const bool lead = (threadIdx.x & 31) == 0;
  const uint32_t id_s = vsa_umma_idesc_bf16(128, 128, 0, 0);  // S, dP
  const uint32_t id_kv = vsa_umma_idesc_bf16(128, 128, 1, 1); // dV^T, dK^T
  const uint32_t id_q = vsa_umma_idesc_bf16(128, 128, 0, 1);  // dQ
  const uint32_t st = base + OFF_SLOT;
  uint32_t gs = 0, kc = 0;
  item it;
  for (uint32_t k = 0; read_item(p, base, k, it); k++) {
    const int steps = it.valid;
    if (steps == 0) continue;
    mbar_wait(bar_addr(base, B_KV_READY), ph(kc));
    mbar_wait(bar_addr(base, B_ACC_FREE), ph_free(kc));
    tc05::fence_after();
    for (int n = 0; n < steps; n++, gs++) {
      // S: the slot's Q; the softmax of the step before has read S (its
      // DS_READY preceded the dK^T that freed the slot).
      mbar_wait(bar_addr(base, B_FULL), ph(gs));
      tc05::fence_after();
      if (lead) {
        mma_kmajor(tmem + T_S, st, base + OFF_K, id_s, false);
        tc05::commit(bar_addr(base, B_S_FULL));
      }
      // dP into the columns of the step before's dQ, once drained.
      mbar_wait(bar_addr(base, B_DQ_FREE), ph_free(gs));
      tc05::fence_after();
      if (lead) {
        mma_kmajor(tmem + T_DP, st + TILE, base + OFF_V, id_s, false);
        tc05::commit(bar_addr(base, B_DP_FULL));
      }
      mbar_wait(bar_addr(base, B_DS_READY), ph(gs));
      tc05::fence_after();
      if (lead) {
        // MN-major A (M = d): LBO = the d-half stride; K steps of 16 q rows
        // = 2 KB. MN-major B (N = kv): LBO = the kv-half stride.
#pragma unroll
        for (int kk = 0; kk < 8; kk++) // dV^T += dO^T P
          tc05::mma_ss(tmem + T_DV, desc(st + TILE + kk * 2048, REGION),
                       desc(base + OFF_P + kk * 2048, REGION), id_kv, n > 0 || kk > 0);
#pragma unroll
        for (int kk = 0; kk < 8; kk++) // dK^T += Q^T dS
          tc05::mma_ss(tmem + T_DK, desc(st + kk * 2048, REGION),
                       desc(base + OFF_DS + kk * 2048, REGION), id_kv, n > 0 || kk > 0);
        tc05::commit(bar_addr(base, B_EMPTY)); // Q, dO, stats free
        // dQ = dS K: K-major A (the dS tile, K = kv), MN-major B (K: N = d,
        // LBO = the d-half stride, K steps of 16 kv rows = 2 KB). The
        // softmax has read dP (DS_READY), so dQ may take its columns.
#pragma unroll
        for (int kk = 0; kk < 8; kk++)
          tc05::mma_ss(tmem + T_DQ, desc(base + OFF_DS + (kk >> 2) * REGION + (kk & 3) * 32, 16),
                       desc(base + OFF_K + kk * 2048, REGION), id_q, kk > 0);
        tc05::commit(bar_addr(base, B_DQ_FULL));
        tc05::commit(bar_addr(base, B_PDS_FREE)); // P, dS tiles free
      }
      __syncwarp();
    }
    if (lead) {
      tc05::commit(bar_addr(base, B_ACC_FULL));
      tc05::commit(bar_addr(base, B_KV_FREE));
    }
    __syncwarp();
    kc++;
  }
}

/* 32 columns (c0 .. c0+31) of row r as bf16 into a [half][128 rows][64]
 * 128B-swizzled tile: four 16-byte chunks at x ^ (r & 7). */
__device__ __forceinline__ void
put_row32(unsigned char *tile, int r, int c0, const uint32_t (&pk)[16])
{
  uint4 *row = reinterpret_cast<uint4 *>(tile + (c0 >> 6) * REGION + r * 128);
  const int x0 = (c0 & 63) >> 3;
#pragma unroll
  for (int x = 0; x < 4; x++)
    row[(x0 + x) ^ (r & 7)] = make_uint4(pk[4 * x], pk[4 * x + 1], pk[4 * x + 2], pk[4 * x + 3]);
}

/* warps 0-3: lane = q row of the step, 128 kv columns in quarters of 32.
 * S stays in tensor memory until this step's DS_READY (the next S waits
 * for the slot that dK^T frees), so the dS pass reads it again and
 * recomputes P (the same bits) instead of holding 128 values. */
__device__ __forceinline__ void
softmax(const params &p, uint32_t base, unsigned char *base_ptr, uint32_t tmem)
{
  const int r = threadIdx.x & 127;
  const uint32_t tl = tmem + ((uint32_t)(r & ~31) << 16);
  const float *stats = reinterpret_cast<const float *>(base_ptr + OFF_SLOT + 2 * TILE);
  uint32_t gs = 0;
  item it;
  for (uint32_t k = 0; read_item(p, base, k, it); k++) {
    const int vb = min(max(__ldg(p.vbs + it.j), 0), BLK);
    for (int n = 0; n < it.valid; n++, gs++) {
      mbar_wait(bar_addr(base, B_FULL), ph(gs));
      const float lse = stats[r], delta = stats[128 + r];
      mbar_wait(bar_addr(base, B_S_FULL), ph(gs));
      tc05::fence_after();
      mbar_wait(bar_addr(base, B_PDS_FREE), ph_free(gs));
#pragma unroll 1
      for (int q4 = 0; q4 < 4; q4++) {
        uint32_t s[32], pk[16];
        tc05::ld_32x32b<32>(tl + T_S + 32 * q4, s);
        tc05::wait_ld();
#pragma unroll
        for (int c = 0; c < 16; c++) {
          const int c0 = 32 * q4 + 2 * c;
          const float p0 = c0 < vb ? fast_exp2(fmaf(__uint_as_float(s[2 * c]), p.scale_log2, -lse)) : 0.f;
          const float p1 =
              c0 + 1 < vb ? fast_exp2(fmaf(__uint_as_float(s[2 * c + 1]), p.scale_log2, -lse)) : 0.f;
          pk[c] = pack_bf16(p0, p1);
        }
        put_row32(base_ptr + OFF_P, r, 32 * q4, pk);
      }
      mbar_wait(bar_addr(base, B_DP_FULL), ph(gs));
      tc05::fence_after();
#pragma unroll 1
      for (int q4 = 0; q4 < 4; q4++) {
        uint32_t s[32], dp[32], pk[16];
        tc05::ld_32x32b<32>(tl + T_S + 32 * q4, s);
        tc05::ld_32x32b<32>(tl + T_DP + 32 * q4, dp);
        tc05::wait_ld();
#pragma unroll
        for (int c = 0; c < 16; c++) {
          float d[2];
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const int col = 32 * q4 + 2 * c + h;
            const float pr =
                col < vb ? fast_exp2(fmaf(__uint_as_float(s[2 * c + h]), p.scale_log2, -lse)) : 0.f;
            d[h] = col < vb ? pr * (__uint_as_float(dp[2 * c + h]) - delta) : 0.f;
          }
          pk[c] = pack_bf16(d[0], d[1]);
        }
        put_row32(base_ptr + OFF_DS, r, 32 * q4, pk);
      }
      fence_proxy_async(); // the P, dS tiles are read by the MMA (async proxy)
      tc05::fence_before();
      mbar_arrive(bar_addr(base, B_DS_READY));
    }
  }
}

/* One 4 KB quarter of a warp's 32 dQ rows: staged (chunk x of row l at
 * x ^ (l & 7)), then bulk-added to the accumulator. */
template <bool FIXED>
__device__ __forceinline__ void
drain_quarter(unsigned char *stg, uint32_t stg_addr, const uint32_t *v, float scale, float *dst)
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

/* warps 4-7: zero padded K/V rows, drain dQ, write dK/dV. Warp w's 32 q
 * rows are rows 32·(w & 1) .. +31 of 64-row block 2i + (w >> 1) of the
 * accumulator's quarter layout, which the shared postprocess reads. */
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
    const int steps = it.valid;
    const int64_t kv_row0 = it.bh * ((int64_t)p.nkv * BLK) + (int64_t)it.j * BLK;
    const int vb = min(max(__ldg(p.vbs + it.j), 0), BLK);
    if (steps > 0) {
      mbar_wait(bar_addr(base, B_KV_FULL), ph(kc));
      if (vb < BLK) { // padded K/V rows: zeros, whatever the tiles hold
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
      const int i = __ldg(it.l.list + e);
      e = it.l.next(e + 1);
      mbar_wait(bar_addr(base, B_DQ_FULL), ph(gs));
      tc05::fence_after();
      uint32_t v[128];
      tc05::ld_32x32b<64>(tl + T_DQ, reinterpret_cast<uint32_t(&)[64]>(v[0]));
      tc05::ld_32x32b<64>(tl + T_DQ + 64, reinterpret_cast<uint32_t(&)[64]>(v[64]));
      tc05::wait_ld();
      tc05::fence_before();
      mbar_arrive(bar_addr(base, B_DQ_FREE));
      const int64_t qrow0 = it.bh * ((int64_t)p.nq * BLK) + (int64_t)i * BLK + SUB * (w >> 1);
      float scale = 1.f; // 2^row_exp exactly (row_exp in [-126, 126])
      if (FIXED) scale = exp2_int(__ldg(p.row_exp + qrow0 + (r & 63)));
      float *tile = p.dq_accum + qrow0 * D;
#pragma unroll
      for (int qt = 0; qt < 4; qt++)
        drain_quarter<FIXED>(stg, stg_addr, v + 32 * qt, scale,
                             tile + qt * (SUB * 32) + (w & 1) * (32 * 32));
    }
    // The dK/dV epilogue: lane r holds column d = r of dV^T, then dK^T, in
    // two halves of 64 kv rows. With q chunking, chunk c first adds chunk
    // c-1's fp32 partial (in chunk order) and, unless last, hands its own on.
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
    // This lane's column of j's first token in dk/dv (layout-aware; out of
    // the loop, where the 64 accumulators are not yet live).
    const int64_t out0 =
        vsa_bwd::token_offset(p.layout, p.H, (int64_t)p.nkv * BLK, it.bh, (int64_t)it.j * BLK) + r;
#pragma unroll 1
    for (int t = 0; t < 4; t++) { // t >> 1: 0 dV (no scale), 1 dK (sm_scale); t & 1: kv half
      float a[64];
      if (steps > 0) {
        tc05::ld_32x32b<64>(tl + ((t >> 1) ? T_DK : T_DV) + 64 * (t & 1),
                            reinterpret_cast<uint32_t(&)[64]>(a));
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
        // Column r of 64 rows in the layout: a warp stores 64 contiguous
        // bytes of one row at a time (rows H·D apart in BSHD).
        __nv_bfloat16 *out = ((t >> 1) ? p.dk : p.dv) + out0 +
                             (t & 1) * (int64_t)(64 * vsa_bwd::token_stride(p.layout, p.H));
        const float sc = (t >> 1) ? p.sm_scale : 1.f;
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
bwd_b128_kernel(const __grid_constant__ params p)
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
      mbar_init(bar_addr(base, B_SCHED_FULL + s), 1);
      mbar_init(bar_addr(base, B_SCHED_EMPTY + s), SCHED_READERS);
    }
    mbar_init(bar_addr(base, B_KV_FULL), 1);
    mbar_init(bar_addr(base, B_KV_READY), 1);
    mbar_init(bar_addr(base, B_KV_FREE), 1);
    mbar_init(bar_addr(base, B_FULL), 1);
    mbar_init(bar_addr(base, B_EMPTY), 1);
    mbar_init(bar_addr(base, B_S_FULL), 1);
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

/* Scratch map: dQ accumulator (rows x D x 4 B), Delta, row exponents and
 * ‖dO_r‖ (rows each), K/V statistics (deterministic), the 64-token vbs
 * (the preprocess's statistics read them), the ticket and the q-chunk
 * counters, the work order, the scheduler slots (16 B a CTA), the dK/dV
 * partials (q chunking) and the emulated tensor memory; 256-byte aligned. */
struct scratch_map {
  size_t delta, row_exp, row_dnorm, kv_stats, vbs64, ticket, order, sched, kv_acc, emu, total;
};

static int
chunk_blocks(int q_chunk)
{
  return q_chunk > 0 ? (q_chunk / 2 > 0 ? q_chunk / 2 : 1) : q_chunk;
}

static scratch_map
map_scratch(const vsa_shape *s, int q_chunk, int ctas)
{
  const int64_t BH = (int64_t)s->B * s->H, rows = BH * s->Sq, kv_rows = BH * s->Skv;
  scratch_map m;
  size_t at = (size_t)rows * D * 4;
  auto carve = [&](size_t bytes) { size_t o = at; at = (at + bytes + 255) & ~(size_t)255; return o; };
  m.delta = carve((size_t)rows * 4);
  m.row_exp = carve((size_t)rows * 4);
  m.row_dnorm = carve((size_t)rows * 4);
  m.kv_stats = carve(vsa_bwd::kv_stats_bytes(BH, s->Skv / SUB));
  m.vbs64 = carve((size_t)(s->Skv / SUB) * 4);
  m.ticket = carve(8 + (size_t)(kv_rows / BLK) * 4);
  m.order = carve((size_t)(kv_rows / BLK) * 4);
  m.sched = carve((size_t)ctas * 16);
  const bool chunked = vsa_bwd::chunk_count(s->Sq / BLK, chunk_blocks(q_chunk)) > 1;
  m.kv_acc = carve(chunked ? (size_t)kv_rows * 2 * D * 4 : 0);
  m.emu = carve((size_t)ctas * tc05::EMU_CTA_BYTES);
  m.total = at;
  return m;
}

size_t
SM100_B128_FN(bsa_b128_sm100a_scratch_bytes)(const vsa_shape *s, int q_chunk, int sm_count)
{
  return map_scratch(s, q_chunk, sm_count).total;
}

size_t
SM100_B128_FN(bsa_b128_sm100a_smem_bytes)(void)
{
  return SMEM_BYTES + tc05::emu_smem_bytes;
}

cudaError_t
SM100_B128_FN(bsa_b128_sm100a)(const vsa_shape *s, const uint16_t *d_dO, const uint16_t *d_q,
                               const uint16_t *d_k, const uint16_t *d_v, const uint16_t *d_o,
                               const float *d_lse, const int32_t *d_k2q_idx,
                               const int32_t *d_k2q_num, int k2q_width, const int32_t *d_vbs,
                               void *d_scratch, uint16_t *d_dq, uint16_t *d_dk, uint16_t *d_dv,
                               int deterministic, int q_chunk, int sm_count, cudaStream_t stream)
{
  if (vsa_bwd::block_of(s) != BLK || s->D != D || s->Sq % BLK || s->Skv % BLK || s->Sq <= 0 ||
      s->Skv <= 0 || k2q_width < 1 || sm_count < 1 ||
      (s->layout != VSA_BHSD && s->layout != VSA_BSHD))
    return cudaErrorInvalidValue;
  const int64_t BH = (int64_t)s->B * s->H, rows = BH * s->Sq, kv_rows = BH * s->Skv;
  if (rows >= (1ll << 31) || kv_rows >= (1ll << 31)) return cudaErrorInvalidValue;
  const int nq = s->Sq / BLK, nkv = s->Skv / BLK, qc = chunk_blocks(q_chunk);
  const int chunks = vsa_bwd::chunk_count(nq, qc);
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
  if (deterministic) {
    // The statistics pass bounds K and V over valid rows of 64-token blocks.
    int32_t *vbs64 = reinterpret_cast<int32_t *>(ws + m.vbs64);
    e = vsa_bwd::launch_vbs_split(d_vbs, nkv, vbs64, stream);
    if (e != cudaSuccess) return e;
    vsa_bwd::prep_fixed_point(pp, d_k, d_v, vbs64, s->Sq, s->Skv,
                              reinterpret_cast<float *>(ws + m.kv_stats),
                              reinterpret_cast<float *>(ws + m.row_dnorm),
                              reinterpret_cast<int *>(ws + m.row_exp));
  }
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
  p.q_chunk = chunks > 1 ? qc : nq;
  p.chunks = chunks;
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
    e = cudaFuncSetAttribute(bwd_b128_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             SMEM_BYTES);
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(bwd_b128_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               SMEM_BYTES);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  if (deterministic)
    bwd_b128_kernel<true><<<ctas, THREADS, SMEM_BYTES, stream>>>(p);
  else
    bwd_b128_kernel<false><<<ctas, THREADS, SMEM_BYTES, stream>>>(p);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return vsa_bwd::launch_dq_finish(pp.dq_accum, d_dq, s->sm_scale, rows,
                                   deterministic ? vsa_bwd::DQ_QUARTERS_FIXED : vsa_bwd::DQ_QUARTERS,
                                   pp.row_exp, s->layout, s->H, s->Sq, stream);
}
