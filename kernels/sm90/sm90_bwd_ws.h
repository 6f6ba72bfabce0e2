/* sm90_bwd_ws.h — between the sm_90a backward's launcher (bsa_bwd_sm90a.cu)
 * and its warp-specialized main kernels (bsa_bwd_ws_sm90a.cu, v3;
 * bsa_bwd_kv2_sm90a.cu, v4; bsa_bwd_b128_sm90a.cu, v5). */
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* What every sm_90a main kernel takes: statistics, lists, shapes, the fp32
 * dQ accumulator and the dK/dV outputs. layout: vsa_layout of q, k, v,
 * dO, dk, dv (lse, Delta, lists and scratch are [B, H, ...] either way). */
struct sm90_bwd_common {
  const float *lse, *delta;
  const int32_t *k2q_idx, *k2q_num, *vbs;
  int k2q_width, H, nq, nkv, layout;
  float sm_scale, scale_log2;
  float *dq_accum;
  __nv_bfloat16 *dk, *dv;
};

struct sm90_ws_params : sm90_bwd_common {
  CUtensorMap tm_q, tm_do, tm_k, tm_v; // filled by the launcher
  const int *row_exp; // non-NULL: deterministic dQ in int32 fixed point
                      // (common/bwd_prep.h), one exponent per q row
  // q chunking: CTA (j, c) takes the pairs of kv block j with q block in
  // [c·q_chunk, (c+1)·q_chunk); chunks > 1 passes dK/dV partials (fp32,
  // wgmma fragment order) from chunk to chunk through kv_acc in order,
  // gated by kv_sem (per (b, h, kv block), zeroed).
  int q_chunk, chunks;
  float *kv_acc;
  int *kv_sem;
  // Work order: the grid is (group_items, chunks, groups); CTA (x, c, g)
  // takes item order[g·group_items + x] (identity when order is NULL),
  // item = (b·H + h)·nkv + kv block. Launched group by group, chunk by
  // chunk, in order within a chunk.
  const int32_t *order;
  int groups, group_items;
  // Ablation for profiling only (VSALAB_ABLATE=no_dq_reduce, see
  // vsa_bwd::ablate): the producer skips every dQ reduce, so
  // dq is wrong and only the timing means anything.
  int skip_dq_reduce;
  // v5 only (block 128): the 128-token k2q lists, [B·H, nkv/2, width] and
  // [B·H, nkv/2]; nq, nkv, vbs and the work order are the 64-token view's.
  struct {
    const int32_t *idx, *num;
    int width;
  } list128;
};

/* Launch the v3 main kernel over (group_items, chunks, groups); p's tensor
 * maps are built (sm90_tile_maps in the launcher). */
cudaError_t sm90_ws_launch(const sm90_ws_params &p, cudaStream_t stream);

/* The same for v4 (bsa_bwd_kv2_sm90a.cu): items are pairs of kv blocks
 * (2p, 2p+1) of a head, ⌈nkv / 2⌉ a head, item = (b·H + h)·⌈nkv/2⌉ + p;
 * the grid is (group_items, chunks, groups) over such items. */
cudaError_t sm90_kv2_launch(const sm90_ws_params &p, cudaStream_t stream);

/* The same for v5 (bsa_bwd_b128_sm90a.cu, block 128): items are 128-token
 * kv blocks J, which v4's pair items (2J, 2J+1) number the same way;
 * p.q_chunk must be even (it counts 64-token q blocks). */
cudaError_t sm90_b128_launch(const sm90_ws_params &p, cudaStream_t stream);

#ifdef __CUDACC__
#include "sm90_bwd_pair.cuh"

/* Both launch functions: opt in to `smem` bytes of shared memory once
 * (configured), then launch the fp32 or the fixed-point (p.row_exp) kernel
 * over (group_items, chunks, groups). fixed_overlaps: the fixed-point
 * kernel is a programmatic dependent launch of the row-exponent kernel
 * before it (its consumers run griddepcontrol.wait before they read
 * row_exp; bwd_prep.cu). */
inline cudaError_t
sm90_launch_main(void (*fp32)(sm90_ws_params), void (*fixed)(sm90_ws_params), int threads,
                 uint32_t smem, bool &configured, const sm90_ws_params &p, cudaStream_t stream,
                 bool fixed_overlaps = false)
{
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(fp32, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(fixed, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  dim3 grid(p.group_items, p.chunks, p.groups);
  if (!p.row_exp || !fixed_overlaps) {
    (p.row_exp ? fixed : fp32)<<<grid, threads, smem, stream>>>(p);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, fixed, p);
}

/* Producer thread of either kernel: TMA-load the 64 kv tokens from map
 * row kv_row (head coordinate kv_h; vsa_bwd::tma_head) of K and V into two
 * tiles at k and v (sm90bwd::TILE each: two 128B-swizzled 64x64 regions),
 * completing on mbarrier bar (the caller expects the bytes). */
__device__ __forceinline__ void
load_kv_tiles(const sm90_ws_params &p, int kv_h, int kv_row, uint32_t k, uint32_t v,
              uint32_t bar)
{
  using sm90bwd::REGION;
  tma_load_3d(k, &p.tm_k, 0, kv_h, kv_row, bar);
  tma_load_3d(k + REGION, &p.tm_k, 64, kv_h, kv_row, bar);
  tma_load_3d(v, &p.tm_v, 0, kv_h, kv_row, bar);
  tma_load_3d(v + REGION, &p.tm_v, 64, kv_h, kv_row, bar);
}

/* The same for q block i of head bh (its map coordinates qh) into a stage
 * at st (sm90bwd's stage layout: the Q tile, then the dO tile) and its
 * statistics at stats (lse, then Delta, 64 floats each, rows of head bh),
 * on mbarrier full, which this arms for both. */
__device__ __forceinline__ void
load_q_stage(const sm90_ws_params &p, int64_t bh, vsa_bwd::head_coord qh, int i, uint32_t st,
             uint32_t stats, uint32_t full)
{
  using namespace sm90bwd;
  const int64_t q_row0 = bh * ((int64_t)p.nq * BLK) + (int64_t)i * BLK;
  const int tr = qh.row + i * BLK; // the tokens' map row
  mbar_arrive_expect_tx(full, STAGE_BYTES + STATS_BYTES);
  tma_load_3d(st, &p.tm_q, 0, qh.h, tr, full);
  tma_load_3d(st + REGION, &p.tm_q, 64, qh.h, tr, full);
  tma_load_3d(st + TILE, &p.tm_do, 0, qh.h, tr, full);
  tma_load_3d(st + TILE + REGION, &p.tm_do, 64, qh.h, tr, full);
  bulk_load(stats, p.lse + q_row0, BLK * sizeof(float), full);
  bulk_load(stats + BLK * sizeof(float), p.delta + q_row0, BLK * sizeof(float), full);
}

/* Producer thread of either kernel: add the dQ partial staged (fp32
 * swizzled rows, or int32 fixed point) at shared address `stage` into q
 * block i's accumulator rows of head bh; returns once the copy engine has
 * read the stage, so it may be refilled. */
template <bool FIXED>
__device__ __forceinline__ void
reduce_dq(const sm90_ws_params &p, int64_t bh, int i, uint32_t stage)
{
  using sm90bwd::BLK;
  using sm90bwd::D;
  if (p.skip_dq_reduce) return;
  float *dqa = p.dq_accum + (bh * ((int64_t)p.nq * BLK) + (int64_t)i * BLK) * D;
  if (FIXED) bulk_reduce_add_u32(reinterpret_cast<uint32_t *>(dqa), stage, BLK * D * sizeof(float));
  else bulk_reduce_add_f32(dqa, stage, BLK * D * sizeof(float));
  bulk_wait_read();
}
#endif
