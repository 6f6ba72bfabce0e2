/* sm90_bwd_ws.h — between the sm_90a backward's launcher (bsa_bwd_sm90a.cu)
 * and its warp-specialized main kernels (bsa_bwd_ws_sm90a.cu, v3;
 * bsa_bwd_kv2_sm90a.cu, v4). */
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* What every sm_90a main kernel takes: statistics, lists, shapes, the fp32
 * dQ accumulator and the dK/dV outputs. */
struct sm90_bwd_common {
  const float *lse, *delta;
  const int32_t *k2q_idx, *k2q_num, *vbs;
  int k2q_width, H, nq, nkv;
  float sm_scale, scale_log2;
  float *dq_accum;
  __nv_bfloat16 *dk, *dv;
};

struct sm90_ws_params : sm90_bwd_common {
  CUtensorMap tm_q, tm_do, tm_k, tm_v; // filled by sm90_ws_launch
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
  // vsa_bwd::ablate_no_dq_reduce): the producer skips every dQ reduce, so
  // dq is wrong and only the timing means anything.
  int skip_dq_reduce;
};

/* Build the tensor maps of q, k, v, dO ([B*H*S, 128] bf16 rows) and launch
 * the main kernel over (group_items, chunks, groups). */
cudaError_t sm90_ws_launch(sm90_ws_params &p, const void *q, const void *k, const void *v,
                           const void *dO, int B, int64_t Sq, int64_t Skv, cudaStream_t stream);

/* The same for v4 (bsa_bwd_kv2_sm90a.cu): items are pairs of kv blocks
 * (2p, 2p+1) of a head, ⌈nkv / 2⌉ a head, item = (b·H + h)·⌈nkv/2⌉ + p;
 * the grid is (group_items, chunks, groups) over such items. */
cudaError_t sm90_kv2_launch(sm90_ws_params &p, const void *q, const void *k, const void *v,
                            const void *dO, int B, int64_t Sq, int64_t Skv, cudaStream_t stream);
