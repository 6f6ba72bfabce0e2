/* bsa_invert.cu — q2k -> k2q block-list inversion on the GPU.
 *
 * Deterministic without sorting: the inverse lists are read off a bitmap
 * in which bit i says "q block i selects kv block j"; reading a kv row's
 * words in order yields its q blocks in ascending order, whatever order the
 * bits were set in. Two launches, no memset, no global atomics:
 *
 *   bsa_invert_scatter_kernel: one block per (bh, group of 32 q blocks, kv
 *     chunk of up to 8192). Each warp streams 4 of the group's list rows
 *     (coalesced; slots past a row's count are never read) and sets bit
 *     i%32 of a shared word per kv block with a shared-memory atomicOr (the
 *     old word flags a repeated index); the block then writes its column of
 *     words to bitmap[bh][group][kv], coalesced. Every bitmap word is
 *     written, so nothing needs zeroing. The block's first validation
 *     failure goes to its own error slot (code 0 if none).
 *   bsa_invert_gather_kernel: one warp per (bh, kv block): popc of 32 words
 *     at a time, a warp prefix sum gives each word's output slot, the q
 *     indices are staged in shared memory and written coalesced, then -1 up
 *     to width nq, and k2q_num. Block 0 first folds the error slots into
 *     *d_err: the failure of the lowest (bh, q group) wins, code 0 if none.
 *
 * Scratch: bitmap [BH, ceil(nq/32), nkv] u32, then one vsa_list_error per
 * scatter block. Both are fully overwritten on every call.
 *
 * Errors: count and index-range faults are reported by the kv chunk 0
 * block of a group; repeats by the block owning that kv block. Rows with a
 * bad count contribute nothing and bad indices are skipped, so the outputs
 * stay in bounds whatever the input holds. b = bh / H, h = bh % H.
 *
 * Measured on an H200 (events around single calls, median of 200; lists
 * from vsa_build_random_topk, q2k width = count; spread over 5 runs):
 *   B1 H8, 64 x 64 blocks, 16 per row: 12-15 us (8-11 us per call back to
 *     back): launch latency of the two kernels is all of it;
 *   B1 H40, 1440 x 1440 blocks, 360 per row: 143-147 us = scatter 39-43 us
 *     (83 MB of lists) + gather 104-106 us (332 MB of k2q_idx at 3.1 TB/s;
 *     a plain memset of those bytes takes 79-84 us).
 *
 * Build: nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a
 *   -gencode=arch=compute_100a,code=sm_100a
 *   -gencode=arch=compute_80,code=compute_80 -Xptxas -v -c
 *   kernels/bsa_invert.cu -I src -o /tmp/bsa_invert.o
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "../kernels.h"

#define SC_THREADS 256
#define SC_KV_CHUNK 8192 /* 32 KB of shared words per scatter block */
#define SC_UNROLL 12     /* list loads in flight per lane */
#define GA_WARPS 8
#define GA_CHUNK 32      /* bitmap words per warp step (1024 q blocks) */

// ----------------------------------------------------------------------------
// Device helpers

/* Keep the block's first failure (shared memory); one winner writes. */
__device__ __forceinline__ void
note_error(int *s_code, int *s_row, int *s_value, int code, int row,
           int value)
{
  if (atomicCAS(s_code, 0, code) == 0) {
    *s_row = row;
    *s_value = value;
  }
}

/* Inclusive warp prefix sum. */
__device__ __forceinline__ int
warp_scan(int v, int lane)
{
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    int t = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += t;
  }
  return v;
}

// ----------------------------------------------------------------------------
// CUDA kernels

/* Grid: BH * wpr * nchunks blocks, chunk fastest. */
__global__ void __launch_bounds__(SC_THREADS)
bsa_invert_scatter_kernel(const int32_t *__restrict__ q2k_idx,
                          const int32_t *__restrict__ q2k_num, int nq,
                          int width, int nkv, int wpr, int nchunks, int H,
                          uint32_t *__restrict__ bitmap,
                          vsa_list_error *__restrict__ slots)
{
  extern __shared__ uint32_t col[]; /* [min(nkv, SC_KV_CHUNK)] */
  __shared__ int cnt[32];
  __shared__ int s_code, s_row, s_value;

  const int64_t blk = blockIdx.x;
  const int chunk = (int)(blk % nchunks);
  const int64_t bg = blk / nchunks; /* bh * wpr + g */
  const int g = (int)(bg % wpr);
  const int64_t bh = bg / wpr;
  const int k0 = chunk * SC_KV_CHUNK;
  const int kc = nkv - k0 < SC_KV_CHUNK ? nkv - k0 : SC_KV_CHUNK;
  const int i0 = g * 32, nrows = nq - i0 < 32 ? nq - i0 : 32;
  const int tid = threadIdx.x;

  for (int x = tid; x < kc; x += SC_THREADS) col[x] = 0;
  if (tid == 0) s_code = 0;
  if (tid < 32)
    cnt[tid] = tid < nrows ? __ldg(q2k_num + bh * nq + i0 + tid) : 0;
  __syncthreads();
  if (tid < nrows) {
    int c = cnt[tid];
    if (c < 0 || c > width) {
      if (chunk == 0)
        note_error(&s_code, &s_row, &s_value, VSA_LIST_COUNT_RANGE, i0 + tid,
                   c);
      cnt[tid] = 0; /* a bad row contributes nothing */
    }
  }
  __syncthreads();

  /* Warp w owns rows 4w .. 4w+3 of the group. A row's live prefix is read
   * in one batch of up to 32 * SC_UNROLL loads issued back to back (slots
   * past the count are never read), then its bits are set. */
  const int w = tid >> 5, lane = tid & 31;
  for (int row = w * 4; row < w * 4 + 4; row++) {
    const int c = cnt[row];
    if (c == 0) continue; /* also every row past nq in the last group */
    const int32_t *rp = q2k_idx + (bh * nq + i0 + row) * (int64_t)width;
    const uint32_t bit = 1u << row;
    for (int e0 = lane; e0 < c; e0 += 32 * SC_UNROLL) {
      int j[SC_UNROLL];
#pragma unroll
      for (int u = 0; u < SC_UNROLL; u++)
        j[u] = e0 + u * 32 < c ? __ldg(rp + e0 + u * 32) : 0;
#pragma unroll
      for (int u = 0; u < SC_UNROLL; u++) {
        if (e0 + u * 32 >= c) break;
        if (j[u] < 0 || j[u] >= nkv) {
          if (chunk == 0)
            note_error(&s_code, &s_row, &s_value, VSA_LIST_INDEX_RANGE,
                       i0 + row, j[u]);
          continue;
        }
        unsigned jj = (unsigned)(j[u] - k0);
        if (jj >= (unsigned)kc) continue; /* another chunk's kv block */
        uint32_t old = atomicOr(&col[jj], bit);
        if (old & bit)
          note_error(&s_code, &s_row, &s_value, VSA_LIST_REPEATED, i0 + row,
                     j[u]);
      }
    }
  }
  __syncthreads();

  uint32_t *dst = bitmap + bg * nkv + k0;
  for (int x = tid; x < kc; x += SC_THREADS) dst[x] = col[x];
  if (tid == 0) {
    vsa_list_error *e = slots + blk;
    e->code = s_code;
    if (s_code) {
      e->b = (int32_t)(bh / H);
      e->h = (int32_t)(bh % H);
      e->row = s_row;
      e->value = s_value;
    }
  }
}

/* Grid: ceil(BH * nkv / GA_WARPS) blocks; one warp per kv row. */
__global__ void __launch_bounds__(GA_WARPS * 32)
bsa_invert_gather_kernel(const uint32_t *__restrict__ bitmap, int nq,
                         int nkv, int wpr, int64_t krows,
                         const vsa_list_error *__restrict__ slots,
                         int64_t nslots, int32_t *__restrict__ k2q_idx,
                         int32_t *__restrict__ k2q_num, vsa_list_error *err)
{
  __shared__ int32_t stage[GA_WARPS][GA_CHUNK * 32];
  __shared__ unsigned long long s_first;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (blockIdx.x == 0) {
    /* Fold the scatter blocks' error slots: lowest slot index wins. */
    if (threadIdx.x == 0) s_first = ~0ull;
    __syncthreads();
    for (int64_t x = threadIdx.x; x < nslots; x += GA_WARPS * 32)
      if (slots[x].code != 0) atomicMin(&s_first, (unsigned long long)x);
    __syncthreads();
    if (threadIdx.x == 0) {
      if (s_first == ~0ull) {
        err->code = 0;
        err->b = err->h = err->row = err->value = 0;
      } else {
        *err = slots[s_first];
      }
    }
  }

  const int64_t r = (int64_t)blockIdx.x * GA_WARPS + w;
  if (r >= krows) return; /* whole warps leave; only __syncwarp below */
  const int64_t bh = r / nkv;
  const int j = (int)(r - bh * nkv);
  const uint32_t *bm = bitmap + bh * wpr * (int64_t)nkv + j;
  int32_t *out = k2q_idx + r * nq;
  int32_t *st = stage[w];
  int base = 0;
  /* The next step's words are loaded before this step's are used, so a
   * warp waits on one load latency, not one per step. */
  uint32_t next = lane < wpr ? __ldg(bm + (int64_t)lane * nkv) : 0u;
  for (int w0 = 0; w0 < wpr; w0 += GA_CHUNK) {
    int word = w0 + lane;
    uint32_t bits = next;
    int ahead = word + GA_CHUNK;
    next = ahead < wpr ? __ldg(bm + (int64_t)ahead * nkv) : 0u;
    int c = __popc(bits);
    int incl = warp_scan(c, lane);
    int total = __shfl_sync(0xffffffffu, incl, 31);
    int pos = incl - c;
    while (bits) {
      st[pos++] = (word << 5) + __ffs(bits) - 1;
      bits &= bits - 1;
    }
    __syncwarp();
    for (int t = lane; t < total; t += 32) out[base + t] = st[t];
    __syncwarp();
    base += total;
  }
  for (int t = base + lane; t < nq; t += 32) out[t] = -1;
  if (lane == 0) k2q_num[r] = base;
}

// ----------------------------------------------------------------------------
// Kernel launchers

static int
words_per_row(int nq)
{
  return (nq + 31) / 32;
}

static int
kv_chunks(int nkv)
{
  return (nkv + SC_KV_CHUNK - 1) / SC_KV_CHUNK;
}

static size_t
bitmap_bytes(int BH, int nq, int nkv)
{
  return (size_t)BH * (size_t)words_per_row(nq) * (size_t)nkv *
         sizeof(uint32_t);
}

extern "C" size_t
bsa_invert_scratch_bytes(int BH, int nq, int nkv)
{
  if (BH <= 0 || nq <= 0 || nkv <= 0) return 0;
  size_t nslots =
      (size_t)BH * (size_t)words_per_row(nq) * (size_t)kv_chunks(nkv);
  return bitmap_bytes(BH, nq, nkv) + nslots * sizeof(vsa_list_error);
}

/* Layouts: q2k_idx [BH, nq, width], q2k_num [BH, nq]; k2q_idx [BH, nkv, nq],
 * k2q_num [BH, nkv]; d_scratch bsa_invert_scratch_bytes(BH, nq, nkv) bytes,
 * 4-byte aligned, any contents. */
extern "C" cudaError_t
bsa_invert(const int32_t *d_q2k_idx, const int32_t *d_q2k_num, int BH,
           int nq, int width, int nkv, int32_t *d_k2q_idx, int32_t *d_k2q_num,
           uint32_t *d_scratch, vsa_list_error *d_err, int H,
           cudaStream_t stream)
{
  if (BH <= 0 || nq <= 0 || nkv <= 0 || width < 0 || H <= 0)
    return cudaErrorInvalidValue;
  if (!d_q2k_idx || !d_q2k_num || !d_k2q_idx || !d_k2q_num || !d_err ||
      !d_scratch)
    return cudaErrorInvalidValue;

  const int wpr = words_per_row(nq), nchunks = kv_chunks(nkv);
  const int64_t nslots = (int64_t)BH * wpr * nchunks;
  const int64_t krows = (int64_t)BH * nkv;
  const int64_t gblocks = (krows + GA_WARPS - 1) / GA_WARPS;
  if (nslots > INT32_MAX || gblocks > INT32_MAX) return cudaErrorInvalidValue;
  uint32_t *bitmap = d_scratch;
  vsa_list_error *slots =
      (vsa_list_error *)((char *)d_scratch + bitmap_bytes(BH, nq, nkv));

  /* Shared words sized to the chunk, so a small nkv leaves room for more
   * blocks per SM. */
  const size_t smem = (size_t)(nkv < SC_KV_CHUNK ? nkv : SC_KV_CHUNK) * 4;
  bsa_invert_scatter_kernel<<<(unsigned)nslots, SC_THREADS, smem, stream>>>(
      d_q2k_idx, d_q2k_num, nq, width, nkv, wpr, nchunks, H, bitmap, slots);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  bsa_invert_gather_kernel<<<(unsigned)gblocks, GA_WARPS * 32, 0, stream>>>(
      bitmap, nq, nkv, wpr, krows, slots, nslots, d_k2q_idx, d_k2q_num,
      d_err);
  return cudaGetLastError();
}
