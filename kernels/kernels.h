/* kernels.h — every CUDA launcher vsalab has, with C linkage.
 *
 * Launchers never print or exit: each returns the cudaError_t of its launch
 * (cudaGetLastError after the <<<>>>), and runs on the given stream. Shapes
 * and list conventions are those of src/core/bsa.h. Pointers are device pointers
 * (d_ prefix); every tensor is contiguous row-major.
 *
 * Token layouts (vsa_shape.layout, src/core/bsa.h): q, k, v, o, dO and the
 * outputs o (forward), dq, dk, dv are [B, H, S, D] (VSA_BHSD, 0) or
 * [B, S, H, D] (VSA_BSHD, 1), read and written in place (no copy); lse,
 * Delta, the lists, vbs and every scratch buffer are [B, H, ...] in both.
 * Each attention launcher below returns cudaErrorInvalidValue for any
 * other layout value. The element-wise helpers (fill, convert, compare,
 * strided copy) and the list inversion do not depend on the layout.
 */
#ifndef VSA_KERNELS_H
#define VSA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "bsa.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * tensor_ops.cu: elementwise helpers behind the tensor core.
 */

/* d[0:n] = value converted to dtype. */
cudaError_t vsa_fill(void *d, vsa_dtype dtype, int64_t n, double value,
                     cudaStream_t stream);
/* d_dst[0:n] (dst_dtype) = d_src[0:n] (src_dtype) converted; see
 * vsa_tensor_convert for the rounding rules. */
cudaError_t vsa_convert(void *d_dst, vsa_dtype dst_dtype, const void *d_src,
                        vsa_dtype src_dtype, int64_t n, cudaStream_t stream);
/* Gather a strided view (ndim <= VSA_MAX_DIMS, strides in elements) into a
 * contiguous buffer; elem_size in {2, 4, 8}. */
cudaError_t vsa_strided_copy(void *d_dst, const void *d_src, int elem_size,
                             int ndim, const int64_t *shape,
                             const int64_t *stride, cudaStream_t stream);
/* Keep the GPU busy for about ns nanoseconds (a deliberate slowdown for
 * testing regression verdicts). */
cudaError_t vsa_gpu_sleep(long long ns, cudaStream_t stream);
/* Enqueue a one-thread kernel that holds stream until the host stores a
 * non-zero int to flag[0] (flag: pinned host memory mapped into the device,
 * two ints); if timeout_s seconds pass first it stores 1 to flag[1] and
 * returns. Used by the benchmark loop so a sample's launches are all queued
 * before its start event fires. */
cudaError_t vsa_hold_stream(int *flag, double timeout_s, cudaStream_t stream);
/* Launch a kernel that stores to an unmapped address: an illegal-address
 * fault that poisons the context (fault-injection for robustness tests). */
cudaError_t vsa_gpu_fault(cudaStream_t stream);
/* Accumulate comparison sums of x against ref (n elements each, any float
 * dtypes) into *d_sums, which the caller zeroes first. */
cudaError_t vsa_compare(const void *d_x, vsa_dtype x_dtype, const void *d_ref,
                        vsa_dtype ref_dtype, int64_t n,
                        vsa_compare_sums *d_sums, cudaStream_t stream);

/* ---------------------------------------------------------------------------
 * bsa_invert.cu: q2k -> k2q inversion, deterministic (ascending q order).
 * Two launches, no global atomics: a scatter builds a bitmap of the lists per
 * (bh, group of 32 q blocks) in shared memory and writes it out whole; a
 * gather (one warp per kv row) turns bits into ascending q indices, -1
 * padding and counts. d_scratch (bsa_invert_scratch_bytes) holds the bitmap
 * and one error slot per scatter block and is fully overwritten each call;
 * *d_err receives the first validation failure (code 0 if none). Works the
 * other way round (k2q -> q2k) by swapping nq/nkv.
 */
size_t bsa_invert_scratch_bytes(int BH, int nq, int nkv);
cudaError_t bsa_invert(const int32_t *d_q2k_idx, const int32_t *d_q2k_num,
                       int BH, int nq, int width, int nkv, int32_t *d_k2q_idx,
                       int32_t *d_k2q_num, uint32_t *d_scratch,
                       vsa_list_error *d_err, int H, cudaStream_t stream);

/* ---------------------------------------------------------------------------
 * bsa_ref.cu: the reference forward/backward on the GPU: fp32 arithmetic
 * from bf16 inputs, SIMT tiles in shared memory, deterministic. Outputs f32
 * (o, dq, dk, dv in s->layout; lse, Delta [B, H, Sq]). Both layouts.
 */
cudaError_t bsa_forward_ref(const vsa_shape *s, const uint16_t *d_q,
                            const uint16_t *d_k, const uint16_t *d_v,
                            const int32_t *d_q2k_idx, const int32_t *d_q2k_num,
                            int q2k_width, const int32_t *d_vbs, float *d_o,
                            float *d_lse, cudaStream_t stream);

cudaError_t bsa_backward_ref(const vsa_shape *s, const uint16_t *d_dO,
                             const uint16_t *d_q, const uint16_t *d_k,
                             const uint16_t *d_v, const uint16_t *d_o,
                             const float *d_lse, const int32_t *d_k2q_idx,
                             const int32_t *d_k2q_num, int k2q_width,
                             const int32_t *d_q2k_idx,
                             const int32_t *d_q2k_num, int q2k_width,
                             const int32_t *d_vbs, float *d_dq, float *d_dk,
                             float *d_dv, float *d_delta, cudaStream_t stream);

/* ---------------------------------------------------------------------------
 * sm90/bsa_bwd_sm90a.cu: the native Hopper backward (wgmma; sm_90a only, D =
 * 128). Same contract as bsa_backward_ref with bf16 outputs; d_scratch
 * holds the fp32 dQ accumulator, Delta, the deterministic mode's row
 * exponents, the work order and the q-chunk partials
 * (bsa_backward_sm90a_scratch_bytes). variant picks the main kernel:
 *   VSA_SM90A_B128   v5, block 128 only: 128-row tiles, one CTA a 128-token
 *                    kv block, each 128-token q block loaded once and its
 *                    two dQ halves reduced once (128 x 128 pairs)
 *   VSA_SM90A_KV2    v4: as v3 with two kv blocks a CTA sharing each q
 *                    block both select (one load, one dQ reduce)
 *   VSA_SM90A_WS     v3: warp-specialized, TMA + mbarrier producer (default)
 *   VSA_SM90A_BULK   v2: one warpgroup, cp.async, one bulk dQ reduce per pair
 *   VSA_SM90A_ATOMIC v1: as v2 with dQ by vector atomics
 * deterministic (v3, v4, v5): dQ partials added as int32 fixed point
 * (exact in any order: the same bits every run; common/bwd_prep.h has the
 * bound), else fp32 in arrival order. Every variant takes both layouts
 * (s->layout): v3/v4/v5 through 3D TMA maps (column, head, row), v1/v2
 * through strided cp.async rows; dq, dk, dv come out in the layout.
 * q_chunk (v3, v4, v5): 64-token q blocks per
 * chunk of the q range (0: all): a kv block's pairs are taken one chunk at
 * a time, chunk-major, so that the Q/dO/dQ working set of the CTAs running
 * at once stays in L2 at long sequences; dK/dV partials pass between a kv
 * block's chunks in chunk order (deterministic). Returns
 * cudaErrorInvalidValue for shapes or options it does not take (s->block
 * other than 64 and 128 among them, and v5 at block 64; s->layout other
 * than BHSD and BSHD; B·H·S of 2^31 rows or more). At block 128, v3 (the
 * default) means v5, and v4 runs on 64-token sub-block lists.
 */
typedef enum {
  VSA_SM90A_ATOMIC = 0,
  VSA_SM90A_BULK = 1,
  VSA_SM90A_WS = 2,
  VSA_SM90A_KV2 = 3,
  VSA_SM90A_B128 = 4
} vsa_sm90a_variant;
size_t bsa_backward_sm90a_scratch_bytes(const vsa_shape *s, int q_chunk);
cudaError_t bsa_backward_sm90a(const vsa_shape *s, const uint16_t *d_dO,
                               const uint16_t *d_q, const uint16_t *d_k,
                               const uint16_t *d_v, const uint16_t *d_o,
                               const float *d_lse, const int32_t *d_k2q_idx,
                               const int32_t *d_k2q_num, int k2q_width,
                               const int32_t *d_vbs, void *d_scratch,
                               uint16_t *d_dq, uint16_t *d_dk, uint16_t *d_dv,
                               vsa_sm90a_variant variant, int deterministic, int q_chunk,
                               cudaStream_t stream);

/* ---------------------------------------------------------------------------
 * sm100/bsa_bwd_sm100a.cu: the native Blackwell backward (tcgen05, tensor
 * memory; sm_100a, sm_100f, sm_103a; D = 128). Same contract as
 * bsa_backward_sm90a. No Blackwell GPU is available to this project: this
 * is compiled and SASS-checked, never run. The *_emu functions are the same
 * kernel built for sm_90a over an emulated tcgen05 layer
 * (sm100/tcgen05_emu.cuh), which runs on an H200.
 * deterministic: dQ partials added as int32 fixed point (exact, any order;
 * common/bwd_prep.h has the bound), else fp32 in arrival order. q_chunk as
 * sm90a. sm_count: the persistent grid (CTAs; the device's SM count). The
 * scratch (bsa_backward_sm100a[_emu]_scratch_bytes, 256-byte aligned)
 * holds the dQ accumulator, Delta, the fixed-point exponents, the work
 * order, counters, the q-chunk partials and (emulated) the tensor memory.
 * has_image: 1 when a kernel image for the current device exists
 * (cudaFuncGetAttributes), 0 otherwise. Returns cudaErrorInvalidValue for
 * shapes it does not take (D != 128, S not a multiple of the block, 2^31
 * rows, a layout other than BHSD/BSHD). Both layouts at both block
 * sizes (3D TMA maps for the loads, dk/dv and dq stored in the layout). At
 * block 128 (s->block) the native 128-token kernel runs
 * (sm100/bsa_bwd_b128_sm100a.cu; lists and vbs of 128-token blocks;
 * q_chunk still counts 64-token q blocks).
 */
size_t bsa_backward_sm100a_scratch_bytes(const vsa_shape *s, int q_chunk, int sm_count);
/* Shared memory a CTA of it takes (the emulated build: with the emulation's
 * static state): the device's opt-in limit must be as large. */
size_t bsa_backward_sm100a_smem_bytes(void);
size_t bsa_backward_sm100a_smem_bytes_emu(void);
int bsa_backward_sm100a_has_image(void);
cudaError_t bsa_backward_sm100a(const vsa_shape *s, const uint16_t *d_dO, const uint16_t *d_q,
                                const uint16_t *d_k, const uint16_t *d_v, const uint16_t *d_o,
                                const float *d_lse, const int32_t *d_k2q_idx,
                                const int32_t *d_k2q_num, int k2q_width,
                                const int32_t *d_vbs, void *d_scratch, uint16_t *d_dq,
                                uint16_t *d_dk, uint16_t *d_dv, int deterministic,
                                int q_chunk, int sm_count, cudaStream_t stream);
size_t bsa_backward_sm100a_scratch_bytes_emu(const vsa_shape *s, int q_chunk, int sm_count);
int bsa_backward_sm100a_has_image_emu(void);
cudaError_t bsa_backward_sm100a_emu(const vsa_shape *s, const uint16_t *d_dO,
                                    const uint16_t *d_q, const uint16_t *d_k,
                                    const uint16_t *d_v, const uint16_t *d_o,
                                    const float *d_lse, const int32_t *d_k2q_idx,
                                    const int32_t *d_k2q_num, int k2q_width,
                                    const int32_t *d_vbs, void *d_scratch, uint16_t *d_dq,
                                    uint16_t *d_dk, uint16_t *d_dv, int deterministic,
                                    int q_chunk, int sm_count, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
