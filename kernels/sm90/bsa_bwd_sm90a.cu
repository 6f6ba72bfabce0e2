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
 * dq = bf16(accumulator · sm_scale). dk includes sm_scale, dv does not.
 *
 * Semantics as the reference (src/core/bsa.h): list entries past a count are
 * never read (entries outside [0, nq) are skipped, counts clamped to the
 * width, so no input faults); padded kv rows (>= vbs) are zeroed in shared
 * memory and masked by selection, so their dk/dv rows are exactly 0 and
 * NaN/Inf in padded K/V slots never reach a product; an empty list writes
 * zero dk/dv. dk/dv are bitwise deterministic for a given list order; dq is
 * summed with atomics (order varies run to run within fp32 rounding).
 *
 * Token layouts BHSD and BSHD (vsa_shape.layout): v1/v2 read Q, dO, K, V
 * rows token_stride apart with cp.async, v3/v4 through 3D TMA maps
 * (common/bwd_prep.h); dk, dv (store_rows) and dq (the postprocess) are
 * written in the layout. Each row is 256 contiguous bytes either way.
 *
 * Built for sm_90a only (wgmma); head dim 128.
 */
#include <cuda_bf16.h>

#include "../kernels.h"
#include "../common/block_expand.h"
#include "../common/bwd_prep.h"
#include "sm90_bwd_pair.cuh"
#include "sm90_bwd_ws.h"

namespace {

using namespace sm90bwd;
constexpr uint32_t SMEM_BYTES = OFF_END + 1024;

struct bwd_params : sm90_bwd_common {
  const __nv_bfloat16 *dO, *q, *k, *v;
};

/* Copy a 64x128 bf16 tile (rows ld elements apart: vsa_bwd::token_stride)
 * into two swizzled regions. */
__device__ __forceinline__ void
load_tile(uint32_t dst, const __nv_bfloat16 *src, int ld)
{
#pragma unroll
  for (int c = 0; c < 8; c++) {
    int id = threadIdx.x + CONSUMER_THREADS * c;
    int row = id >> 4, c16 = id & 15;
    uint32_t off = (c16 >> 3) * REGION + row * 128 + ((((c16 & 7) ^ (row & 7))) << 4);
    cp_async16(dst + off, src + (int64_t)row * ld + c16 * 8);
  }
}

/* Q_i, dO_i, lse_i and Delta_i of q block i into stage s (q_head: the
 * element offset of head bh's token 0 in q and dO, ld: the token stride). */
__device__ __forceinline__ void
load_stage(const bwd_params &p, uint32_t base, int s, int64_t bh, int64_t q_head, int ld, int i)
{
  int64_t row0 = bh * ((int64_t)p.nq * BLK) + (int64_t)i * BLK;
  uint32_t st = base + OFF_STAGE + s * STAGE_BYTES;
  const int64_t off = q_head + (int64_t)i * BLK * ld;
  load_tile(st, p.q + off, ld);
  load_tile(st + TILE, p.dO + off, ld);
  int t = threadIdx.x;
  if (t < 32) {
    const float *src = (t < 16 ? p.lse : p.delta) + row0 + (t & 15) * 4;
    cp_async16(base + OFF_STATS + s * STATS_BYTES + t * 16, src);
  }
}


template <bool BULK>
__global__ void __launch_bounds__(CONSUMER_THREADS, 2)
bwd_kernel(const bwd_params p)
{
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = (int64_t)b * p.H + h;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Token offsets in the layout (BHSD: row·D as before).
  const int ld = vsa_bwd::token_stride(p.layout, p.H);
  const int64_t kv_off = vsa_bwd::token_offset(p.layout, p.H, (int64_t)p.nkv * BLK, bh,
                                               (int64_t)j * BLK);
  const int64_t q_head = vsa_bwd::token_offset(p.layout, p.H, (int64_t)p.nq * BLK, bh, 0);
  __nv_bfloat16 *dk_out = p.dk + kv_off;
  __nv_bfloat16 *dv_out = p.dv + kv_off;

  int cnt = p.k2q_num[bh * p.nkv + j];
  cnt = min(max(cnt, 0), p.k2q_width);
  const int32_t *list = p.k2q_idx + (bh * p.nkv + j) * (int64_t)p.k2q_width;
  int e = next_entry(list, 0, cnt, p.nq);
  const int vb = p.vbs[j];

  float acc_dk[64], acc_dv[64];
#pragma unroll
  for (int x = 0; x < 64; x++) acc_dk[x] = acc_dv[x] = 0.f;
  if (e >= cnt) { // nothing selects this kv block: exact zeros
    store_rows(dk_out, ld, acc_dk, 0.f);
    store_rows(dv_out, ld, acc_dv, 0.f);
    return;
  }

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  unsigned char *base_ptr = smem_raw + (base - smem_addr(smem_raw));
  load_tile(base + OFF_K, p.k + kv_off, ld);
  load_tile(base + OFF_V, p.v + kv_off, ld);
  load_stage(p, base, 0, bh, q_head, ld, __ldg(list + e));
  cp_async_commit();

  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;  // this thread's kv rows
  const bool valid0 = r0 < vb, valid1 = r1 < vb;

  for (int it = 0; e < cnt; it++) {
    const int s = it & 1;
    const int i = __ldg(list + e);
    const int en = next_entry(list, e + 1, cnt, p.nq);
    if (en < cnt) load_stage(p, base, s ^ 1, bh, q_head, ld, __ldg(list + en));
    cp_async_commit();
    cp_async_wait<1>();
    if (it == 0) {
      __syncthreads(); // every thread's K/V copies have landed
      zero_padded_rows(base_ptr + OFF_K, base_ptr + OFF_V, vb);
    }
    fence_proxy_async();
    __syncthreads();

    const uint32_t sQ = base + OFF_STAGE + s * STAGE_BYTES, sdO = sQ + TILE;
    const float *lse = reinterpret_cast<const float *>(base_ptr + OFF_STATS + s * STATS_BYTES);
    unsigned char *stg = base_ptr + OFF_STAGE + s * STAGE_BYTES;
    float *dqa = p.dq_accum + (bh * ((int64_t)p.nq * BLK) + (int64_t)i * BLK) * D;
    pair_gradients(base, base_ptr, sQ, sdO, lse, lse + BLK, p.scale_log2, valid0, valid1,
                   acc_dk, acc_dv, [&](int hn, const float *acc_q) {
      if (BULK) {
        stage_dq_half(stg, hn, acc_q);
      } else {
#pragma unroll
        for (int jn = 0; jn < 8; jn++) {
          int col = hn * 64 + jn * 8 + 2 * (lane & 3);
          atomicAdd(reinterpret_cast<float2 *>(dqa + (int64_t)r0 * D + col),
                    make_float2(acc_q[4 * jn], acc_q[4 * jn + 1]));
          atomicAdd(reinterpret_cast<float2 *>(dqa + (int64_t)r1 * D + col),
                    make_float2(acc_q[4 * jn + 2], acc_q[4 * jn + 3]));
        }
      }
    });
    if (BULK) {
      fence_proxy_async();
      __syncthreads();
      if (threadIdx.x == 0) {
        bulk_reduce_add_f32(dqa, sQ, BLK * D * sizeof(float));
        bulk_wait_read(); // the stage is refilled next iteration
      }
    }
    __syncthreads(); // stage s and dS^T are free for the next iteration
    e = en;
  }
  if (BULK && threadIdx.x == 0) bulk_wait_all();
  store_rows(dk_out, ld, acc_dk, p.sm_scale);
  store_rows(dv_out, ld, acc_dv, 1.f);
#endif
}

} // namespace

/* The TMA tensor maps of q, k, v, dO (B·H heads of S tokens in p.layout;
 * vsa_bwd::tile_map) for the v3 and v4 kernels. */
static cudaError_t
sm90_tile_maps(sm90_ws_params &p, const void *q, const void *k, const void *v, const void *dO,
               int B, int64_t Sq, int64_t Skv)
{
  int64_t qrows = (int64_t)B * p.H * Sq, krows = (int64_t)B * p.H * Skv;
  if (qrows >= (1ll << 31) || krows >= (1ll << 31)) return cudaErrorInvalidValue;
  cudaError_t e = vsa_bwd::tile_map(&p.tm_q, q, p.layout, B, p.H, Sq);
  if (e == cudaSuccess) e = vsa_bwd::tile_map(&p.tm_do, dO, p.layout, B, p.H, Sq);
  if (e == cudaSuccess) e = vsa_bwd::tile_map(&p.tm_k, k, p.layout, B, p.H, Skv);
  if (e == cudaSuccess) e = vsa_bwd::tile_map(&p.tm_v, v, p.layout, B, p.H, Skv);
  return e;
}

/* Scratch map: dQ accumulator (fp32 rows x D), Delta (rows), the
 * fixed-point row exponents and ‖dO_r‖ (rows each) and K/V statistics slots
 * (vsa_bwd::kv_stats_bytes) of the deterministic mode, the work order
 * (kv_rows / 64), then, 256-byte aligned
 * for float4 access, the dK/dV partials of q chunking and their counters. */
static size_t
kv_acc_offset(int64_t rows, int64_t kv_rows, int64_t BH, int64_t nkv)
{
  size_t b = (size_t)rows * D * sizeof(float) + 3 * (size_t)rows * sizeof(float) +
             vsa_bwd::kv_stats_bytes(BH, nkv) + (size_t)(kv_rows / BLK) * sizeof(int32_t);
  return (b + 255) & ~(size_t)255;
}

static size_t
scratch_bytes_64(const vsa_shape *s, int q_chunk)
{
  int64_t BH = (int64_t)s->B * s->H, rows = BH * s->Sq, kv_rows = BH * s->Skv;
  size_t bytes = kv_acc_offset(rows, kv_rows, BH, s->Skv / BLK);
  if (vsa_bwd::chunk_count(s->Sq / BLK, q_chunk) > 1) // dK/dV partials and their order counters
    bytes += (size_t)kv_rows * 2 * D * sizeof(float) + (size_t)(kv_rows / BLK) * sizeof(int);
  return (bytes + 255) & ~(size_t)255;
}

/* At block 128, the 64-token view's scratch, then the expanded lists. */
extern "C" size_t
bsa_backward_sm90a_scratch_bytes(const vsa_shape *s, int q_chunk)
{
  return scratch_bytes_64(s, q_chunk) + vsa_bwd::block128_extra_bytes(s);
}

/* The 64-token launch (s->block 64, or a block-128 problem's 64-token
 * view with v4 on the sub-block lists, or v5 with list128 set). */
static cudaError_t
backward_64(const vsa_shape *s, const uint16_t *d_dO, const uint16_t *d_q, const uint16_t *d_k,
            const uint16_t *d_v, const uint16_t *d_o, const float *d_lse,
            const int32_t *d_k2q_idx, const int32_t *d_k2q_num, int k2q_width,
            const int32_t *d_vbs, void *d_scratch, uint16_t *d_dq, uint16_t *d_dk,
            uint16_t *d_dv, vsa_sm90a_variant variant, int deterministic, int q_chunk,
            const int32_t *list128_idx, const int32_t *list128_num, int list128_width,
            cudaStream_t stream)
{
  if (vsa_bwd::block_of(s) != 64 || s->layout != VSA_BHSD && s->layout != VSA_BSHD)
    return cudaErrorInvalidValue;
  if (s->D != D || s->Sq % BLK || s->Skv % BLK || s->B * s->H > 65535 || k2q_width < 1)
    return cudaErrorInvalidValue;
  // Every offset below is 64-bit, but rows (B·H·S) index lse, Delta and the
  // accumulator in int and TMA coordinates: below 2^31, as tile_map checks.
  if ((int64_t)s->B * s->H * s->Sq >= (1ll << 31) || (int64_t)s->B * s->H * s->Skv >= (1ll << 31))
    return cudaErrorInvalidValue;
  const bool v5 = variant == VSA_SM90A_B128;
  if (v5 && (!list128_idx || s->Sq % 128 || s->Skv % 128)) return cudaErrorInvalidValue;
  // TMA producer kernels
  const bool ws = variant == VSA_SM90A_WS || variant == VSA_SM90A_KV2 || v5;
  if (deterministic && !ws) return cudaErrorInvalidValue;
  const int64_t BH = (int64_t)s->B * s->H, rows = BH * s->Sq, kv_rows = BH * s->Skv;
  const int nkv = s->Skv / BLK;
  float *dq_accum = static_cast<float *>(d_scratch);
  float *delta = dq_accum + rows * D;
  int *row_exp = reinterpret_cast<int *>(delta + rows);
  float *row_dnorm = reinterpret_cast<float *>(row_exp + rows);
  float *kv_stats = row_dnorm + rows;
  int32_t *order = reinterpret_cast<int32_t *>(reinterpret_cast<char *>(kv_stats) +
                                               vsa_bwd::kv_stats_bytes(BH, nkv));
  const int chunks = ws ? vsa_bwd::chunk_count(s->Sq / BLK, q_chunk) : 1;
  float *kv_acc = reinterpret_cast<float *>(static_cast<char *>(d_scratch) +
                                            kv_acc_offset(rows, kv_rows, BH, nkv));
  int *kv_sem = reinterpret_cast<int *>(kv_acc + kv_rows * 2 * D);
  const int group = vsa_bwd::heads_per_group(BH, s->Sq, chunks);
  vsa_bwd::prep_params pp = {};
  pp.dO = d_dO;
  pp.o = d_o;
  pp.layout = s->layout;
  pp.H = s->H;
  pp.Sq = s->Sq;
  pp.Skv = s->Skv;
  pp.delta = delta;
  pp.dq_accum = dq_accum;
  pp.rows = rows;
  pp.zero_b = kv_sem;
  pp.n_b = chunks > 1 ? kv_rows / BLK : 0;
  pp.k2q_num = d_k2q_num;
  pp.k2q_width = k2q_width;
  pp.groups = (int)(BH / group);
  // v4's items are pairs of kv blocks, ordered by their summed list
  // lengths; v5's 128-token kv blocks are the same pairs.
  const bool pairs = variant == VSA_SM90A_KV2 || v5;
  pp.pair_nkv = pairs ? nkv : 0;
  pp.group_items = group * (pairs ? (nkv + 1) / 2 : nkv);
  pp.order = ws ? order : NULL;
  if (deterministic)
    vsa_bwd::prep_fixed_point(pp, d_k, d_v, d_vbs, s->Sq, s->Skv, kv_stats, row_dnorm, row_exp);
  cudaError_t err = vsa_bwd::launch_prep(pp, stream);
  if (err != cudaSuccess) return err;
  sm90_bwd_common c;
  c.lse = d_lse;
  c.delta = delta;
  c.k2q_idx = d_k2q_idx;
  c.k2q_num = d_k2q_num;
  c.vbs = d_vbs;
  c.k2q_width = k2q_width;
  c.H = s->H;
  c.layout = s->layout;
  c.nq = s->Sq / BLK;
  c.nkv = nkv;
  c.sm_scale = s->sm_scale;
  c.scale_log2 = s->sm_scale * 1.4426950408889634f;
  c.dq_accum = dq_accum;
  c.dk = reinterpret_cast<__nv_bfloat16 *>(d_dk);
  c.dv = reinterpret_cast<__nv_bfloat16 *>(d_dv);
  if (ws) {
    sm90_ws_params p;
    static_cast<sm90_bwd_common &>(p) = c;
    p.row_exp = pp.row_exp;
    p.chunks = chunks;
    p.q_chunk = chunks > 1 ? q_chunk : c.nq;
    p.kv_acc = kv_acc;
    p.kv_sem = kv_sem;
    p.order = pp.order;
    p.groups = pp.groups;
    p.group_items = pp.group_items;
    p.skip_dq_reduce = vsa_bwd::ablate("no_dq_reduce");
    p.list128.idx = list128_idx;
    p.list128.num = list128_num;
    p.list128.width = list128_width;
    cudaError_t e = sm90_tile_maps(p, d_q, d_k, d_v, d_dO, s->B, s->Sq, s->Skv);
    if (e == cudaSuccess)
      e = v5 ? sm90_b128_launch(p, stream)
          : variant == VSA_SM90A_KV2 ? sm90_kv2_launch(p, stream)
                                     : sm90_ws_launch(p, stream);
    if (e != cudaSuccess) return e;
  } else {
    static bool configured = false;
    if (!configured) {
      cudaError_t e = cudaFuncSetAttribute(bwd_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
      if (e == cudaSuccess)
        e = cudaFuncSetAttribute(bwd_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
      if (e != cudaSuccess) return e;
      configured = true;
    }
    bwd_params p;
    static_cast<sm90_bwd_common &>(p) = c;
    p.dO = reinterpret_cast<const __nv_bfloat16 *>(d_dO);
    p.q = reinterpret_cast<const __nv_bfloat16 *>(d_q);
    p.k = reinterpret_cast<const __nv_bfloat16 *>(d_k);
    p.v = reinterpret_cast<const __nv_bfloat16 *>(d_v);
    dim3 grid(p.nkv, s->H, s->B);
    if (variant == VSA_SM90A_BULK)
      bwd_kernel<true><<<grid, CONSUMER_THREADS, SMEM_BYTES, stream>>>(p);
    else
      bwd_kernel<false><<<grid, CONSUMER_THREADS, SMEM_BYTES, stream>>>(p);
  }
  return vsa_bwd::launch_dq_finish(dq_accum, d_dq, s->sm_scale, rows,
                                   variant == VSA_SM90A_ATOMIC ? vsa_bwd::DQ_ROWS
                                   : deterministic             ? vsa_bwd::DQ_ROWS_SWIZZLED_FIXED
                                                               : vsa_bwd::DQ_ROWS_SWIZZLED,
                                   pp.row_exp, s->layout, s->H, s->Sq, stream);
}

extern "C" cudaError_t
bsa_backward_sm90a(const vsa_shape *s, const uint16_t *d_dO, const uint16_t *d_q,
                   const uint16_t *d_k, const uint16_t *d_v, const uint16_t *d_o,
                   const float *d_lse, const int32_t *d_k2q_idx,
                   const int32_t *d_k2q_num, int k2q_width, const int32_t *d_vbs,
                   void *d_scratch, uint16_t *d_dq, uint16_t *d_dk, uint16_t *d_dv,
                   vsa_sm90a_variant variant, int deterministic, int q_chunk,
                   cudaStream_t stream)
{
  if (s->layout != VSA_BHSD && s->layout != VSA_BSHD) return cudaErrorInvalidValue;
  if (variant == VSA_SM90A_B128 && vsa_bwd::block_of(s) != 128) return cudaErrorInvalidValue;
  if (vsa_bwd::block_of(s) == 128) {
    // Block 128 runs on the 64-token view (one small launch expands the
    // lists: sub-block lists, vbs halves, the counts of v4's work order),
    // then v5 with 128-row tiles on the 128-token lists (the default:
    // faster than v4 at every block-128 point measured, kernels/NOTES.md)
    // or, asked for by version, v4 on the sub-block lists, whose CTA owns
    // both 64-row halves of a kv block and shares every q tile between
    // them.
    vsa_shape s64;
    vsa_bwd::expanded_lists x;
    void *tail = static_cast<char *>(d_scratch) + scratch_bytes_64(s, q_chunk);
    cudaError_t e = vsa_bwd::as_64_token(s, d_k2q_idx, d_k2q_num, k2q_width, d_vbs, tail, &s64,
                                         &x, stream);
    if (e != cudaSuccess) return e;
    if (variant == VSA_SM90A_WS) variant = VSA_SM90A_B128;
    if (variant == VSA_SM90A_B128 && q_chunk > 0) q_chunk += q_chunk & 1; // whole 128-token blocks
    return backward_64(&s64, d_dO, d_q, d_k, d_v, d_o, d_lse, x.k2q_idx, x.k2q_num, x.width,
                       x.vbs, d_scratch, d_dq, d_dk, d_dv, variant, deterministic, q_chunk,
                       d_k2q_idx, d_k2q_num, k2q_width, stream);
  }
  if (vsa_bwd::block_of(s) != 64) return cudaErrorInvalidValue;
  return backward_64(s, d_dO, d_q, d_k, d_v, d_o, d_lse, d_k2q_idx, d_k2q_num, k2q_width, d_vbs,
                     d_scratch, d_dq, d_dk, d_dv, variant, deterministic, q_chunk, NULL, NULL, 0,
                     stream);
}
