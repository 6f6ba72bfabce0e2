/* tensor_ops.cu — elementwise device work behind the tensor core
 * (src/core/tensor.c): fill, dtype conversion and strided gather. Grid-stride
 * loops with 64-bit indices; nothing here is performance critical.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "../kernels.h"

// ----------------------------------------------------------------------------
// element load/store as double, for every dtype

__device__ __forceinline__ double
load_as_double(const void *p, vsa_dtype t, int64_t i)
{
  switch (t) {
  case VSA_BF16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
  case VSA_F32: return (double)((const float *)p)[i];
  case VSA_F64: return ((const double *)p)[i];
  case VSA_I32: return (double)((const int32_t *)p)[i];
  case VSA_I64: return (double)((const int64_t *)p)[i];
  default: return 0.0;
  }
}

__device__ __forceinline__ int64_t
clamp_to_int(double v, double lo, double hi)
{
  if (isnan(v)) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}

__device__ __forceinline__ void
store_from_double(void *p, vsa_dtype t, int64_t i, double v)
{
  switch (t) {
  case VSA_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
  case VSA_F32: ((float *)p)[i] = (float)v; break;
  case VSA_F64: ((double *)p)[i] = v; break;
  case VSA_I32: ((int32_t *)p)[i] = (int32_t)clamp_to_int(v, -2147483648.0, 2147483647.0); break;
  case VSA_I64: ((int64_t *)p)[i] = clamp_to_int(v, -9.2233720368547758e18, 9.2233720368547748e18); break;
  default: break;
  }
}

static unsigned
grid_for(int64_t n)
{
  int64_t g = (n + 255) / 256;
  return (unsigned)(g < 65536 ? (g > 0 ? g : 1) : 65536);
}

// ----------------------------------------------------------------------------
// kernels

__global__ void
fill_kernel(void *d, vsa_dtype t, int64_t n, double value)
{
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    store_from_double(d, t, i, value);
}

__global__ void
convert_kernel(void *dst, vsa_dtype dt, const void *src, vsa_dtype st,
               int64_t n)
{
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (dt == VSA_I64 && st == VSA_I32)
      ((int64_t *)dst)[i] = ((const int32_t *)src)[i];
    else if (dt == VSA_I32 && st == VSA_I64) /* wraps like a C cast */
      ((int32_t *)dst)[i] = (int32_t)((const int64_t *)src)[i];
    else
      store_from_double(dst, dt, i, load_as_double(src, st, i));
  }
}

struct strided_view {
  int ndim;
  int64_t shape[VSA_MAX_DIMS];
  int64_t stride[VSA_MAX_DIMS];
};

template <typename T>
__global__ void
strided_copy_kernel(T *dst, const T *src, strided_view v, int64_t n)
{
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rest = i, off = 0;
    for (int d = v.ndim - 1; d >= 0; d--) {
      off += (rest % v.shape[d]) * v.stride[d];
      rest /= v.shape[d];
    }
    dst[i] = src[off];
  }
}

/* Spin for about ns nanoseconds (one thread): the deliberate slowdown used
 * to prove that `vsalab compare` flags a slower kernel. */
__global__ void
sleep_kernel(long long ns)
{
  long long t0 = clock64();
  // clock64 counts SM cycles; ~2 GHz is close enough for a test delay.
  while (clock64() - t0 < ns * 2) {
  }
}

/* Hold the stream until the host sets flag[0] (pinned, mapped), so every
 * launch of a timed call is queued before its start event fires: launch
 * gaps stay out of the sample (nvbench's blocking kernel). After timeout_ns
 * it gives up and sets flag[1]: the host then knows the call waited on the
 * GPU while it was held, and the sample is void. */
__global__ void
hold_kernel(volatile int *flag, unsigned long long timeout_ns)
{
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (flag[0] == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > timeout_ns) {
      flag[1] = 1;
      return;
    }
    __nanosleep(500);
  }
}

/* Store through a pointer no allocation covers: an illegal-address fault,
 * which leaves the CUDA context unusable (a "sticky" error). Used only to
 * prove that a faulting run ends recorded as failed with its DB intact. */
__global__ void
fault_kernel(int *bad)
{
  *bad = 1;
}

// ----------------------------------------------------------------------------
// launchers

extern "C" cudaError_t
vsa_gpu_fault(cudaStream_t stream)
{
  fault_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<int *>(16));
  return cudaGetLastError();
}

extern "C" cudaError_t
vsa_hold_stream(int *flag, double timeout_s, cudaStream_t stream)
{
  hold_kernel<<<1, 1, 0, stream>>>(flag, (unsigned long long)(timeout_s * 1e9));
  return cudaGetLastError();
}

extern "C" cudaError_t
vsa_gpu_sleep(long long ns, cudaStream_t stream)
{
  sleep_kernel<<<1, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

extern "C" cudaError_t
vsa_fill(void *d, vsa_dtype dtype, int64_t n, double value, cudaStream_t stream)
{
  if (n <= 0) return cudaSuccess;
  fill_kernel<<<grid_for(n), 256, 0, stream>>>(d, dtype, n, value);
  return cudaGetLastError();
}

extern "C" cudaError_t
vsa_convert(void *d_dst, vsa_dtype dst_dtype, const void *d_src,
            vsa_dtype src_dtype, int64_t n, cudaStream_t stream)
{
  if (n <= 0) return cudaSuccess;
  convert_kernel<<<grid_for(n), 256, 0, stream>>>(d_dst, dst_dtype, d_src,
                                                  src_dtype, n);
  return cudaGetLastError();
}

extern "C" cudaError_t
vsa_strided_copy(void *d_dst, const void *d_src, int elem_size, int ndim,
                 const int64_t *shape, const int64_t *stride,
                 cudaStream_t stream)
{
  strided_view v;
  int64_t n = 1;
  v.ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    v.shape[d] = shape[d];
    v.stride[d] = stride[d];
    n *= shape[d];
  }
  if (n <= 0) return cudaSuccess;
  switch (elem_size) {
  case 2:
    strided_copy_kernel<<<grid_for(n), 256, 0, stream>>>(
        (uint16_t *)d_dst, (const uint16_t *)d_src, v, n);
    break;
  case 4:
    strided_copy_kernel<<<grid_for(n), 256, 0, stream>>>(
        (uint32_t *)d_dst, (const uint32_t *)d_src, v, n);
    break;
  case 8:
    strided_copy_kernel<<<grid_for(n), 256, 0, stream>>>(
        (uint64_t *)d_dst, (const uint64_t *)d_src, v, n);
    break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
