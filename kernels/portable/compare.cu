/* compare.cu — comparison sums of a tensor against a reference, in fp64.
 *
 * vsa_compare adds into *d_sums: diff2 = Σ(x − ref)², ref2 = Σ ref²,
 * x2 = Σ x², max_abs = max |x − ref|, all over the pairs where both values
 * are finite; nonfinite_x / nonfinite_ref count NaN and Inf on each side;
 * n grows by n. Either input may be bf16 (uint16 bits), f32 or f64: one
 * kernel instance per dtype pair, so the loop has no per-element switch.
 *
 * Grid-stride loop, warp shuffles and one shared-memory step per block,
 * then one atomic per field per block: atomicAdd on double (sm_60+) and
 * atomicMax on max_abs's bit pattern as unsigned long long, which orders
 * like the value because every max is >= 0. The summation order varies
 * with the grid, so results agree with src/core/compare_cpu.c to rounding.
 *
 * Build: nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a
 *   -gencode=arch=compute_100a,code=sm_100a
 *   -gencode=arch=compute_80,code=compute_80 -Xptxas -v -c
 *   kernels/compare.cu -I src -o /tmp/compare.o
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "../kernels.h"

#define CMP_THREADS 256
#define CMP_WARPS (CMP_THREADS / 32)

// ----------------------------------------------------------------------------
// CUDA kernels

template <int DT>
__device__ __forceinline__ double
load_elem(const void *p, int64_t i)
{
  if (DT == VSA_BF16) {
    uint32_t bits = __ldg((const unsigned short *)p + i);
    return (double)__uint_as_float(bits << 16);
  }
  if (DT == VSA_F32) return (double)__ldg((const float *)p + i);
  return __ldg((const double *)p + i);
}

template <int XT, int RT>
__global__ void __launch_bounds__(CMP_THREADS)
vsa_compare_kernel(const void *__restrict__ x, const void *__restrict__ ref,
                   int64_t n, vsa_compare_sums *sums)
{
  double d2 = 0, r2 = 0, x2 = 0, mx = 0;
  unsigned long long bad_x = 0, bad_r = 0;
  int64_t stride = (int64_t)gridDim.x * CMP_THREADS;
#pragma unroll 4
  for (int64_t i = (int64_t)blockIdx.x * CMP_THREADS + threadIdx.x; i < n;
       i += stride) {
    double a = load_elem<XT>(x, i), r = load_elem<RT>(ref, i);
    bool fa = isfinite(a), fr = isfinite(r);
    bad_x += !fa;
    bad_r += !fr;
    if (fa && fr) {
      double d = a - r;
      d2 += d * d;
      r2 += r * r;
      x2 += a * a;
      mx = fmax(mx, fabs(d));
    }
  }

#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    d2 += __shfl_down_sync(0xffffffffu, d2, off);
    r2 += __shfl_down_sync(0xffffffffu, r2, off);
    x2 += __shfl_down_sync(0xffffffffu, x2, off);
    mx = fmax(mx, __shfl_down_sync(0xffffffffu, mx, off));
    bad_x += __shfl_down_sync(0xffffffffu, bad_x, off);
    bad_r += __shfl_down_sync(0xffffffffu, bad_r, off);
  }
  __shared__ double sd[4][CMP_WARPS];
  __shared__ unsigned long long sc[2][CMP_WARPS];
  int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    sd[0][w] = d2;
    sd[1][w] = r2;
    sd[2][w] = x2;
    sd[3][w] = mx;
    sc[0][w] = bad_x;
    sc[1][w] = bad_r;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < CMP_WARPS; k++) {
      d2 += sd[0][k];
      r2 += sd[1][k];
      x2 += sd[2][k];
      mx = fmax(mx, sd[3][k]);
      bad_x += sc[0][k];
      bad_r += sc[1][k];
    }
    atomicAdd(&sums->diff2, d2);
    atomicAdd(&sums->ref2, r2);
    atomicAdd(&sums->x2, x2);
    atomicMax((unsigned long long *)&sums->max_abs,
              (unsigned long long)__double_as_longlong(mx));
    if (bad_x) atomicAdd((unsigned long long *)&sums->nonfinite_x, bad_x);
    if (bad_r) atomicAdd((unsigned long long *)&sums->nonfinite_ref, bad_r);
    if (blockIdx.x == 0)
      atomicAdd((unsigned long long *)&sums->n, (unsigned long long)n);
  }
}

// ----------------------------------------------------------------------------
// Kernel launcher

template <int XT>
static void
launch_ref(vsa_dtype rt, const void *x, const void *ref, int64_t n,
           vsa_compare_sums *sums, unsigned grid, cudaStream_t stream)
{
  switch (rt) {
  case VSA_BF16:
    vsa_compare_kernel<XT, VSA_BF16><<<grid, CMP_THREADS, 0, stream>>>(
        x, ref, n, sums);
    break;
  case VSA_F32:
    vsa_compare_kernel<XT, VSA_F32><<<grid, CMP_THREADS, 0, stream>>>(
        x, ref, n, sums);
    break;
  default:
    vsa_compare_kernel<XT, VSA_F64><<<grid, CMP_THREADS, 0, stream>>>(
        x, ref, n, sums);
    break;
  }
}

static int
is_float_dtype(vsa_dtype t)
{
  return t == VSA_BF16 || t == VSA_F32 || t == VSA_F64;
}

/* x, ref: [n] of any float dtype; d_sums: one vsa_compare_sums, zeroed by
 * the caller before the first call and accumulated across calls. */
extern "C" cudaError_t
vsa_compare(const void *d_x, vsa_dtype x_dtype, const void *d_ref,
            vsa_dtype ref_dtype, int64_t n, vsa_compare_sums *d_sums,
            cudaStream_t stream)
{
  if (!is_float_dtype(x_dtype) || !is_float_dtype(ref_dtype) || n < 0 ||
      !d_sums)
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!d_x || !d_ref) return cudaErrorInvalidValue;

  /* Enough blocks to fill every SM, no more: each then loops. */
  int dev = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return e;
  int64_t want = (n + CMP_THREADS - 1) / CMP_THREADS, cap = (int64_t)sms * 8;
  unsigned grid = (unsigned)(want < cap ? want : cap);

  switch (x_dtype) {
  case VSA_BF16:
    launch_ref<VSA_BF16>(ref_dtype, d_x, d_ref, n, d_sums, grid, stream);
    break;
  case VSA_F32:
    launch_ref<VSA_F32>(ref_dtype, d_x, d_ref, n, d_sums, grid, stream);
    break;
  default:
    launch_ref<VSA_F64>(ref_dtype, d_x, d_ref, n, d_sums, grid, stream);
    break;
  }
  return cudaGetLastError();
}
