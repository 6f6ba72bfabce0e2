/* block_expand.cu — k2q lists of 128-token blocks as lists of 64-token
 * sub-blocks, for the native backwards whose main kernels tile 64 rows of
 * q at a time (see block_expand.h).
 *
 * kv block J of 128 tokens is the two 64-token sub-blocks 2J and 2J+1; q
 * block I is 2I and 2I+1. A selected pair (J, I) is the four sub-pairs
 * (2J+a, 2I+b): both sub-blocks of J get the same list, each entry I
 * written as 2I, 2I+1 (ascending lists stay ascending). The variable
 * block size vbs[J] ∈ [0, 128] splits into min(vbs, 64) and
 * clamp(vbs − 64, 0, 64). One warp a (b·h, J) row compacts the row's
 * entries in [0, nq) by ballot, as every main kernel skips the others, and
 * counts are clamped to the width first, as they do: the result is what
 * a 64-token kernel would compute from the 128-token list. A row keeps at
 * most nq entries (a list of distinct q blocks has no more; the op's
 * canonical lists are distinct), so the scratch is sized by nq, not by
 * the caller's width. Plain CUDA:
 * built for every target.
 */
#include "block_expand.h"

namespace vsa_bwd {
namespace {

__global__ void __launch_bounds__(256)
expand_kernel(const int32_t *__restrict__ idx, const int32_t *__restrict__ num, int width,
              int64_t rows, int nkv, int nq, const int32_t *__restrict__ vbs, int32_t *idx64,
              int32_t *num64, int32_t *vbs64)
{
  const int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); // (b·h)·nkv + J
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t bh = row / nkv;
  const int j = (int)(row % nkv);
  if (bh == 0 && lane == 0) {
    const int vb = min(max(vbs[j], 0), 128);
    vbs64[2 * j] = min(vb, 64);
    vbs64[2 * j + 1] = max(vb - 64, 0);
  }
  const int cnt = min(max(num[row], 0), width);
  const int most = min(width, nq); // distinct entries a row can hold: the expanded width / 2
  const int32_t *in = idx + row * width;
  const int64_t out_row = bh * 2 * nkv + 2 * j; // sub-block 2J; 2J+1 follows
  const int64_t w64 = 2 * (int64_t)min(width, nq);
  int32_t *out0 = idx64 + out_row * w64, *out1 = out0 + w64;
  int n = 0;
  for (int e0 = 0; e0 < cnt; e0 += 32) {
    const int e = e0 + lane;
    const int i = e < cnt ? in[e] : -1;
    const bool ok = e < cnt && i >= 0 && i < nq;
    const unsigned mask = __ballot_sync(0xffffffffu, ok);
    const int at = n + __popc(mask & ((1u << lane) - 1));
    if (ok && at < most) {
      out0[2 * at] = out1[2 * at] = 2 * i;
      out0[2 * at + 1] = out1[2 * at + 1] = 2 * i + 1;
    }
    n = min(n + __popc(mask), most);
  }
  // Tails: -1, as the canonical lists have them (no kernel reads them).
  for (int e = 2 * n + lane; e < w64; e += 32) out0[e] = out1[e] = -1;
  if (lane == 0) num64[out_row] = num64[out_row + 1] = 2 * n;
}

__global__ void __launch_bounds__(256)
vbs_split_kernel(const int32_t *__restrict__ vbs, int nkv, int32_t *vbs64)
{
  const int j = blockIdx.x * 256 + threadIdx.x;
  if (j >= nkv) return;
  const int vb = min(max(vbs[j], 0), 128);
  vbs64[2 * j] = min(vb, 64);
  vbs64[2 * j + 1] = max(vb - 64, 0);
}

}  // namespace

cudaError_t
launch_vbs_split(const int32_t *vbs128, int nkv, int32_t *vbs64, cudaStream_t stream)
{
  if (nkv <= 0) return cudaSuccess;
  vbs_split_kernel<<<(nkv + 255) / 256, 256, 0, stream>>>(vbs128, nkv, vbs64);
  return cudaGetLastError();
}

size_t
block_expand_bytes(int64_t BH, int nkv, int nq)
{
  const size_t ints = (size_t)BH * 2 * nkv * 2 * nq + (size_t)BH * 2 * nkv + 2 * (size_t)nkv;
  return (ints * sizeof(int32_t) + 255) & ~(size_t)255;
}

cudaError_t
launch_block_expand(const int32_t *k2q_idx, const int32_t *k2q_num, int width, int64_t BH, int nkv,
                    int nq, const int32_t *vbs, void *scratch, expanded_lists *out,
                    cudaStream_t stream)
{
  int32_t *base = static_cast<int32_t *>(scratch);
  const int most = width < nq ? width : nq;
  out->k2q_idx = base;
  out->k2q_num = base + (size_t)BH * 2 * nkv * 2 * most;
  out->vbs = out->k2q_num + (size_t)BH * 2 * nkv;
  out->width = 2 * most;
  const int64_t rows = BH * nkv;
  if (rows == 0) return cudaSuccess;
  expand_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(
      k2q_idx, k2q_num, width, rows, nkv, nq, vbs, out->k2q_idx, out->k2q_num, out->vbs);
  return cudaGetLastError();
}

}  // namespace vsa_bwd
