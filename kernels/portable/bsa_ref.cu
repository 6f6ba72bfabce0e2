/* bsa_ref.cu — the reference block-sparse (VSA) attention forward/backward on
 * the GPU: fp32 SIMT arithmetic from bf16 inputs, deterministic, no atomics.
 * Same semantics as src/core/bsa_ref_cpu.c (see src/core/bsa.h and tests/CASES.md):
 * keys at slot t >= vbs[j] are masked by selection (their K/V rows are also
 * zeroed in shared memory, so whatever the padded slots hold never reaches a
 * product); list entries past a row's count are never read (out-of-range
 * entries inside the count are skipped rather than faulting); a q row with
 * no valid key gets o = 0, lse = VSA_LSE_EMPTY, dq = 0; kv blocks no q block
 * selects get dk = dv = 0; every output element is written; offsets int64.
 * Layouts (vsa_shape.layout): q, k, v, o, dO and dq, dk, dv are BHSD or
 * BSHD; a kernel finds token t of head bh at vsa_head_offset + t·ld (ld =
 * vsa_token_stride: D or H·D), so a tile's rows are read and written
 * whole either way; lse, Delta and the lists are [B, H, ...] in both.
 *
 * Block sizes: the kernels work on 64-token tiles; a block of s->block
 * tokens (64 or 128) is sub = block/64 consecutive tiles. A CTA owns one
 * tile, reads its block's list, and visits each listed block's tiles in
 * order; tile t of a kv block has min(max(vbs − 64t, 0), 64) valid keys,
 * which is exactly the block's token mask. So one set of kernels serves
 * every block size that is a multiple of 64.
 * Kernels (all 256 threads = a 16×16 grid, ty = tid / 16, tx = tid % 16, so
 * one warp holds two ty rows of 16 lanes each):
 *   bsa_forward_ref_kernel       one CTA per (q tile, h, b), loops over its
 *                                q2k list, online softmax in base 2;
 *   bsa_delta_ref_kernel         Delta = rowsum(dO∘o), one warp per row;
 *   bsa_backward_dkdv_ref_kernel one CTA per (kv block, h, b), loops over
 *                                its k2q list, dk/dv in registers (4 GEMMs);
 *   bsa_backward_dq_ref_kernel   one CTA per (q block, h, b), loops over its
 *                                q2k list recomputing S and dP (3 GEMMs).
 * Tiles live in shared memory as f32 (bf16 -> f32 is exact), row-major with
 * rows padded by 4 floats so float4 reads of 16 different rows are
 * conflict-free. Three micro-GEMM shapes cover every product:
 *   NT  C[64×64] = A·Bᵀ, both row-major over d; thread owns rows ty+16a,
 *       cols tx+16b (a, b in 0..3);
 *   NN  C[64×D] += A[64×64]·B[64×D]; thread owns rows ty+16a, cols
 *       64g + 4tx + {0..3} (g < D/64): one float4 per 64-column group;
 *   TN  C[64×D] += Aᵀ·B, A [64×64] indexed [k][row]; thread owns rows
 *       4ty + {0..3}, cols as NN.
 * Supported D: 64 and 128 (others return cudaErrorInvalidValue before any
 * launch). Shared memory at D = 128: forward 99 KB (2 CTAs/SM), dk/dv
 * 167 KB, dq 149 KB (1 CTA/SM each).
 * Measured on one H200 at Wan 720P (B1 H40 S92160 D128, 720 of 1440 kv
 * blocks per q block): forward 2.54 s = 34 TFLOPS (4·64·64·D per pair),
 * backward 9.37 s = 32.5 TFLOPS (14·64·64·D per pair; dk/dv kernel 34,
 * dq kernel 31, Delta 0.2 ms at H8).
 *
 * Check compile: nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a
 *   -gencode=arch=compute_100a,code=sm_100a
 *   -gencode=arch=compute_80,code=compute_80 -Xptxas -v -lineinfo
 *   -c kernels/bsa_ref.cu -o /tmp/ref.o -I src
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "../kernels.h"

// ---------------------------------------------------------------------------
// Tile geometry and small helpers

#define REF_BLK 64      /* tokens per tile (a block is block/64 tiles) */
#define REF_THREADS 256 /* 16×16 thread grid */
#define REF_LP (REF_BLK + 4) /* padded row of a 64-wide P / dS tile */

static_assert(VSA_BLOCK % REF_BLK == 0 && VSA_BLOCK_MAX % REF_BLK == 0,
              "block sizes must be whole tiles");

/* Padded row length of a 64×D operand tile in shared memory. */
template <int D> struct RefTile {
  static constexpr int LD = D + 4;
  static constexpr int FLOATS = REF_BLK * LD;
  static constexpr int G = D / 64; /* float4 column groups per thread */
};

__device__ __forceinline__ float
bf16_lo(uint32_t w)
{
  return __uint_as_float(w << 16);
}

__device__ __forceinline__ float
bf16_hi(uint32_t w)
{
  return __uint_as_float(w & 0xffff0000u);
}

__device__ __forceinline__ int
clamp_int(int x, int lo, int hi)
{
  return x < lo ? lo : (x > hi ? hi : x);
}

/* Copy a 64×D bf16 tile (global rows of D elements, ld elements apart)
 * into a padded f32 tile. Rows >= nvalid are written as zeros: padded key
 * slots contribute exact zeros whatever the tensor holds there (Inf and
 * NaN included). */
template <int D>
__device__ __forceinline__ void
load_tile(float *dst, const uint16_t *__restrict__ src, int ld, int nvalid)
{
  constexpr int LD = RefTile<D>::LD, CHUNKS = D / 8; /* 16-byte chunks */
  for (int idx = threadIdx.x; idx < REF_BLK * CHUNKS; idx += REF_THREADS) {
    const int r = idx / CHUNKS, c8 = (idx % CHUNKS) * 8;
    uint4 w = make_uint4(0u, 0u, 0u, 0u);
    if (r < nvalid)
      w = __ldg(reinterpret_cast<const uint4 *>(src + (int64_t)r * ld + c8));
    float4 *d = reinterpret_cast<float4 *>(dst + r * LD + c8);
    d[0] = make_float4(bf16_lo(w.x), bf16_hi(w.x), bf16_lo(w.y), bf16_hi(w.y));
    d[1] = make_float4(bf16_lo(w.z), bf16_hi(w.z), bf16_lo(w.w), bf16_hi(w.w));
  }
}

/* Element offset of token 0 of head (b, h) of a tensor of S tokens a head
 * in `layout` (vsa_head_offset, with b and h from the grid instead of a
 * 64-bit division), and the distance between tokens (vsa_token_stride;
 * H·D < 2^23 fits in int). */
__device__ __forceinline__ int64_t
ref_head(int layout, int b, int h, int H, int S, int D)
{
  return layout == VSA_BSHD ? ((int64_t)b * S * H + h) * D : ((int64_t)b * H + h) * S * D;
}

__device__ __forceinline__ int
ref_ld(int layout, int H, int D)
{
  return layout == VSA_BSHD ? H * D : D;
}

/* Max / sum over the 16 lanes that share one ty (xor offsets < 16 stay in
 * the half warp). */
__device__ __forceinline__ float
row_max16(float x)
{
  for (int off = 8; off > 0; off >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

__device__ __forceinline__ float
row_sum16(float x)
{
  for (int off = 8; off > 0; off >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// ---------------------------------------------------------------------------
// Micro-GEMMs on shared-memory tiles (every thread of the CTA takes part)

/* NT: acc[a][b] += Σ_d A[ty+16a][d] · B[tx+16b][d], d in [0, D).
 * A reads are 2 addresses per warp (broadcast); B reads 16 rows whose padded
 * stride puts consecutive rows 4 banks apart: conflict-free. */
template <int D>
__device__ __forceinline__ void
gemm_nt(float acc[4][4], const float *A, const float *B, int ty, int tx)
{
  constexpr int LD = RefTile<D>::LD;
#pragma unroll 2
  for (int d = 0; d < D; d += 4) {
    float4 a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
      a[i] = *reinterpret_cast<const float4 *>(A + (ty + 16 * i) * LD + d);
#pragma unroll
    for (int i = 0; i < 4; i++)
      b[i] = *reinterpret_cast<const float4 *>(B + (tx + 16 * i) * LD + d);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) {
        acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
        acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
        acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
        acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
      }
  }
}

/* acc[a][4g+e] += x · b[g].{e}: one row of an outer product. */
template <int G>
__device__ __forceinline__ void
axpy_row(float *acc, float x, const float4 *b)
{
#pragma unroll
  for (int g = 0; g < G; g++) {
    acc[4 * g + 0] = fmaf(x, b[g].x, acc[4 * g + 0]);
    acc[4 * g + 1] = fmaf(x, b[g].y, acc[4 * g + 1]);
    acc[4 * g + 2] = fmaf(x, b[g].z, acc[4 * g + 2]);
    acc[4 * g + 3] = fmaf(x, b[g].w, acc[4 * g + 3]);
  }
}

/* NN: acc[a][4g+e] += Σ_c A[ty+16a][c] · B[c][64g+4tx+e], c in [0, 64);
 * A is a 64×64 tile (row stride REF_LP), B a 64×D operand tile. */
template <int D>
__device__ __forceinline__ void
gemm_nn(float acc[4][D / 16], const float *A, const float *B, int ty, int tx)
{
  constexpr int LD = RefTile<D>::LD, G = RefTile<D>::G;
#pragma unroll 2
  for (int c = 0; c < REF_BLK; c += 4) {
    float4 a[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
      a[i] = *reinterpret_cast<const float4 *>(A + (ty + 16 * i) * REF_LP + c);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
      float4 b[G];
#pragma unroll
      for (int g = 0; g < G; g++)
        b[g] = *reinterpret_cast<const float4 *>(B + (c + kk) * LD + 64 * g +
                                                 4 * tx);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float x = kk == 0 ? a[i].x : kk == 1 ? a[i].y
                      : kk == 2 ? a[i].z : a[i].w;
        axpy_row<G>(acc[i], x, b);
      }
    }
  }
}

/* TN: acc[a][4g+e] += Σ_r A[r][4ty+a] · B[r][64g+4tx+e], r in [0, 64);
 * A is a 64×64 tile indexed [r][row] (row stride REF_LP), B a 64×D tile. */
template <int D>
__device__ __forceinline__ void
gemm_tn(float acc[4][D / 16], const float *A, const float *B, int ty, int tx)
{
  constexpr int LD = RefTile<D>::LD, G = RefTile<D>::G;
#pragma unroll 4
  for (int r = 0; r < REF_BLK; r++) {
    const float4 a = *reinterpret_cast<const float4 *>(A + r * REF_LP + 4 * ty);
    float4 b[G];
#pragma unroll
    for (int g = 0; g < G; g++)
      b[g] = *reinterpret_cast<const float4 *>(B + r * LD + 64 * g + 4 * tx);
    axpy_row<G>(acc[0], a.x, b);
    axpy_row<G>(acc[1], a.y, b);
    axpy_row<G>(acc[2], a.z, b);
    axpy_row<G>(acc[3], a.w, b);
  }
}

/* Store a thread's 4×D/16 NN/TN-layout tile row `row` of a [*, D] f32
 * tensor as float4s, times `scale`, or zeros when `zero`. */
template <int D>
__device__ __forceinline__ void
store_row(float *dst, const float *acc, float scale, bool zero, int tx)
{
#pragma unroll
  for (int g = 0; g < RefTile<D>::G; g++) {
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (!zero)
      x = make_float4(scale * acc[4 * g + 0], scale * acc[4 * g + 1],
                      scale * acc[4 * g + 2], scale * acc[4 * g + 3]);
    *reinterpret_cast<float4 *>(dst + 64 * g + 4 * tx) = x;
  }
}

// ---------------------------------------------------------------------------
// Forward: one CTA per (q block i, head h, batch b)
//
// Thread tiles: S, P (64×64): rows ty+16a, cols tx+16b (NT layout);
// O accumulator (64×D): rows ty+16a, cols 64g+4tx+e (NN layout), so each
// thread's softmax rows are also its O rows. Per row a thread keeps the
// running max m (row-wide, via shuffles) and its partial sum l (summed over
// the 16 lanes at the end). Shared memory: Q, K, V tiles; P reuses K's space
// once S is computed.

template <int D>
__global__ void __launch_bounds__(REF_THREADS, 2)
bsa_forward_ref_kernel(const uint16_t *__restrict__ q,
                       const uint16_t *__restrict__ k,
                       const uint16_t *__restrict__ v,
                       const int32_t *__restrict__ q2k_idx,
                       const int32_t *__restrict__ q2k_num, int width,
                       const int32_t *__restrict__ vbs, float *__restrict__ o,
                       float *__restrict__ lse, int H, int Sq, int Skv,
                       float scale2, int sub, int layout)
{
  constexpr int FL = RefTile<D>::FLOATS, G = RefTile<D>::G;
  static_assert(REF_BLK * REF_LP <= FL, "P must fit in K's tile");
  extern __shared__ float4 smem4[];
  float *Qs = reinterpret_cast<float *>(smem4), *Ks = Qs + FL, *Vs = Ks + FL;
  float *Ps = Ks; /* P overwrites K after S = Q Kᵀ (barrier between) */

  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z; /* i: q tile */
  const int nq = Sq / (REF_BLK * sub), nkv = Skv / (REF_BLK * sub); /* blocks */
  const int64_t bh = (int64_t)b * H + h, row = bh * nq + i / sub;
  const int ld = ref_ld(layout, H, D); /* token to token */
  const int64_t kvo = ref_head(layout, b, h, H, Skv, D);
  const int64_t qo = ref_head(layout, b, h, H, Sq, D) + (int64_t)i * REF_BLK * ld;
  const uint16_t *kh = k + kvo, *vh = v + kvo;
  const int32_t *list = q2k_idx + row * width;
  const int count = clamp_int(q2k_num[row], 0, width);

  load_tile<D>(Qs, q + qo, ld, REF_BLK);

  float acc[4][D / 16], m[4], l[4];
#pragma unroll
  for (int a = 0; a < 4; a++) {
    m[a] = -INFINITY;
    l[a] = 0.f;
#pragma unroll
    for (int e = 0; e < D / 16; e++) acc[a][e] = 0.f;
  }

  for (int n = 0; n < count * sub; n++) {
    const int jb = list[n / sub], part = n % sub; /* kv block, its tile */
    if (jb < 0 || jb >= nkv) continue; /* bad index: skip, never fault */
    const int nv = clamp_int(vbs[jb] - REF_BLK * part, 0, REF_BLK);
    if (nv == 0) continue; /* no valid key: contributes nothing */
    const int j = jb * sub + part; /* kv tile */

    __syncthreads(); /* previous P·V done reading Ps (= Ks) and Vs */
    load_tile<D>(Ks, kh + (int64_t)j * REF_BLK * ld, ld, nv);
    load_tile<D>(Vs, vh + (int64_t)j * REF_BLK * ld, ld, nv);
    __syncthreads();

    float s[4][4] = {};
    gemm_nt<D>(s, Qs, Ks, ty, tx);

    /* Online softmax, base 2. nv >= 1, so each row max is finite and
     * exp2(m_old − m_new) is 0 (not NaN) on a row's first valid block. */
    float p[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++) {
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4; c++) {
        s[a][c] *= scale2;
        if (tx + 16 * c < nv) mx = fmaxf(mx, s[a][c]);
      }
      const float m_new = fmaxf(m[a], row_max16(mx));
      const float alpha = exp2f(m[a] - m_new);
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 4; c++) {
        p[a][c] = tx + 16 * c < nv ? exp2f(s[a][c] - m_new) : 0.f;
        sum += p[a][c];
      }
      l[a] = l[a] * alpha + sum;
      m[a] = m_new;
#pragma unroll
      for (int e = 0; e < D / 16; e++) acc[a][e] *= alpha;
    }

    __syncthreads(); /* every thread done reading Ks */
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
      for (int c = 0; c < 4; c++)
        Ps[(ty + 16 * a) * REF_LP + tx + 16 * c] = p[a][c];
    __syncthreads();

    gemm_nn<D>(acc, Ps, Vs, ty, tx);
  }

  /* o = acc / l; a row that never saw a valid key (m still −inf) gets
   * o = 0 and the empty-row lse. */
#pragma unroll
  for (int a = 0; a < 4; a++) {
    const float lsum = row_sum16(l[a]);
    const bool empty = m[a] == -INFINITY;
    const int64_t r = bh * Sq + (int64_t)i * REF_BLK + ty + 16 * a;
    float *orow = o + qo + (int64_t)(ty + 16 * a) * ld;
#pragma unroll
    for (int g = 0; g < G; g++) {
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (!empty)
        x = make_float4(acc[a][4 * g + 0] / lsum, acc[a][4 * g + 1] / lsum,
                        acc[a][4 * g + 2] / lsum, acc[a][4 * g + 3] / lsum);
      *reinterpret_cast<float4 *>(orow + 64 * g + 4 * tx) = x;
    }
    if (tx == 0) lse[r] = empty ? VSA_LSE_EMPTY : m[a] + log2f(lsum);
  }
}

// ---------------------------------------------------------------------------
// Delta = rowsum(dO∘o) in fp32: one warp per q row, 8 rows per CTA.

__global__ void __launch_bounds__(REF_THREADS)
bsa_delta_ref_kernel(const uint16_t *__restrict__ dO,
                     const uint16_t *__restrict__ o,
                     float *__restrict__ delta, int64_t rows, int D, int H,
                     int Sq, int layout)
{
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = (int64_t)blockIdx.x * (REF_THREADS / 32) + warp;
  if (r >= rows) return;
  /* Row r = bh·Sq + t of dO and o in the layout. */
  const int64_t bh = r / Sq, t = r - bh * Sq;
  const int64_t off = vsa_head_offset(layout, H, Sq, D, bh) + t * vsa_token_stride(layout, H, D);
  /* Pairs of bf16 as 32-bit words (D is even, rows 4-byte aligned). */
  const uint32_t *a = reinterpret_cast<const uint32_t *>(dO + off);
  const uint32_t *b = reinterpret_cast<const uint32_t *>(o + off);
  float acc = 0.f;
  for (int w = lane; w < D / 2; w += 32) {
    const uint32_t x = __ldg(a + w), y = __ldg(b + w);
    acc = fmaf(bf16_lo(x), bf16_lo(y), acc);
    acc = fmaf(bf16_hi(x), bf16_hi(y), acc);
  }
  for (int off = 16; off > 0; off >>= 1)
    acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) delta[r] = acc;
}

// ---------------------------------------------------------------------------
// Backward dk/dv: one CTA per (kv block j, head h, batch b), over its k2q
// list; dk, dv stay in registers for the whole list (4 GEMMs per pair).
//
// Thread tiles: S, dP, P, dS (64 q rows × 64 kv cols): rows ty+16a, cols
// tx+16b (NT layout); dk, dv accumulators (64 kv rows × D): kv rows 4ty+a,
// cols 64g+4tx+e (TN layout). P and dS go through shared memory as [r][c]
// tiles, read back transposed by the TN GEMMs. Shared memory: K, V (once),
// Q, dO (per q block), P, dS, lse, Delta.

template <int D>
__global__ void __launch_bounds__(REF_THREADS, D <= 64 ? 2 : 1)
bsa_backward_dkdv_ref_kernel(const uint16_t *__restrict__ dO,
                             const uint16_t *__restrict__ q,
                             const uint16_t *__restrict__ k,
                             const uint16_t *__restrict__ v,
                             const float *__restrict__ lse,
                             const float *__restrict__ delta,
                             const int32_t *__restrict__ k2q_idx,
                             const int32_t *__restrict__ k2q_num, int width,
                             const int32_t *__restrict__ vbs,
                             float *__restrict__ dk, float *__restrict__ dv,
                             int H, int Sq, int Skv, float sm_scale,
                             float scale2, int sub, int layout)
{
  constexpr int FL = RefTile<D>::FLOATS;
  extern __shared__ float4 smem4[];
  float *Ks = reinterpret_cast<float *>(smem4), *Vs = Ks + FL;
  float *Qs = Vs + FL, *dOs = Qs + FL;
  float *Ps = dOs + FL, *dSs = Ps + REF_BLK * REF_LP;
  float *lse_s = dSs + REF_BLK * REF_LP, *delta_s = lse_s + REF_BLK;

  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z; /* j: kv tile */
  const int nq = Sq / (REF_BLK * sub), nkv = Skv / (REF_BLK * sub); /* blocks */
  const int64_t bh = (int64_t)b * H + h, row = bh * nkv + j / sub;
  const int64_t q0 = bh * Sq; /* first q row of this (b, h): lse, Delta */
  const int ld = ref_ld(layout, H, D); /* token to token */
  const int nv = clamp_int(vbs[j / sub] - REF_BLK * (j % sub), 0, REF_BLK);
  /* A block without valid keys has dk = dv = 0: skip its list. */
  const int count = nv == 0 ? 0 : clamp_int(k2q_num[row], 0, width);
  const int32_t *list = k2q_idx + row * width;

  float dk_acc[4][D / 16], dv_acc[4][D / 16];
#pragma unroll
  for (int a = 0; a < 4; a++)
#pragma unroll
    for (int e = 0; e < D / 16; e++) dk_acc[a][e] = dv_acc[a][e] = 0.f;

  /* Token 0 of kv tile j of this head in k, v, dk, dv. */
  const int64_t kvo = ref_head(layout, b, h, H, Skv, D) + (int64_t)j * REF_BLK * ld;
  if (count > 0) {
    load_tile<D>(Ks, k + kvo, ld, nv);
    load_tile<D>(Vs, v + kvo, ld, nv);
  }

  for (int n = 0; n < count * sub; n++) {
    const int ib = list[n / sub]; /* q block; its tile n % sub */
    if (ib < 0 || ib >= nq) continue; /* bad index: skip, never fault */
    const int64_t t0 = ((int64_t)ib * sub + n % sub) * REF_BLK, r0 = q0 + t0;

    __syncthreads(); /* previous TN GEMMs done with Qs, dOs, Ps, dSs */
    /* Token t0 of this head in q, dO (computed here, not held across the
     * loop: at D = 64 registers are short). */
    const int64_t qo = ref_head(layout, blockIdx.z, blockIdx.y, H, Sq, D) + t0 * ld;
    load_tile<D>(Qs, q + qo, ld, REF_BLK);
    load_tile<D>(dOs, dO + qo, ld, REF_BLK);
    if (threadIdx.x < REF_BLK) lse_s[threadIdx.x] = lse[r0 + threadIdx.x];
    else if (threadIdx.x < 2 * REF_BLK)
      delta_s[threadIdx.x - REF_BLK] = delta[r0 + threadIdx.x - REF_BLK];
    __syncthreads();

    float s[4][4] = {}, dp[4][4] = {};
    gemm_nt<D>(s, Qs, Ks, ty, tx);   /* S  = Q Kᵀ  */
    gemm_nt<D>(dp, dOs, Vs, ty, tx); /* dP = dO Vᵀ */

    /* P = exp2(S·c − lse), dS = P (dP − Delta); 0 by selection on keys
     * past vbs, so no lse value can turn them into NaN. */
#pragma unroll
    for (int a = 0; a < 4; a++) {
      const int r = ty + 16 * a;
      const float lr = lse_s[r], dr = delta_s[r];
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const int col = tx + 16 * c;
        const bool valid = col < nv;
        const float p = valid ? exp2f(s[a][c] * scale2 - lr) : 0.f;
        Ps[r * REF_LP + col] = p;
        dSs[r * REF_LP + col] = valid ? p * (dp[a][c] - dr) : 0.f;
      }
    }
    __syncthreads();

    gemm_tn<D>(dv_acc, Ps, dOs, ty, tx); /* dv += Pᵀ dO */
    gemm_tn<D>(dk_acc, dSs, Qs, ty, tx); /* dk += dSᵀ Q */
  }

  /* Every row of the block is written; rows past vbs are exactly 0. */
#pragma unroll
  for (int a = 0; a < 4; a++) {
    const int c = 4 * ty + a;
    const int64_t off = kvo + (int64_t)c * ld;
    store_row<D>(dk + off, dk_acc[a], sm_scale, c >= nv, tx);
    store_row<D>(dv + off, dv_acc[a], 1.f, c >= nv, tx);
  }
}

// ---------------------------------------------------------------------------
// Backward dq: one CTA per (q block i, head h, batch b), over its q2k list,
// recomputing S and dP (3 GEMMs per pair); dq stays in registers.
//
// Thread tiles: S, dP, dS (64×64): rows ty+16a, cols tx+16b (NT layout);
// dq accumulator (64×D): rows ty+16a, cols 64g+4tx+e (NN layout), so a
// thread's lse and Delta (4 rows) sit in registers. Shared memory: Q, dO
// (once), K, V (per kv block), dS.

template <int D>
__global__ void __launch_bounds__(REF_THREADS, D <= 64 ? 2 : 1)
bsa_backward_dq_ref_kernel(const uint16_t *__restrict__ dO,
                           const uint16_t *__restrict__ q,
                           const uint16_t *__restrict__ k,
                           const uint16_t *__restrict__ v,
                           const float *__restrict__ lse,
                           const float *__restrict__ delta,
                           const int32_t *__restrict__ q2k_idx,
                           const int32_t *__restrict__ q2k_num, int width,
                           const int32_t *__restrict__ vbs,
                           float *__restrict__ dq, int H, int Sq, int Skv,
                           float sm_scale, float scale2, int sub, int layout)
{
  constexpr int FL = RefTile<D>::FLOATS;
  extern __shared__ float4 smem4[];
  float *Qs = reinterpret_cast<float *>(smem4), *dOs = Qs + FL;
  float *Ks = dOs + FL, *Vs = Ks + FL, *dSs = Vs + FL;

  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z; /* i: q tile */
  const int nq = Sq / (REF_BLK * sub), nkv = Skv / (REF_BLK * sub); /* blocks */
  const int64_t bh = (int64_t)b * H + h, row = bh * nq + i / sub;
  const int64_t r0 = bh * Sq + (int64_t)i * REF_BLK; /* first q row: lse, Delta */
  const int ld = ref_ld(layout, H, D); /* token to token */
  /* Token 0 of q tile i in q, dO, dq, and of this head in k, v. */
  const int64_t qo = ref_head(layout, b, h, H, Sq, D) + (int64_t)i * REF_BLK * ld;
  const int64_t kvo = ref_head(layout, b, h, H, Skv, D);
  const uint16_t *kh = k + kvo, *vh = v + kvo;
  const int32_t *list = q2k_idx + row * width;
  const int count = clamp_int(q2k_num[row], 0, width);

  float dq_acc[4][D / 16], lr[4], dr[4];
#pragma unroll
  for (int a = 0; a < 4; a++) {
    lr[a] = lse[r0 + ty + 16 * a];
    dr[a] = delta[r0 + ty + 16 * a];
#pragma unroll
    for (int e = 0; e < D / 16; e++) dq_acc[a][e] = 0.f;
  }

  if (count > 0) {
    load_tile<D>(Qs, q + qo, ld, REF_BLK);
    load_tile<D>(dOs, dO + qo, ld, REF_BLK);
  }

  for (int n = 0; n < count * sub; n++) {
    const int jb = list[n / sub], part = n % sub; /* kv block, its tile */
    if (jb < 0 || jb >= nkv) continue; /* bad index: skip, never fault */
    const int nv = clamp_int(vbs[jb] - REF_BLK * part, 0, REF_BLK);
    if (nv == 0) continue; /* no valid key: dS = 0 */
    const int j = jb * sub + part; /* kv tile */

    __syncthreads(); /* previous dS·K done with Ks, Vs, dSs */
    load_tile<D>(Ks, kh + (int64_t)j * REF_BLK * ld, ld, nv);
    load_tile<D>(Vs, vh + (int64_t)j * REF_BLK * ld, ld, nv);
    __syncthreads();

    float s[4][4] = {}, dp[4][4] = {};
    gemm_nt<D>(s, Qs, Ks, ty, tx);   /* S  = Q Kᵀ  */
    gemm_nt<D>(dp, dOs, Vs, ty, tx); /* dP = dO Vᵀ */

#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const int col = tx + 16 * c;
        float ds = 0.f;
        if (col < nv)
          ds = exp2f(s[a][c] * scale2 - lr[a]) * (dp[a][c] - dr[a]);
        dSs[(ty + 16 * a) * REF_LP + col] = ds;
      }
    __syncthreads();

    gemm_nn<D>(dq_acc, dSs, Ks, ty, tx); /* dq += dS K */
  }

  /* Rows with no valid key accumulated nothing: dq = 0 exactly. */
#pragma unroll
  for (int a = 0; a < 4; a++)
    store_row<D>(dq + qo + (int64_t)(ty + 16 * a) * ld, dq_acc[a], sm_scale, false, tx);
}

// ---------------------------------------------------------------------------
// Launchers (C linkage, prototypes in kernels.h)

/* Shapes the GPU path takes; anything else is cudaErrorInvalidValue. */
static bool
ref_shape_ok(const vsa_shape *s)
{
  return s && s->B >= 1 && s->H >= 1 && s->B <= 65535 && s->H <= 65535 &&
         (s->layout == VSA_BHSD || s->layout == VSA_BSHD) &&
         s->block >= REF_BLK && s->block <= VSA_BLOCK_MAX && s->block % REF_BLK == 0 &&
         s->Sq >= 0 && s->Skv >= 0 && s->Sq % s->block == 0 &&
         s->Skv % s->block == 0 && (s->D == 64 || s->D == 128);
}

/* bf16 tiles are read as uint4 and f32 outputs written as float4. */
static bool
aligned16(const void *p)
{
  return ((uintptr_t)p & 15u) == 0;
}

template <int D>
static cudaError_t
forward_ref_launch(const vsa_shape *s, const uint16_t *d_q,
                   const uint16_t *d_k, const uint16_t *d_v,
                   const int32_t *d_q2k_idx, const int32_t *d_q2k_num,
                   int q2k_width, const int32_t *d_vbs, float *d_o,
                   float *d_lse, cudaStream_t stream)
{
  const size_t smem = 3 * sizeof(float) * RefTile<D>::FLOATS;
  cudaError_t e = cudaFuncSetAttribute(
      bsa_forward_ref_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      (int)smem);
  if (e != cudaSuccess) return e;
  const dim3 grid(s->Sq / REF_BLK, s->H, s->B);
  bsa_forward_ref_kernel<D><<<grid, REF_THREADS, smem, stream>>>(
      d_q, d_k, d_v, d_q2k_idx, d_q2k_num, q2k_width, d_vbs, d_o, d_lse,
      s->H, s->Sq, s->Skv, s->sm_scale * (float)VSA_LOG2E, s->block / REF_BLK, s->layout);
  return cudaGetLastError();
}

extern "C" cudaError_t
bsa_forward_ref(const vsa_shape *s, const uint16_t *d_q, const uint16_t *d_k,
                const uint16_t *d_v, const int32_t *d_q2k_idx,
                const int32_t *d_q2k_num, int q2k_width, const int32_t *d_vbs,
                float *d_o, float *d_lse, cudaStream_t stream)
{
  if (!ref_shape_ok(s) || q2k_width < 0 || !aligned16(d_q) ||
      !aligned16(d_k) || !aligned16(d_v) || !aligned16(d_o))
    return cudaErrorInvalidValue;
  if (s->Sq == 0) return cudaSuccess; /* nothing to write */
  if (s->D == 64)
    return forward_ref_launch<64>(s, d_q, d_k, d_v, d_q2k_idx, d_q2k_num,
                                  q2k_width, d_vbs, d_o, d_lse, stream);
  return forward_ref_launch<128>(s, d_q, d_k, d_v, d_q2k_idx, d_q2k_num,
                                 q2k_width, d_vbs, d_o, d_lse, stream);
}

template <int D>
static cudaError_t
backward_ref_launch(const vsa_shape *s, const uint16_t *d_dO,
                    const uint16_t *d_q, const uint16_t *d_k,
                    const uint16_t *d_v, const float *d_lse,
                    const int32_t *d_k2q_idx, const int32_t *d_k2q_num,
                    int k2q_width, const int32_t *d_q2k_idx,
                    const int32_t *d_q2k_num, int q2k_width,
                    const int32_t *d_vbs, float *d_dq, float *d_dk,
                    float *d_dv, const float *d_delta, cudaStream_t stream)
{
  const size_t tile = sizeof(float) * RefTile<D>::FLOATS;
  const size_t p64 = sizeof(float) * REF_BLK * REF_LP;
  const size_t smem_dkdv = 4 * tile + 2 * p64 + 2 * sizeof(float) * REF_BLK;
  const size_t smem_dq = 4 * tile + p64;
  cudaError_t e = cudaFuncSetAttribute(
      bsa_backward_dkdv_ref_kernel<D>,
      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dkdv);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(bsa_backward_dq_ref_kernel<D>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)smem_dq);
  if (e != cudaSuccess) return e;

  const float scale2 = s->sm_scale * (float)VSA_LOG2E;
  if (s->Skv > 0) {
    const dim3 grid(s->Skv / REF_BLK, s->H, s->B);
    bsa_backward_dkdv_ref_kernel<D><<<grid, REF_THREADS, smem_dkdv, stream>>>(
        d_dO, d_q, d_k, d_v, d_lse, d_delta, d_k2q_idx, d_k2q_num, k2q_width,
        d_vbs, d_dk, d_dv, s->H, s->Sq, s->Skv, s->sm_scale, scale2, s->block / REF_BLK,
        s->layout);
  }
  if (s->Sq > 0) {
    const dim3 grid(s->Sq / REF_BLK, s->H, s->B);
    bsa_backward_dq_ref_kernel<D><<<grid, REF_THREADS, smem_dq, stream>>>(
        d_dO, d_q, d_k, d_v, d_lse, d_delta, d_q2k_idx, d_q2k_num, q2k_width,
        d_vbs, d_dq, s->H, s->Sq, s->Skv, s->sm_scale, scale2, s->block / REF_BLK,
        s->layout);
  }
  return cudaGetLastError();
}

/* Delta first (the dk/dv kernel reads every q block's), then dk/dv over
 * k2q and dq over q2k; all on `stream`, so in order. */
extern "C" cudaError_t
bsa_backward_ref(const vsa_shape *s, const uint16_t *d_dO, const uint16_t *d_q,
                 const uint16_t *d_k, const uint16_t *d_v, const uint16_t *d_o,
                 const float *d_lse, const int32_t *d_k2q_idx,
                 const int32_t *d_k2q_num, int k2q_width,
                 const int32_t *d_q2k_idx, const int32_t *d_q2k_num,
                 int q2k_width, const int32_t *d_vbs, float *d_dq,
                 float *d_dk, float *d_dv, float *d_delta, cudaStream_t stream)
{
  if (!ref_shape_ok(s) || k2q_width < 0 || q2k_width < 0 ||
      !aligned16(d_dO) || !aligned16(d_q) || !aligned16(d_k) ||
      !aligned16(d_v) || !aligned16(d_o) || !aligned16(d_dq) ||
      !aligned16(d_dk) || !aligned16(d_dv))
    return cudaErrorInvalidValue;

  const int64_t rows = (int64_t)s->B * s->H * s->Sq;
  if (rows > 0) {
    const int per_cta = REF_THREADS / 32;
    const int64_t ctas = (rows + per_cta - 1) / per_cta;
    if (ctas > 0x7fffffff) return cudaErrorInvalidValue;
    bsa_delta_ref_kernel<<<(unsigned)ctas, REF_THREADS, 0, stream>>>(
        d_dO, d_o, d_delta, rows, s->D, s->H, s->Sq, s->layout);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (s->D == 64)
    return backward_ref_launch<64>(s, d_dO, d_q, d_k, d_v, d_lse, d_k2q_idx,
                                   d_k2q_num, k2q_width, d_q2k_idx, d_q2k_num,
                                   q2k_width, d_vbs, d_dq, d_dk, d_dv,
                                   d_delta, stream);
  return backward_ref_launch<128>(s, d_dO, d_q, d_k, d_v, d_lse, d_k2q_idx,
                                  d_k2q_num, k2q_width, d_q2k_idx, d_q2k_num,
                                  q2k_width, d_vbs, d_dq, d_dk, d_dv, d_delta,
                                  stream);
}
