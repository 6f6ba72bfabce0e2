/* bsa_invert.cu — q2k -> k2q block-list inversion on the GPU.
 *
 * Deterministic without sorting: the inverse lists are read off a bitmap
 * [BH, nkv, ceil(nq/32)] u32 in which bit i of kv row j says "q block i
 * selects kv block j"; reading a row word by word yields its q blocks in
 * ascending order whatever order the atomics landed in.
 *
 *   general path (3 stream ops after zeroing d_err):
 *     memset(bitmap, 0);
 *     bsa_invert_scatter_kernel: one warp per (bh, q block), coalesced reads
 *       of the list row, one atomicOr per entry; the returned old word
 *       flags a kv block repeated in the row; counts and indices are
 *       range-checked on the way;
 *     bsa_invert_gather_kernel: one warp per (bh, kv block): popc of 32
 *       words at a time, a warp prefix sum gives each word's output slot,
 *       the q indices are staged in shared memory and written coalesced,
 *       then -1 up to width nq, and k2q_num.
 *   small path (one launch): when every slice's bitmap and counts fit in
 *     48 KB of shared memory and the output is small, a single block does
 *     all of it in shared memory, d_err zeroing included: at these sizes
 *     launch latency is the whole cost.
 *
 * Errors: the first failure to win an atomicCAS on d_err->code is recorded
 * (any one real error; not necessarily the smallest (bh, row)); b = bh / H,
 * h = bh % H. Rows with a bad count contribute nothing, bad indices are
 * skipped, so the outputs stay in bounds whatever the input holds.
 *
 * Build: nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a
 *   -gencode=arch=compute_100a,code=sm_100a
 *   -gencode=arch=compute_80,code=compute_80 -Xptxas -v -c
 *   kernels/bsa_invert.cu -I src -o /tmp/bsa_invert.o
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

#define INV_WARPS 8         /* warps per block, general path */
#define INV_CHUNK 32        /* bitmap words per warp step (1024 q blocks) */
#define INV_SMALL_THREADS 1024
#define INV_SMALL_SMEM (48 * 1024)
/* Small path limits: one SM writes the whole output, so keep it short. */
#define INV_SMALL_MAX_OUT (128 * 1024)    /* k2q_idx entries */
#define INV_SMALL_MAX_IN (64 * 1024)      /* q2k_idx entries (rows x width) */

// ----------------------------------------------------------------------------
// Shared device helpers

__device__ __forceinline__ void
record_error(vsa_list_error *err, int code, int64_t bh, int row, int value,
             int H)
{
  /* One winner writes the whole record, so its fields belong together. */
  if (atomicCAS(&err->code, 0, code) == 0) {
    err->b = (int32_t)(bh / H);
    err->h = (int32_t)(bh % H);
    err->row = row;
    err->value = value;
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
// General path

/* One warp per (bh, q block) row; rows = BH * nq. Bitmap pre-zeroed. */
__global__ void __launch_bounds__(INV_WARPS * 32)
bsa_invert_scatter_kernel(const int32_t *__restrict__ q2k_idx,
                          const int32_t *__restrict__ q2k_num, int64_t rows,
                          int nq, int width, int nkv, int wpr,
                          uint32_t *__restrict__ bitmap, vsa_list_error *err,
                          int H)
{
  int64_t r = (int64_t)blockIdx.x * INV_WARPS + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  int64_t bh = r / nq;
  int i = (int)(r - bh * nq);
  int count = __ldg(q2k_num + r);
  if (count < 0 || count > width) {
    if (lane == 0) record_error(err, VSA_LIST_COUNT_RANGE, bh, i, count, H);
    return;
  }
  const int32_t *row = q2k_idx + r * width;
  uint32_t *col = bitmap + bh * nkv * wpr + (i >> 5);
  uint32_t bit = 1u << (i & 31);
  /* Four loads in flight before their atomics: latency, not bandwidth,
   * bounds a warp here. */
  for (int e0 = 0; e0 < count; e0 += 128) {
    int j[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      int e = e0 + u * 32 + lane;
      j[u] = e < count ? __ldg(row + e) : 0;
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
      if (e0 + u * 32 + lane >= count) continue;
      if (j[u] < 0 || j[u] >= nkv) {
        record_error(err, VSA_LIST_INDEX_RANGE, bh, i, j[u], H);
        continue;
      }
      uint32_t old = atomicOr(col + (int64_t)j[u] * wpr, bit);
      if (old & bit) record_error(err, VSA_LIST_REPEATED, bh, i, j[u], H);
    }
  }
}

/* One warp per (bh, kv block) row; rows = BH * nkv. */
__global__ void __launch_bounds__(INV_WARPS * 32)
bsa_invert_gather_kernel(const uint32_t *__restrict__ bitmap, int64_t rows,
                         int nq, int wpr, int32_t *__restrict__ k2q_idx,
                         int32_t *__restrict__ k2q_num)
{
  __shared__ int32_t stage[INV_WARPS][INV_CHUNK * 32];
  int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t r = (int64_t)blockIdx.x * INV_WARPS + w;
  if (r >= rows) return; /* whole warps leave; only __syncwarp below */
  const uint32_t *bm = bitmap + r * wpr;
  int32_t *out = k2q_idx + r * nq;
  int32_t *st = stage[w];
  int base = 0;
  for (int w0 = 0; w0 < wpr; w0 += INV_CHUNK) {
    int word = w0 + lane;
    uint32_t bits = word < wpr ? __ldg(bm + word) : 0u;
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
// Small path: one block, everything in shared memory

/* Shared memory: counts [BH*nq] i32, then bitmap [BH*nkv*wpr] u32. */
__global__ void __launch_bounds__(INV_SMALL_THREADS)
bsa_invert_small_kernel(const int32_t *__restrict__ q2k_idx,
                        const int32_t *__restrict__ q2k_num, int BH, int nq,
                        int width, int nkv, int wpr,
                        int32_t *__restrict__ k2q_idx,
                        int32_t *__restrict__ k2q_num, vsa_list_error *err,
                        int H)
{
  extern __shared__ uint32_t smem[];
  int32_t *cnt = (int32_t *)smem;
  uint32_t *bm = smem + BH * nq;
  int tid = threadIdx.x, nt = blockDim.x;
  int nrows = BH * nq, nwords = BH * nkv * wpr;

  /* This block is the only one, so it may zero d_err itself. */
  if (tid == 0) {
    err->code = 0;
    err->b = err->h = err->row = err->value = 0;
  }
  for (int t = tid; t < nwords; t += nt) bm[t] = 0;
  for (int t = tid; t < nrows; t += nt) {
    int c = __ldg(q2k_num + t);
    cnt[t] = c;
  }
  __syncthreads();
  for (int t = tid; t < nrows; t += nt) {
    int c = cnt[t];
    if (c < 0 || c > width) {
      record_error(err, VSA_LIST_COUNT_RANGE, t / nq, t % nq, c, H);
      cnt[t] = 0;
    }
  }
  __syncthreads();

  /* Flat over list slots; slots past a row's count are never loaded. */
  int nslots = nrows * width;
  for (int s = tid; s < nslots; s += nt) {
    int rr = s / width, e = s - rr * width;
    if (e >= cnt[rr]) continue;
    int j = __ldg(q2k_idx + s);
    int bh = rr / nq, i = rr - bh * nq;
    if (j < 0 || j >= nkv) {
      record_error(err, VSA_LIST_INDEX_RANGE, bh, i, j, H);
      continue;
    }
    uint32_t bit = 1u << (i & 31);
    uint32_t old = atomicOr(bm + (bh * nkv + j) * wpr + (i >> 5), bit);
    if (old & bit) record_error(err, VSA_LIST_REPEATED, bh, i, j, H);
  }
  __syncthreads();

  /* One warp per kv row; indices written straight from the bits. */
  int warp = tid >> 5, lane = tid & 31, nwarps = nt >> 5;
  for (int r = warp; r < BH * nkv; r += nwarps) {
    const uint32_t *row = bm + r * wpr;
    int32_t *out = k2q_idx + (int64_t)r * nq;
    int base = 0;
    for (int w0 = 0; w0 < wpr; w0 += 32) {
      int word = w0 + lane;
      uint32_t bits = word < wpr ? row[word] : 0u;
      int c = __popc(bits);
      int incl = warp_scan(c, lane);
      int pos = base + incl - c;
      while (bits) {
        out[pos++] = (word << 5) + __ffs(bits) - 1;
        bits &= bits - 1;
      }
      base += __shfl_sync(0xffffffffu, incl, 31);
    }
    for (int t = base + lane; t < nq; t += 32) out[t] = -1;
    if (lane == 0) k2q_num[r] = base;
  }
}

// ----------------------------------------------------------------------------
// Launchers

static int
words_per_row(int nq)
{
  return (nq + 31) / 32;
}

extern "C" size_t
bsa_invert_scratch_bytes(int BH, int nq, int nkv)
{
  if (BH <= 0 || nq <= 0 || nkv <= 0) return 0;
  return (size_t)BH * (size_t)nkv * (size_t)words_per_row(nq) *
         sizeof(uint32_t);
}

/* Shared bytes the small path needs, or 0 when it does not apply. */
static size_t
small_path_smem(int BH, int nq, int width, int nkv)
{
  int64_t wpr = words_per_row(nq);
  int64_t words = (int64_t)BH * nq + (int64_t)BH * nkv * wpr;
  if (words * 4 > INV_SMALL_SMEM) return 0;
  if ((int64_t)BH * nkv * nq > INV_SMALL_MAX_OUT) return 0;
  if ((int64_t)BH * nq * width > INV_SMALL_MAX_IN) return 0;
  return (size_t)words * 4;
}

static cudaError_t
invert_general(const int32_t *d_q2k_idx, const int32_t *d_q2k_num, int BH,
               int nq, int width, int nkv, int32_t *d_k2q_idx,
               int32_t *d_k2q_num, uint32_t *d_scratch, vsa_list_error *d_err,
               int H, cudaStream_t stream)
{
  if (!d_scratch) return cudaErrorInvalidValue;
  int wpr = words_per_row(nq);
  cudaError_t e = cudaMemsetAsync(d_err, 0, sizeof *d_err, stream);
  if (e != cudaSuccess) return e;
  e = cudaMemsetAsync(d_scratch, 0, bsa_invert_scratch_bytes(BH, nq, nkv),
                      stream);
  if (e != cudaSuccess) return e;
  int64_t qrows = (int64_t)BH * nq, krows = (int64_t)BH * nkv;
  unsigned gq = (unsigned)((qrows + INV_WARPS - 1) / INV_WARPS);
  unsigned gk = (unsigned)((krows + INV_WARPS - 1) / INV_WARPS);
  bsa_invert_scatter_kernel<<<gq, INV_WARPS * 32, 0, stream>>>(
      d_q2k_idx, d_q2k_num, qrows, nq, width, nkv, wpr, d_scratch, d_err, H);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  bsa_invert_gather_kernel<<<gk, INV_WARPS * 32, 0, stream>>>(
      d_scratch, krows, nq, wpr, d_k2q_idx, d_k2q_num);
  return cudaGetLastError();
}

static cudaError_t
invert_small(const int32_t *d_q2k_idx, const int32_t *d_q2k_num, int BH,
             int nq, int width, int nkv, int32_t *d_k2q_idx,
             int32_t *d_k2q_num, vsa_list_error *d_err, int H, size_t smem,
             cudaStream_t stream)
{
  bsa_invert_small_kernel<<<1, INV_SMALL_THREADS, smem, stream>>>(
      d_q2k_idx, d_q2k_num, BH, nq, width, nkv, words_per_row(nq), d_k2q_idx,
      d_k2q_num, d_err, H);
  return cudaGetLastError();
}

/* Layouts: q2k_idx [BH, nq, width], q2k_num [BH, nq]; k2q_idx [BH, nkv, nq],
 * k2q_num [BH, nkv]; scratch bsa_invert_scratch_bytes(BH, nq, nkv) bytes
 * (unused by the small path, but always required). */
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
  size_t smem = small_path_smem(BH, nq, width, nkv);
  if (smem)
    return invert_small(d_q2k_idx, d_q2k_num, BH, nq, width, nkv, d_k2q_idx,
                        d_k2q_num, d_err, H, smem, stream);
  return invert_general(d_q2k_idx, d_q2k_num, BH, nq, width, nkv, d_k2q_idx,
                        d_k2q_num, d_scratch, d_err, H, stream);
}
